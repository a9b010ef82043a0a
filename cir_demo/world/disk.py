"""The offline world on disk: its files and manifests, their checks, and `generate_world`, which
builds (generate.py) and writes a part under a file lock."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from collections import Counter
from pathlib import Path
from statistics import median
from typing import Iterable, Sequence

import numpy as np

from .generate import GENERATOR_VERSION, SIZES, BuiltWorld, TestPart, build_test_part, build_world, _progress
from .holdout import split_overlaps
from .files import DATA_FILES, MANIFEST, TEST_FILES, TEST_MANIFEST, TRAIN_FILES
from .intents import FORMS
from .shipped import generator_sha256, install_shipped_world

PARTS = {"full": (MANIFEST, DATA_FILES), "test": (TEST_MANIFEST, TEST_FILES)}
LOCK_FILE = ".generate.lock"


def _jsonl_bytes(records: Iterable[dict]) -> bytes:
    return "".join(
        json.dumps(r, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records
    ).encode("utf-8")


def _npy_bytes(table: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, table, allow_pickle=False)
    return buf.getvalue()


def world_stats(intents: Sequence[dict], corpus_size: int) -> dict:
    npos = [len(i["positives"]) for i in intents]
    nneg = [len(i["negatives"]) for i in intents]

    def dist(xs):
        xs = sorted(xs)
        return (
            {
                "min": xs[0],
                "p10": xs[len(xs) // 10],
                "median": median(xs),
                "p90": xs[(9 * len(xs)) // 10],
                "max": xs[-1],
                "mean": round(sum(xs) / len(xs), 2),
            }
            if xs
            else {}
        )

    return {
        "corpus_images": corpus_size,
        "intents": len(intents),
        "queries": len(intents) * len(FORMS),
        "two_image_fraction": round(sum(len(i["reference_ids"]) == 2 for i in intents) / max(1, len(intents)), 4),
        "positives": dist(npos),
        "negatives": dist(nneg),
        "intents_with_10_negatives": sum(n >= 10 for n in nneg),
        "by_category": dict(sorted(Counter(i["intent_category"] for i in intents).items())),
        "by_subcategory": dict(sorted(Counter(i["edit_subcategory"] for i in intents).items())),
        "by_domain": dict(sorted(Counter(i["domain"] for i in intents).items())),
        "by_skin_tone_bucket": dict(sorted(Counter(str(i["skin_tone_bucket"]) for i in intents).items())),
        "by_kind": dict(sorted(Counter(i["kind"] for i in intents).items())),
    }


def format_stats(stats: dict) -> str:
    lines = [
        f"corpus images: {stats['corpus_images']}   intents: {stats['intents']}   queries: {stats['queries']}   "
        f"two-image intents: {100 * stats['two_image_fraction']:.1f}%"
    ]
    for key in ("positives", "negatives"):
        d = stats[key]
        lines.append(
            f"{key:>10}: min {d['min']}  p10 {d['p10']}  median {d['median']}  mean {d['mean']}  p90 {d['p90']}  max {d['max']}"
        )
    lines.append(f"intents with >= 10 negatives: {stats['intents_with_10_negatives']}")
    for key in ("by_category", "by_subcategory", "by_domain", "by_skin_tone_bucket"):
        lines.append(f"{key.replace('_', ' ')}: " + ", ".join(f"{k} {v}" for k, v in stats[key].items()))
    return "\n".join(lines)


def _file_payloads(world: BuiltWorld | TestPart) -> dict[str, bytes]:
    """The files of `world`: the test part's, and the train split's when it has one."""
    payloads = {
        "test_corpus.npy": _npy_bytes(world.test_corpus),
        "test_refs.npy": _npy_bytes(world.test_refs),
        "test_intents.jsonl": _jsonl_bytes(world.test_intents),
        "test_queries.jsonl": _jsonl_bytes(world.test_queries),
        "compositional_intents.jsonl": _jsonl_bytes(world.compositional_intents),
        "compositional_queries.jsonl": _jsonl_bytes(world.compositional_queries),
        "test_captions.jsonl": _jsonl_bytes(world.test_captions),
    }
    if isinstance(world, BuiltWorld):
        payloads.update(
            {
                "train_scenes.npy": _npy_bytes(world.train_scenes),
                "train_intents.jsonl": _jsonl_bytes(world.train_intents),
                "train_triplets.jsonl": _jsonl_bytes(world.train_triplets),
                "train_captions.jsonl": _jsonl_bytes(world.train_captions),
                "validation_scenes.npy": _npy_bytes(world.validation_scenes),
                "validation_intents.jsonl": _jsonl_bytes(world.validation_intents),
            }
        )
    return payloads


def _overall_checksum(checksums: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{k}:{v}\n" for k, v in sorted(checksums.items())).encode()).hexdigest()


def _write_files(payloads: dict[str, bytes], out_dir: Path) -> dict[str, str]:
    from cir_demo.utils.io import write_bytes_atomic

    checksums = {}
    for name, data in payloads.items():
        write_bytes_atomic(out_dir / name, data)
        checksums[name] = hashlib.sha256(data).hexdigest()
    return checksums


def test_manifest_of(manifest: dict) -> dict:
    """The test part's manifest: the full manifest's fields about the test part, with the checksum of
    the test files alone (the benchmark's key: a change to the train split leaves it alone)."""
    files = {name: manifest["files"][name] for name in TEST_FILES}
    return {
        **{key: manifest[key] for key in ("generator_version", "size", "seed", "stats", "compositional_stats")},
        "generator_sha256": manifest.get("generator_sha256"),
        "counts": {k: v for k, v in manifest["counts"].items() if not k.startswith("train_")},
        "files": files,
        "sizes": {name: manifest["sizes"][name] for name in TEST_FILES},
        "checksum": _overall_checksum(files),
    }


def _write_manifest(out_dir: Path, name: str, manifest: dict) -> None:
    from cir_demo.utils.io import write_text_atomic

    # Written after the files it lists: its presence marks a complete part.
    write_text_atomic(out_dir / name, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _counts(world: BuiltWorld | TestPart) -> dict:
    counts = {
        "test_corpus_images": int(len(world.test_corpus)),
        "test_reference_images": int(len(world.test_refs)),
        "test_intents": len(world.test_intents),
        "test_queries": len(world.test_queries),
        "test_captions": len(world.test_captions),
        "compositional_intents": len(world.compositional_intents),
        "compositional_queries": len(world.compositional_queries),
    }
    if isinstance(world, BuiltWorld):
        counts.update(
            {
                "train_images": int(len(world.train_scenes)),
                "train_intents": len(world.train_intents),
                "train_triplets": len(world.train_triplets),
                "train_validation_images": int(len(world.validation_scenes)),
                "train_validation_intents": len(world.validation_intents),
            }
        )
    return counts


def _manifest(
    world: BuiltWorld | TestPart, payloads: dict[str, bytes], checksums: dict[str, str], whole: bool = True
) -> dict:
    manifest = {
        "generator_version": GENERATOR_VERSION,
        "generator_sha256": generator_sha256(),
        "size": world.size,
        "seed": world.seed,
        "counts": _counts(world),
        "stats": world_stats(world.test_intents, len(world.test_corpus)),
        "compositional_stats": world_stats(world.compositional_intents, len(world.test_corpus)),
        "files": checksums,
        "sizes": {name: len(data) for name, data in payloads.items()},  # a fast check for truncation
        "checksum": _overall_checksum(checksums),
    }
    if whole:  # the train split's overlaps with the test splits (a whole world only)
        manifest["held_out"] = {
            "overlaps": {
                name: split_overlaps(intents, world.train_intents, world.train_scenes, world.test_refs, world.held_out)
                for name, intents in (("test", world.test_intents), ("compositional", world.compositional_intents))
            },
            "edits": sorted([list(e) for e in world.held_out], key=lambda e: tuple(map(str, e))),
            "templates": "the last alternative of every template form with several (intent_templates.json)",
            "rule": "train images, captions and intents contain no held-out edit; the test split asks for none, "
            "the compositional split only for them, worded with the held-out template wherever a form has several",
            "validation": {
                "edits": sorted([list(e) for e in world.validation_held_out], key=lambda e: tuple(map(str, e))),
                "overlaps": validation_overlaps(world),
                "rule": "edits neither test split asks for, drawn per world: the train split proper's images, "
                "captions and intents contain none of them; the validation split asks only for them, over scenes "
                "of its own (ids w-va-), with no paraphrase a train intent uses",
            },
        }
    return manifest


def validation_overlaps(world: BuiltWorld) -> dict:
    """What the compositional validation split shares with the test splits and the train split proper
    (every count but the first two is 0 by construction; tests recount them with naive loops)."""
    from .holdout import _combos, edit_of
    from .scene import scene_from_row

    held = world.validation_held_out
    asked = lambda intents: {edit_of(*e) for e in (it["edit"] for it in intents)} - {None}  # noqa: E731
    val_asked = asked(world.validation_intents)
    train_texts = {t for it in world.train_intents for t in it["paraphrases"]}
    train_combos = {c for row in world.train_scenes for c in _combos(scene_from_row(row))}
    return {
        "intents": len(world.validation_intents),
        "edits_asked": len(val_asked),
        "edits_not_held_out": len(val_asked - held),
        "edits_asked_by_test": len(val_asked & asked(world.test_intents)),
        "edits_asked_by_compositional": len(val_asked & asked(world.compositional_intents)),
        "edits_asked_by_train_intents": len(val_asked & asked(world.train_intents)),
        "edits_in_train_images": len(held & train_combos),
        "query_strings_in_train": sum(t in train_texts for it in world.validation_intents for t in it["paraphrases"]),
    }


def write_world(world: BuiltWorld | TestPart, out_dir: Path) -> dict:
    """Write the test part (its files, then TEST_MANIFEST) and, for a whole world, the train split's
    files and then MANIFEST; returns the last manifest written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    payloads = _file_payloads(world)
    test_payloads = {name: payloads[name] for name in TEST_FILES}
    checksums = _write_files(test_payloads, out_dir)
    test_manifest = test_manifest_of(_manifest(world, test_payloads, checksums, whole=False))
    _write_manifest(out_dir, TEST_MANIFEST, test_manifest)
    if not isinstance(world, BuiltWorld):
        return test_manifest
    checksums.update(_write_files({name: payloads[name] for name in TRAIN_FILES}, out_dir))
    manifest = _manifest(world, payloads, checksums)
    _write_manifest(out_dir, MANIFEST, manifest)
    return manifest


def world_dir(size: str = "default", seed: int = 0) -> Path:
    from cir_demo.paths import cache_dir

    return cache_dir() / "world" / f"{size}-seed{seed}"


def read_manifest(root: Path, name: str = "manifest.json") -> dict | None:
    path = Path(root) / name
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None


def manifest_matches(root: Path, size: str, seed: int, verify: bool = True) -> bool:
    """True when `root` holds a complete world of this generator version, size and seed."""
    return not world_problems(root, size, seed, verify)


def world_problems(root: Path, size: str, seed: int, verify: bool = True, part: str = "full") -> list[str]:
    """Why `root` does not hold an intact `part` ("full": the whole world, "test": its test part) of this
    generator version, size and seed ([] = it does). Without `verify`, files are checked by size (sha256
    where no size is recorded)."""
    from cir_demo.integrity import check_record

    name, data_files = PARTS[part]
    try:
        m = read_manifest(root, name)
    except ValueError as exc:
        return [f"damaged: {exc}"]
    if not m:
        return [f"missing: no world at {root}" + ("" if part == "full" else f" ({name})")]
    for key, want in (("generator_version", GENERATOR_VERSION), ("size", size), ("seed", seed)):
        if m.get(key) != want:
            return [f"{key} is {m.get(key)!r}, wanted {want!r}"]
    if m.get("generator_sha256") != generator_sha256():  # written by other generator code: a cache miss
        return [
            f"generator code changed: written by {str(m.get('generator_sha256'))[:12]}, "
            f"running {generator_sha256()[:12]}"
        ]
    files, sizes = m.get("files") or {}, m.get("sizes") or {}
    problems = []
    for file in data_files:
        if file not in files:
            problems.append(f"damaged: {Path(root) / name}: no record of {file}")
            continue
        record = {"sha256": files[file], **({"size": sizes[file]} if file in sizes else {})}
        problem = check_record(Path(root) / file, record, verify=verify)
        if problem:
            problems.append(problem)
    return problems


@contextlib.contextmanager
def generation_lock(root: Path):
    """Held while a world folder is written: a second process (or thread) waits, then finds it written."""
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _adopt_full_manifest(root: Path, size: str, seed: int) -> dict | None:
    """A whole world written before the two-part layout: its test part gets TEST_MANIFEST from the full
    manifest (no generation); None when there is no intact whole world."""
    if world_problems(root, size, seed, verify=True):
        return None
    manifest = test_manifest_of(read_manifest(root))
    _write_manifest(root, TEST_MANIFEST, manifest)
    return manifest


def _generate_part(root: Path, size: str, seed: int, part: str, progress: bool) -> dict:
    if part == "test":
        return _adopt_full_manifest(root, size, seed) or write_world(build_test_part(size, seed, progress), root)
    # the test part is planted again in memory (its streams are its own), never read from disk
    return write_world(build_world(size, seed, progress), root)


def generate_world(
    size: str = "default",
    seed: int = 0,
    out_dir=None,
    progress: bool = True,
    force: bool = False,
    part: str = "full",
    shipped: bool = True,
) -> Path:
    """Write the world of (size, seed) to `out_dir` (default `world_dir`); skip when already there.
    `part` "test": only its test part (what the benchmark reads; ~a fifth of the work), installed from the
    copy the repository ships when it matches this code and `out_dir` holds no world (`shipped`, unless `force`).

    Returns the directory. Same size and seed give byte-identical files, whichever part is written first.
    """
    from cir_demo.utils.names import lookup

    lookup("world size", size, SIZES)
    lookup("world part", part, PARTS)
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    root = Path(out_dir) if out_dir is not None else world_dir(size, seed)
    if not force and not world_problems(root, size, seed, part=part):
        _progress(progress, f"{root}: up to date (manifest matches), nothing to do")
        if progress:
            print(format_stats(read_manifest(root, PARTS[part][0])["stats"]), file=sys.stderr)
        return root
    with generation_lock(root):
        if not force and not world_problems(root, size, seed, part=part):
            _progress(progress, f"{root}: written by another process meanwhile")
            return root
        if part == "test" and shipped and not force:
            if install_shipped_world(root, size, seed, progress):
                return root
        t0 = time.perf_counter()
        manifest = _generate_part(root, size, seed, part, progress)
    if progress:
        print(format_stats(manifest["stats"]), file=sys.stderr)
        _progress(
            True,
            f"wrote {root} in {time.perf_counter() - t0:.1f} s ("
            + (
                "its test part"
                if part == "test"
                else f"{manifest['counts']['train_images']} train images, "
                f"{manifest['counts']['train_triplets']} triplets"
            )
            + ")",
        )
    return root
