"""Read a generated world from disk: the test benchmark, the train split, scenes and images.

Image ids: `w-te-000123` (test corpus), `w-te-r00012` (test reference), `w-tr-000123` (train).
Ids repeat across worlds of other sizes or seeds; `render_image`/`scene_of` resolve them in
the most recently loaded world (or the one passed), and each `Benchmark` carries a store bound
to its own world.
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .disk import (
    MANIFEST,
    PARTS,
    TEST_MANIFEST,
    generate_world,
    generation_lock,
    read_manifest,
    world_dir,
    world_problems,
)
from .render import RENDER_SIZE, render_scene
from .scene import Constraint, Scene, scene_from_row
from .shipped import index_name, install_shipped_world, shipped_world_dir

_WORLDS: dict[str, "WorldData"] = {}
_CURRENT: list["WorldData"] = []


def _read_jsonl(path: Path) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {lineno}: invalid JSON ({exc.msg})") from None
    return out


@dataclass
class WorldData:
    """The scene tables of one generated world, each read on first use: training reads only the
    train split's files, so that the test split cannot leak into it (tests/test_training_split.py).
    `manifest`: that of the part opened (TEST_MANIFEST for the benchmark, MANIFEST for the whole world);
    the train split of a world opened for its test part is generated when first read."""

    root: Path
    manifest: dict
    _train: np.ndarray | None = None
    _validation: np.ndarray | None = None
    _test_corpus: np.ndarray | None = None
    _test_refs: np.ndarray | None = None

    @property
    def key(self) -> str:
        # The checksum keeps the worlds opened in a process apart when a folder is regenerated in-process.
        return f"{self.root.resolve()}#{self.manifest.get('checksum', '')[:16]}"

    @property
    def train_scenes(self) -> np.ndarray:
        if self._train is None:
            ensure_part(self.root, self.manifest["size"], self.manifest["seed"], "full", progress=True)
            self._train = np.load(self.root / "train_scenes.npy", allow_pickle=False)
        return self._train

    @property
    def validation_scenes(self) -> np.ndarray:
        """The train split's compositional validation scenes (`w-va-` ids)."""
        if self._validation is None:
            ensure_part(self.root, self.manifest["size"], self.manifest["seed"], "full", progress=True)
            self._validation = np.load(self.root / "validation_scenes.npy", allow_pickle=False)
        return self._validation

    @property
    def test_corpus(self) -> np.ndarray:
        if self._test_corpus is None:
            self._test_corpus = np.load(self.root / "test_corpus.npy", allow_pickle=False)
        return self._test_corpus

    @property
    def test_refs(self) -> np.ndarray:
        if self._test_refs is None:
            self._test_refs = np.load(self.root / "test_refs.npy", allow_pickle=False)
        return self._test_refs

    def table_and_row(self, image_id: str) -> tuple[np.ndarray, int]:
        try:
            if image_id.startswith("w-te-r"):
                table, row = self.test_refs, int(image_id[6:])
            elif image_id.startswith("w-te-"):
                table, row = self.test_corpus, int(image_id[5:])
            elif image_id.startswith("w-tr-"):
                table, row = self.train_scenes, int(image_id[5:])
            elif image_id.startswith("w-va-"):
                table, row = self.validation_scenes, int(image_id[5:])
            else:
                raise ValueError
        except ValueError:
            raise KeyError(
                f"{image_id!r} is not a world image id (expected w-te-NNNNNN, w-te-rNNNNN, w-tr-NNNNNN or w-va-NNNNNN)"
            ) from None
        if not 0 <= row < len(table):
            raise KeyError(f"world {self.root}: no image {image_id!r} (that table has {len(table)} rows)")
        return table, row

    def scene(self, image_id: str) -> Scene:
        table, row = self.table_and_row(image_id)
        return scene_from_row(table[row])


def ensure_part(root: Path, size: str, seed: int, part: str, progress: bool = True) -> None:
    """Generate `part` of the world at `root` unless it is there intact (by size; a damaged file is named)."""
    problems = world_problems(root, size, seed, verify=False, part=part)
    if problems:
        if not problems[0].startswith("missing"):
            print(f"world {root}: regenerating ({'; '.join(problems)[:400]})", file=sys.stderr, flush=True)
        generate_world(size, seed, root, progress=progress, part=part)


def open_world(root=None, size: str = "default", seed: int = 0, progress: bool = True, part: str = "test") -> WorldData:
    """The world at `root` (default: the cache dir of size/seed), its `part` generated first if missing:
    "test" (what the benchmark reads) or "full" (the train split too)."""
    explicit = root is not None
    root = Path(root) if explicit else world_dir(size, seed)
    name = PARTS[part][0]
    manifest = read_manifest(root, name) or (read_manifest(root, MANIFEST) if explicit else None)
    if explicit and manifest is not None:  # an explicit directory is used as it is
        size, seed = manifest.get("size", size), manifest.get("seed", seed)
    ensure_part(root, size, seed, part, progress)
    manifest = read_manifest(root, name)
    key = f"{root.resolve()}#{manifest.get('checksum', '')[:16]}"
    world = _WORLDS.get(key)
    if world is None:
        world = WorldData(root, manifest)
        _WORLDS[key] = world
    _CURRENT[:] = [world]
    return world


def current_world() -> WorldData:
    if not _CURRENT:
        open_world()
    return _CURRENT[0]


def scene_of(image_id: str, world: WorldData | None = None) -> Scene:
    return (world or current_world()).scene(image_id)


# A render is a function of the scene, which the world's content checksum fixes: worlds of one content in
# other folders (a copy of a data folder, a fresh generation in an empty one) share their renders in a
# process. The world that asked last renders a miss (its scenes are those of every world of that key).
_RENDER_WORLDS: dict[str, WorldData] = {}


@functools.lru_cache(maxsize=1024)
def _render_cached(render_key: str, image_id: str, size: int):
    return render_scene(_RENDER_WORLDS[render_key].scene(image_id), size)


def pixels_fingerprint(checksum: str) -> str:
    """What fixes a world's pixels: its content checksum (the scenes), the render size, the renderer's code and the
    libraries that draw (the embedding caches, prebuilt embeddings and stored runs are keyed by it)."""
    import hashlib

    from cir_demo.utils.code_hash import code_key

    key = {
        "checksum": checksum,
        "render_size": RENDER_SIZE,
        "code": code_key(("cir_demo.world.render",), ("numpy", "pillow")),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def render_image(image_id: str, size: int | None = None, world: WorldData | None = None):
    """The image `image_id` as an RGB PIL image (rendered on demand, LRU-cached; a fresh copy)."""
    world = world or current_world()
    checksum = world.manifest.get("checksum", "")
    key = f"content#{checksum}" if checksum else world.key
    _RENDER_WORLDS[key] = world
    return _render_cached(key, image_id, int(size or RENDER_SIZE)).copy()


def render_images(root: str, image_ids: Sequence[str]) -> list:
    """The images `image_ids` of the world at `root`, as `render_image` gives them (the same pixels):
    a function of plain arguments, so that a worker process can run it (`CallableImageStore.open_many`)."""
    world = _world_at(root)
    return [render_scene(world.scene(i), RENDER_SIZE) for i in image_ids]


@functools.lru_cache(maxsize=4)
def _world_at(root: str) -> WorldData:
    """A worker process's handle on a world its parent opened (checked there)."""
    path = Path(root)
    return WorldData(path, read_manifest(path, TEST_MANIFEST))


def _background_key(scene: Scene) -> tuple:
    return (scene.place, scene.time, scene.weather, scene.style, scene.view, scene.variant % 2)


def render_batch(
    image_ids: Sequence[str], size: int | None = None, world: WorldData | None = None, progress: bool = False
) -> np.ndarray:
    """uint8 array (n, H, W, 3) of the images, in the order given.

    Rendered grouped by background so the background cache stays warm; no LRU use (this is
    for bulk rendering, e.g. training).
    """
    world = world or current_world()
    size = int(size or RENDER_SIZE)
    scenes = [world.scene(i) for i in image_ids]
    out = np.empty((len(scenes), size, size, 3), dtype=np.uint8)
    order = sorted(range(len(scenes)), key=lambda i: _background_key(scenes[i]))
    it = order
    if progress:
        from tqdm import tqdm

        it = tqdm(order, desc="render world images", unit="img")
    for i in it:
        out[i] = np.asarray(render_scene(scenes[i], size))
    return out


# --------------------------------------------------------------------------- benchmark
# the world's query splits: the two test splits share one corpus and one reference table
SPLITS = ("test", "compositional", "train")
# the files of each test split's intents and queries
TEST_SPLIT_FILES = {
    "test": ("test_intents.jsonl", "test_queries.jsonl"),
    "compositional": ("compositional_intents.jsonl", "compositional_queries.jsonl"),
}


def check_split(split: str) -> str:
    """`split` when the world has it; ValueError listing the splits otherwise."""
    if split not in SPLITS:
        raise ValueError(f"world split must be one of {', '.join(SPLITS)}, got {split!r}")
    return split


def load_world(root=None, size: str = "default", seed: int = 0, split: str = "test", progress: bool = True):
    """The world's test benchmark; split='compositional': its compositional test split (held-out edits,
    worded with a held-out template wherever a paraphrase form has several, over the same corpus); split='train': its train intents as a benchmark.

    Generates the world first when it is not on disk. Queries: six paraphrases per intent,
    ids w00001... (compositional: wn00001...), one shared `Judgments` per intent (group id = intent id).
    """
    from cir_demo.benchmarks.schema import Benchmark, CallableImageStore

    check_split(split)
    world = open_world(root, size, seed, progress=progress, part="test" if split in TEST_SPLIT_FILES else "full")
    store = CallableImageStore(
        lambda image_id, _w=world: render_image(image_id, world=_w),
        prefix="world",
        open_many=functools.partial(render_images, str(world.root)),
    )
    info = {
        "size": world.manifest["size"],
        "seed": world.manifest["seed"],
        "root": str(world.root),
        "generator_version": world.manifest["generator_version"],
        "checksum": world.manifest["checksum"],
        "render_size": RENDER_SIZE,
        "split": split,
        "counts": world.manifest["counts"],
        "corpus_fingerprint": pixels_fingerprint(world.manifest["checksum"]),
        # tiny and default worlds (and seeds) keep separate index folders instead of rebuilding each other's;
        # the test splits share one corpus, so one index
        "index_name": index_name(world.manifest["size"], world.manifest["seed"])
        + ("" if split in TEST_SPLIT_FILES else f"-{split}"),
    }
    if split in TEST_SPLIT_FILES:
        queries = _test_split_queries(world, split)
        corpus = [f"w-te-{i:06d}" for i in range(len(world.test_corpus))]
        if split != "test":  # other queries on the same content: runs and per-query caches are kept apart
            info["query_set"] = split
    else:
        queries = _train_queries(world)
        corpus = [f"w-tr-{i:06d}" for i in range(len(world.train_scenes))]
    return Benchmark(
        name="world", metric_family="pinpoint", queries=queries, corpus_ids=corpus, images=store, info=info
    )


def _test_split_queries(world: WorldData, split: str) -> list:
    from cir_demo.benchmarks.schema import Judgments, Query

    intents_file, queries_file = TEST_SPLIT_FILES[split]
    intents = {it["intent_id"]: it for it in _read_jsonl(world.root / intents_file)}
    judgments = {k: Judgments(v["positives"], v["negatives"]) for k, v in intents.items()}
    return [
        Query(
            q["query_id"],
            tuple(q["reference_ids"]),
            q["instruction"],
            q["group_id"],
            judgments[q["group_id"]],
            q["meta"],
        )
        for q in _read_jsonl(world.root / queries_file)
    ]


def _train_queries(world: WorldData) -> list:
    from cir_demo.benchmarks.schema import Judgments, Query

    from .intents import FORM_FLAGS, FORMS, length_category

    queries = []
    for gi, it in enumerate(_read_jsonl(world.root / "train_intents.jsonl")):
        j = Judgments(it["positives"], ())
        for fi, (form, text) in enumerate(zip(FORMS, it["paraphrases"])):
            meta = {
                "intent_category": it["intent_category"],
                "edit_subcategory": it["edit_subcategory"],
                "domain": it["domain"],
                "skin_tone_bucket": it["skin_tone_bucket"],
                "length_category": length_category(text),
                "paraphrase_form": form,
                "intent_kind": it["kind"],
                **FORM_FLAGS[form],
            }
            queries.append(
                Query(f"t{gi * len(FORMS) + fi + 1:06d}", tuple(it["reference_ids"]), text, it["intent_id"], j, meta)
            )
    return queries


def load_intents(root=None, size: str = "default", seed: int = 0, split: str = "test") -> list[dict]:
    """Raw intent records (constraints, focus, kind, edit, positives, negatives) of a split."""
    check_split(split)
    world = open_world(root, size, seed, progress=False, part="test" if split in TEST_SPLIT_FILES else "full")
    return _read_jsonl(world.root / f"{split}_intents.jsonl")


def intent_constraints(intent: dict) -> tuple[Constraint, ...]:
    return tuple(Constraint.from_json(c) for c in intent["constraints"])


# --------------------------------------------------------------------------- train split
@dataclass
class TrainSplit:
    """Training data: images (scenes), captions, intents and (reference, instruction, target) triplets."""

    world: WorldData
    image_ids: list[str]
    captions: dict[str, list[str]]
    triplets: list[dict]
    intents: list[dict] = field(repr=False, default_factory=list)

    @property
    def scenes(self) -> np.ndarray:
        return self.world.train_scenes

    def scene(self, image_id: str) -> Scene:
        return self.world.scene(image_id)

    def render(self, image_ids: Sequence[str], size: int | None = None, progress: bool = False) -> np.ndarray:
        return render_batch(image_ids, size, world=self.world, progress=progress)


def load_train(root=None, size: str = "default", seed: int = 0) -> TrainSplit:
    world = open_world(root, size, seed, progress=True, part="full")
    caps = {r["image_id"]: r["captions"] for r in _read_jsonl(world.root / "train_captions.jsonl")}
    ids = [f"w-tr-{i:06d}" for i in range(len(world.train_scenes))]
    return TrainSplit(
        world,
        ids,
        caps,
        _read_jsonl(world.root / "train_triplets.jsonl"),
        _read_jsonl(world.root / "train_intents.jsonl"),
    )


@dataclass
class ValidationSplit:
    """The train split's compositional validation split: intents asking only for edits the train split
    proper never shows (manifest `held_out.validation`), judged over the train images and the
    validation scenes together (`gallery_ids`: train ids, then `w-va-` ids)."""

    world: WorldData
    image_ids: list[str]
    intents: list[dict]
    train_image_ids: list[str]

    @property
    def gallery_ids(self) -> list[str]:
        return self.train_image_ids + self.image_ids

    @property
    def scenes(self) -> np.ndarray:
        """The gallery's scene table: train rows, then validation rows (row = position in gallery_ids)."""
        return np.concatenate([self.world.train_scenes, self.world.validation_scenes])


def load_validation(root=None, size: str = "default", seed: int = 0) -> ValidationSplit:
    world = open_world(root, size, seed, progress=True, part="full")
    return ValidationSplit(
        world,
        [f"w-va-{i:06d}" for i in range(len(world.validation_scenes))],
        _read_jsonl(world.root / "validation_intents.jsonl"),
        [f"w-tr-{i:06d}" for i in range(len(world.train_scenes))],
    )


@dataclass(frozen=True)
class TestCaption:
    caption_id: str
    text: str
    constraints: tuple[Constraint, ...]
    source_id: str


def load_test_captions(root=None, size: str = "default", seed: int = 0) -> list[TestCaption]:
    """Held-out captions of test images; a hit is any test image whose scene matches (`caption_hits`)."""
    world = open_world(root, size, seed, progress=False)
    return [
        TestCaption(
            r["caption_id"], r["text"], tuple(Constraint.from_json(c) for c in r["constraints"]), r["source_id"]
        )
        for r in _read_jsonl(world.root / "test_captions.jsonl")
    ]


def caption_hits(caption: TestCaption, world: WorldData | None = None) -> list[str]:
    """Every test-corpus image whose scene graph matches the caption."""
    from .scene import violation_counts

    world = world or current_world()
    idx = np.flatnonzero(violation_counts(world.test_corpus, caption.constraints) == 0)
    return [f"w-te-{i:06d}" for i in idx]


def world_on_disk(root=None, size: str = "default", seed: int = 0, split: str = "test") -> bool:
    """True when `load_world` with these arguments would find the world (the part that `split` reads)
    instead of generating it (a given `root` counts as there: loading it reports what is wrong with it)."""
    if root:
        return True
    part = "full" if split == "train" else "test"
    return not world_problems(world_dir(size, seed), size, seed, verify=False, part=part)


def install_for_loader(root=None, size: str = "default", seed: int = 0, split: str = "test") -> bool:
    """With `load_world`'s arguments: the test part `split` reads is on disk now (already there, or the
    shipped copy installed); False when it is still to be generated (or `root` is given: it is read as it is)."""
    check_split(split)
    if root or split == "train":
        return False
    folder = world_dir(size, seed)
    if not world_problems(folder, size, seed, verify=False, part="test"):
        return True
    if not shipped_world_dir(size, seed).is_dir():
        return False
    with generation_lock(folder):
        return not world_problems(folder, size, seed, verify=False, part="test") or install_shipped_world(
            folder, size, seed
        )
