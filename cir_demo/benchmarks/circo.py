"""CIRCO adapter (validation split): `annotations/val.json` + COCO unlabeled2017 images.

Schema (miccunifi/CIRCO): a JSON list of {"id", "reference_img_id",
"target_img_id", "relative_caption", "shared_concept", "gt_img_ids",
"semantic_aspects"}; image ids are COCO ints, files `unlabeled2017/000000xxxxxx.jpg`.
Ids become decimal strings ("271520"); results files are {"<query id>": [ids...]}.

Corpus: the `corpus_ids` file (COCO `image_info_unlabeled2017.json`, or one id
per line), else the image folder listing, else the union of the ids the
annotations name (warning: a tiny, much easier corpus).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from cir_demo.benchmarks._common import (
    as_id,
    check_judgments,
    files_checksum,
    finish,
    keyed_entries,
    id_list,
    read_id_list,
    warn_rows,
)
from cir_demo.benchmarks.images import FolderImageStore
from cir_demo.benchmarks.schema import Benchmark, BenchmarkError, IssueCollector, Judgments, Query

COCO_PATTERN = "{id:0>12}.jpg"
_COCO_NAME = re.compile(r"^(\d+)\.(jpe?g|png)$", re.IGNORECASE)


SPLITS = ("val", "test")


def load_circo(
    annotations: str | Path,
    image_dir: str | Path | None = None,
    corpus_ids: str | Path | None = None,
    split: str | None = None,
) -> Benchmark:
    """Read and validate CIRCO annotations; raise one BenchmarkError listing every error found.

    annotations: `val.json` or `test.json`, or the CIRCO folder (uses annotations/<split>.json).
    split: val (default) or test; the test split has no ground truths (its runs go to the evaluation
    server: `python -m cir_demo submission --benchmark circo --split test`).
    image_dir: COCO `unlabeled2017`; default <CIRCO>/COCO2017_unlabeled/unlabeled2017 when present.
    """
    path, split = _annotations_path(Path(annotations), split)
    col = IssueCollector(path)
    entries = _read_entries(path, col)
    finish(col)
    img_dir = Path(image_dir) if image_dir is not None else _default_image_dir(path)
    if image_dir is not None and not img_dir.is_dir():
        col.error(None, None, "image folder does not exist", file=img_dir)

    filenames: dict[str, str] = {}
    corpus: list[str] | None = None
    corpus_source = ""
    if corpus_ids is not None:
        corpus, filenames = _read_corpus_ids(Path(corpus_ids), col)
        corpus_source = str(corpus_ids)
    elif img_dir is not None and img_dir.is_dir():
        corpus = _folder_ids(img_dir)
        corpus_source = f"listing of {img_dir}"
        if not corpus:
            col.error(None, None, "image folder has no COCO image files (000000xxxxxx.jpg)", file=img_dir)
    queries, referenced = _build_queries(
        entries, path, frozenset(corpus) if corpus is not None else None, col, test=split == "test"
    )
    if corpus is None:
        corpus = referenced
        corpus_source = "ids named in the annotations"
        col.warn(
            None,
            None,
            f"no corpus id list and no image folder: the corpus is the {len(corpus)} images "
            "the annotations name (far easier than the 123,403-image COCO unlabeled2017 corpus)",
        )
    warnings = finish(col)
    store = FolderImageStore(root=img_dir, filename_pattern=COCO_PATTERN, filenames=filenames)
    info = {
        "source": str(path),
        "split": split,
        "corpus_source": corpus_source,
        "image_dir": str(img_dir) if img_dir else None,
        "checksum": files_checksum([path], split, corpus),
    }
    return Benchmark("circo", "circo", queries, corpus, images=store, info=info, warnings=warnings)


def _annotations_path(path: Path, split: str | None) -> tuple[Path, str]:
    """(the annotations file, its split): the CIRCO folder's annotations/<split>.json, or the file given (its
    name says its split; another `split` reads the file of that name beside it)."""
    if split is not None and split not in SPLITS:
        raise BenchmarkError(f"parameter split: CIRCO split must be one of {', '.join(SPLITS)}, got {split!r}")
    if path.is_dir():
        folder = path / "annotations" if (path / "annotations").is_dir() else path
        return folder / f"{split or 'val'}.json", split or "val"
    if split is None or path.stem == split:
        return path, split or (path.stem if path.stem in SPLITS else "val")
    return path.with_name(f"{split}.json"), split


def _default_image_dir(annotations: Path) -> Path | None:
    guess = annotations.parent.parent / "COCO2017_unlabeled" / "unlabeled2017"
    return guess if guess.is_dir() else None


def _read_entries(path: Path, col: IssueCollector) -> list:
    if not path.is_file():
        col.error(None, None, "annotations file is missing")
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        col.error(None, None, f"malformed JSON: {exc}")
        return []
    if not isinstance(data, list):
        col.error(None, None, f"expected a JSON list of annotations, got {type(data).__name__}")
        return []
    if not data:
        col.error(None, None, "no annotations")
    return data


def _read_corpus_ids(path: Path, col: IssueCollector) -> tuple[list[str], dict[str, str]]:
    """COCO image_info json ({"images": [{"id", "file_name"}]}) or one id (or file name) per line."""
    if not path.is_file():
        col.error(None, None, "corpus id list is missing", file=path)
        return [], {}
    if path.suffix.lower() != ".json":
        ids = []
        for raw in read_id_list(path, col, "corpus id list"):
            m = _COCO_NAME.match(raw)
            ids.append(str(int(m.group(1))) if m else raw)
        return ids, {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        col.error(None, None, f"malformed JSON: {exc}", file=path)
        return [], {}
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list):
        col.error(None, "images", "expected a COCO image info object with an 'images' list", file=path)
        return [], {}
    ids, filenames, seen = [], {}, set()
    for k, img in enumerate(images):
        iid = as_id(img.get("id")) if isinstance(img, dict) else None
        if iid is None:
            col.error(f"images[{k}]", "id", "missing image id", file=path)
            continue
        if iid in seen:
            col.error(f"images[{k}]", "id", f"duplicate image id {iid}", file=path)
            continue
        seen.add(iid)
        ids.append(iid)
        name = img.get("file_name")
        if isinstance(name, str) and name != COCO_PATTERN.format(id=iid):
            filenames[iid] = name
    return ids, filenames


def _folder_ids(img_dir: Path) -> list[str]:
    with os.scandir(img_dir) as it:
        names = sorted(e.name for e in it if e.is_file())
    return [str(int(m.group(1))) for m in map(_COCO_NAME.match, names) if m]


def _build_queries(
    entries: list, path: Path, corpus: frozenset[str] | None, col: IssueCollector, test: bool = False
) -> tuple[list[Query], list[str]]:
    """The queries; on the test split (`test`) without ground truths or targets, which it does not publish."""
    queries: list[Query] = []
    seen: dict[str, int] = {}
    referenced: dict[str, None] = {}
    missing_neg, dups, pos_and_neg, target_not_first, no_aspects = [], [], [], [], []
    for k, loc, qid, e in keyed_entries(entries, col, "id", "query id", seen):
        ok = True
        ref = as_id(e.get("reference_img_id"))
        if ref is None:
            col.error(loc, "reference_img_id", "missing reference image id")
            ok = False
        elif corpus is not None and ref not in corpus:
            col.error(loc, "reference_img_id", f"reference image {ref} does not exist (not in the corpus)")
        caption = e.get("relative_caption")
        if not isinstance(caption, str) or not caption.strip():
            col.error(loc, "relative_caption", "empty instruction")
            ok = False
        if test:
            if ok:
                referenced[ref] = None
                queries.append(
                    Query(
                        qid,
                        (ref,),
                        caption,
                        qid,
                        Judgments((), ()),
                        {
                            "shared_concept": e.get("shared_concept")
                            if isinstance(e.get("shared_concept"), str)
                            else None
                        },
                        target_id=None,
                    )
                )
            continue
        if "gt_img_ids" not in e:
            col.error(
                loc,
                "gt_img_ids",
                "no ground truth (the CIRCO test split has none: use val.json, or "
                "--split test to write its server file with `python -m cir_demo submission`)",
            )
            continue
        gts = id_list(e.get("gt_img_ids"))
        if gts is None:
            col.error(loc, "gt_img_ids", "must be a list of image ids")
            continue
        check_judgments(
            col,
            loc,
            gts,
            [],
            corpus,
            pos_field="gt_img_ids",
            neg_field="gt_img_ids",
            missing_neg=missing_neg,
            dup_rows=dups,
            pos_and_neg=pos_and_neg,
        )
        target = as_id(e.get("target_img_id"))
        if target is None:
            col.error(loc, "target_img_id", "missing target image id")
            ok = False
        else:
            if not gts or target != gts[0]:
                target_not_first.append(loc)
            if corpus is not None and target not in corpus and target not in gts:
                col.error(loc, "target_img_id", f"target image {target} is not in the corpus")
        aspects = e.get("semantic_aspects")
        if aspects is None:
            no_aspects.append(loc)
            aspects = []
        elif not isinstance(aspects, list) or not all(isinstance(a, str) for a in aspects):
            col.error(loc, "semantic_aspects", "must be a list of strings")
            ok = False
        shared = e.get("shared_concept")
        if not ok:
            continue
        for x in [ref, target, *gts]:
            referenced[x] = None
        meta = {"shared_concept": shared if isinstance(shared, str) else None, "semantic_aspects": list(aspects)}
        queries.append(Query(qid, (ref,), caption, qid, Judgments(tuple(gts), ()), meta, target_id=target))
    warn_rows(col, dups, "gt_img_ids", "an id is repeated in gt_img_ids")
    warn_rows(
        col,
        target_not_first,
        "target_img_id",
        "target_img_id is not the first of gt_img_ids (the official README says it always is)",
    )
    warn_rows(col, no_aspects, "semantic_aspects", "no semantic_aspects (left out of the per-aspect breakdown)")
    ids = list(seen)
    if ids and all(i.isdigit() for i in ids) and sorted(int(i) for i in ids) != list(range(len(ids))):
        col.warn(None, "id", "query ids are not 0..N-1; the official evaluation script asserts they are")
    return queries, list(referenced)


IMAGE_INFO = "image_info_unlabeled2017.json"
IMAGE_FOLDER = Path("COCO2017_unlabeled") / "unlabeled2017"


def export_circo(
    benchmark: Benchmark, out_dir: str | Path, image_mode: str = "none", skip_two_image: bool = False
) -> dict[str, Path]:
    """Write `benchmark` in CIRCO's layout: annotations/val.json (query ids 0..N-1, as the official script
    asserts), the corpus as a COCO image info file naming each image's file, and with image_mode "render"
    the images once under COCO2017_unlabeled/unlabeled2017/ (found there by `load_circo`).

    gt_img_ids = the target, then the query's other positives (CIRCO has no explicit negatives); the
    corpus is the benchmark's plus the references outside it (CIRCO's references are corpus images);
    semantic_aspects = the intent category. Two-image queries are refused, or left out with `skip_two_image`.
    """
    from cir_demo.benchmarks.cirr import single_image_queries
    from cir_demo.benchmarks.jsonl import export_images
    from cir_demo.utils.io import write_json_atomic

    out = Path(out_dir)
    queries = single_image_queries(benchmark, skip_two_image, "CIRCO queries")
    rows = []
    for k, q in enumerate(queries):
        target = q.target_id or (q.positives[0] if q.positives else None)
        if target is None:
            raise BenchmarkError(f"query {q.query_id!r}: no target or positive to write as target_img_id")
        category = q.meta.get("intent_category")
        rows.append(
            {
                "id": k,
                "reference_img_id": q.reference_ids[0],
                "target_img_id": target,
                "relative_caption": q.instruction,
                "shared_concept": str(q.meta.get("edit_subcategory") or ""),
                "gt_img_ids": list(dict.fromkeys([target, *q.positives])),
                "semantic_aspects": [str(category)] if category else [],
            }
        )
    images = list(dict.fromkeys([*benchmark.corpus_ids, *(q.reference_ids[0] for q in queries)]))
    paths = {
        "annotations": out / "annotations" / "val.json",
        "corpus_ids": out / IMAGE_INFO,
        "query_id_map": out / "query_id_map.json",
    }
    write_json_atomic(paths["annotations"], rows, indent=None)
    write_json_atomic(
        paths["corpus_ids"], {"images": [{"id": i, "file_name": f"{i}.png"} for i in images]}, indent=None
    )
    write_json_atomic(paths["query_id_map"], {str(k): q.query_id for k, q in enumerate(queries)})
    if image_mode != "none":
        export_images(benchmark, images, out / IMAGE_FOLDER, image_mode)
        paths["images"] = out / IMAGE_FOLDER
    return paths
