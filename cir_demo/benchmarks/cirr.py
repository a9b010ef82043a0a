"""CIRR adapter: `captions/cap.rc2.<split>.json` + `image_splits/split.rc2.<split>.json` (+ images).

Layout of the CIRR repository (Cuberick-Orion/CIRR, release rc2):

- captions/cap.rc2.val.json: a list of {"pairid": 12063, "reference": "<image>", "target_hard": "<image>",
  "target_soft": {"<image>": 1.0, ...}, "caption": "...", "img_set": {"id": 1, "members": [6 images],
  "reference_rank": 3, "target_rank": 4}}. The test1 file hides the targets.
- image_splits/split.rc2.val.json: {"<image>": "./dev/<image>.png", ...}; the keys, in file order, are
  the corpus CLIP4Cir ranks (its index_names); the values are paths relative to the image folder
  (`img_raw/` in the repository's layout).

Query id = str(pairid) (also the key of results and submission files); positives = (target_hard,);
the set's members travel in `ScopedJudgments.subset` for Recall_subset@k. Errors where CLIP4Cir's
evaluation would crash or assert: a reference, target or set member that is not in the split, a
target outside its set. Metadata for breakdowns: `img_set_size`, `sole_target` (target_soft marks no
image other than the hard target as a match), `length_category` of the caption.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cir_demo.benchmarks._common import as_id, files_checksum, finish, keyed_entries, require_file, warn_rows
from cir_demo.benchmarks.images import FolderImageStore
from cir_demo.benchmarks.pinpoint import length_category
from cir_demo.benchmarks.schema import Benchmark, BenchmarkError, IssueCollector, Query
from cir_demo.benchmarks.scoped import ScopedJudgments, subset_of
from cir_demo.utils.io import write_json_atomic

SPLITS = ("val", "test1")
VERSION = "rc2"
# the exporter's extra field: paraphrases of one intent share it (CIRR itself has none; ignored by CLIP4Cir)
GROUP_FIELD = "paraphrase_group_id"


def captions_path(root: Path, split: str) -> Path:
    return root / "captions" / f"cap.{VERSION}.{split}.json"


def split_path(root: Path, split: str) -> Path:
    return root / "image_splits" / f"split.{VERSION}.{split}.json"


def load_cirr(root: str | Path, split: str = "val", image_dir: str | Path | None = None) -> Benchmark:
    """Read and validate one CIRR split; raise one BenchmarkError listing every error found.

    root: the CIRR folder (holding captions/ and image_splits/; a folder whose `cirr/` holds them works
    too, as CLIP4Cir lays it out). image_dir: the folder the split file's paths are relative to
    (default root/img_raw when present, else root).
    """
    root = _cirr_root(Path(root))
    if split not in SPLITS:
        raise BenchmarkError(
            f"parameter split: CIRR split must be one of {', '.join(SPLITS)}, got {split!r} "
            "(train has no evaluation protocol)"
        )
    cap_path, img_path = captions_path(root, split), split_path(root, split)
    col = IssueCollector(cap_path)
    entries = _read_json(cap_path, list, "captions file", col)
    relpaths = _read_json(img_path, dict, "image split file", col)
    finish(col)
    bad = [k for k, v in relpaths.items() if not isinstance(v, str) or not v.strip()]
    for k in bad[:20]:
        col.error(f"key {k!r}", None, "the relative image path must be a non-empty string", file=img_path)
    corpus = list(relpaths)
    queries = _build_queries(entries, frozenset(corpus), split, col)
    img_dir = Path(image_dir) if image_dir is not None else (root / "img_raw" if (root / "img_raw").is_dir() else root)
    if image_dir is not None and not img_dir.is_dir():
        col.error(None, None, "image folder does not exist", file=img_dir)
    warnings = finish(col)
    store = FolderImageStore(
        root=img_dir, filename_pattern="{id}.png", filenames={k: v for k, v in relpaths.items() if isinstance(v, str)}
    )
    info = {
        "source": str(root),
        "split": split,
        "version": VERSION,
        "image_dir": str(img_dir),
        "checksum": files_checksum([cap_path, img_path], split),
    }
    return Benchmark("cirr", "cirr", queries, corpus, images=store, info=info, warnings=warnings)


def _cirr_root(root: Path) -> Path:
    return root / "cirr" if not (root / "captions").is_dir() and (root / "cirr" / "captions").is_dir() else root


def _read_json(path: Path, kind: type, what: str, col: IssueCollector) -> Any:
    if not require_file(path, col, what):
        return kind()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        col.error(None, None, f"malformed JSON: {exc}", file=path)
        return kind()
    if not isinstance(data, kind):
        col.error(
            None, None, f"expected a JSON {'list' if kind is list else 'object'}, got {type(data).__name__}", file=path
        )
        return kind()
    if not data:
        col.error(None, None, f"{what} is empty", file=path)
    return data


def _build_queries(entries: list, corpus: frozenset[str], split: str, col: IssueCollector) -> list[Query]:
    queries: list[Query] = []
    seen: dict[str, int] = {}
    ref_outside_set: list[str] = []
    empty_captions: list[str] = []  # the real test1 file has one (pairid 27098); the server still scores it
    sizes: dict[int, int] = {}
    for k, loc, qid, e in keyed_entries(entries, col, "pairid", "pair id", seen):
        n_errors = len(col.errors)
        ref = _image(e, "reference", loc, corpus, col)
        caption = e.get("caption")
        if not isinstance(caption, str):
            col.error(loc, "caption", "missing caption")
        elif not caption.strip():
            empty_captions.append(loc)
        img_set = e.get("img_set")
        members = img_set.get("members") if isinstance(img_set, dict) else None
        if not isinstance(members, list) or not members or not all(isinstance(m, str) for m in members):
            col.error(loc, "img_set.members", "must be a non-empty list of image names")
            members = []
        absent = [m for m in members if m not in corpus]
        if absent:
            col.error(loc, "img_set.members", f"{len(absent)} member(s) not in the image split: {absent[:3]}")
        target = None
        if split == "val":
            target = _image(e, "target_hard", loc, corpus, col)
            if target is not None and target == ref:
                col.error(
                    loc,
                    "target_hard",
                    "the target is the reference image (CIRR deletes the reference from "
                    "every ranking, so the target could never be found)",
                )
            elif target is not None and members and target not in members:
                col.error(loc, "target_hard", "the target is not a member of img_set (CLIP4Cir asserts it is)")
        if len(col.errors) > n_errors or ref is None:
            continue
        if ref not in members:
            ref_outside_set.append(loc)
        sizes[len(members)] = sizes.get(len(members), 0) + 1
        meta = {
            "img_set_size": len(members),
            "img_set_id": as_id(img_set.get("id")),
            "length_category": length_category(len(caption.split())),
        }
        if target is not None:
            meta["sole_target"] = _sole_target(e.get("target_soft"), target)
        group = as_id(e.get(GROUP_FIELD)) or qid
        judgments = ScopedJudgments((target,) if target else (), subset=tuple(dict.fromkeys(members)))
        queries.append(Query(qid, (ref,), caption, group, judgments, meta, target_id=target))
    warn_rows(
        col,
        empty_captions,
        "caption",
        "empty caption (kept: the query text is empty, as CLIP4Cir would "
        "encode it, and the test server still expects a prediction)",
    )
    warn_rows(
        col,
        ref_outside_set,
        "img_set.members",
        "the reference is not a member of its img_set (the subset then ranks one image more than CIRR's five)",
    )
    if len(sizes) > 1:
        col.warn(
            None,
            "img_set.members",
            "img_set sizes differ ("
            + ", ".join(f"{n} members: {c} queries" for n, c in sorted(sizes.items()))
            + "); CLIP4Cir's code assumes one size, ours does not",
        )
    return queries


def _image(e: dict, key: str, loc: str, corpus: frozenset[str], col: IssueCollector) -> str | None:
    value = e.get(key)
    if not isinstance(value, str) or not value.strip():
        col.error(loc, key, "missing image name")
        return None
    if value not in corpus:
        col.error(loc, key, f"image {value!r} is not in the image split (CLIP4Cir ranks only those)")
        return None
    return value


def _sole_target(soft: Any, target: str) -> bool | None:
    """True when target_soft marks no image but the hard target as a (partial) match; None when absent."""
    if not isinstance(soft, dict):
        return None
    return not any(k != target and isinstance(v, (int, float)) and v > 0 for k, v in soft.items())


# --------------------------------------------------------------------------- export
def export_cirr(
    benchmark: Benchmark,
    out_dir: str | Path,
    splits: tuple[str, ...] = SPLITS,
    image_mode: str = "none",
    skip_two_image: bool = False,
) -> dict[str, Path]:
    """Write `benchmark` in CIRR's layout: captions and image split per split, images under img_raw/.

    One CIRR pair per single-image query with a target (two-image queries cannot be written: refused).
    target_hard = the query's target (else its first positive); target_soft marks it 1.0 and its other
    positives 1.0 as well; img_set = reference, target, then its explicit negatives and other
    positives, up to six. The test1 split holds the same pairs with the targets removed (to exercise
    the submission path). The image split lists the corpus, then references outside it (CIRR ranks
    references too and deletes each query's own). image_mode "render" writes PNGs, "none" none.
    Two-image queries are refused, or left out with `skip_two_image` (the caller says so).
    """
    from cir_demo.benchmarks.jsonl import export_images

    out = Path(out_dir)
    queries = single_image_queries(benchmark, skip_two_image, "CIRR pairs")
    pairs = [_pair(k, q) for k, q in enumerate(queries)]
    images = list(dict.fromkeys([*benchmark.corpus_ids, *(q.reference_ids[0] for q in queries)]))
    paths: dict[str, Path] = {}
    for split in splits:
        folder = "dev" if split == "val" else split
        rows = (
            pairs
            if split == "val"
            else [{k: v for k, v in p.items() if k not in ("target_hard", "target_soft")} for p in pairs]
        )
        paths[f"captions/{split}"] = captions_path(out, split)
        write_json_atomic(paths[f"captions/{split}"], rows, indent=None)
        paths[f"image_splits/{split}"] = split_path(out, split)
        write_json_atomic(paths[f"image_splits/{split}"], {i: f"./{folder}/{i}.png" for i in images}, indent=None)
        if image_mode != "none":
            export_images(benchmark, images, out / "img_raw" / folder, image_mode)
    id_map = {p["pairid"]: q.query_id for p, q in zip(pairs, queries)}
    paths["query_id_map"] = out / "query_id_map.json"
    write_json_atomic(paths["query_id_map"], {str(k): v for k, v in id_map.items()})
    return paths


def single_image_queries(benchmark: Benchmark, skip_two_image: bool, what: str) -> list[Query]:
    """The queries a one-reference format can hold; two-image ones refused unless `skip_two_image`."""
    two = [q.query_id for q in benchmark.queries if not q.is_single]
    if two and not skip_two_image:
        raise BenchmarkError(
            f"benchmark {benchmark.name!r}: {len(two)} two-image queries (e.g. {two[0]!r}) cannot "
            f"be written as {what} (one reference image each)"
        )
    return [q for q in benchmark.queries if q.is_single]


def _pair(k: int, q: Query) -> dict:
    target = q.target_id or (q.positives[0] if q.positives else None)
    if target is None:
        raise BenchmarkError(f"query {q.query_id!r}: no target or positive to write as target_hard")
    others = [p for p in q.positives if p != target]
    members = list(dict.fromkeys([q.reference_ids[0], target, *q.negatives, *others, *subset_of(q.judgments)]))[:6]
    return {
        "pairid": k,
        "reference": q.reference_ids[0],
        "target_hard": target,
        "target_soft": {target: 1.0, **{p: 1.0 for p in others if p in members}},
        "caption": q.instruction,
        "img_set": {"id": k, "members": members},
        GROUP_FIELD: q.group_id,
    }


__all__ = ["load_cirr", "export_cirr", "single_image_queries", "SPLITS"]
