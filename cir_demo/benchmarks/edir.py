"""EDIR adapter: `queries.jsonl`, `corpus.jsonl`, `instances.jsonl` + an image folder.

Layout of the public release (Hugging Face dataset EDIR-BENCH/EDIR; field
names as read by the MTEB conversion script for that release):

- corpus.jsonl:    {"id": "<image file name>", "image": "<image file name>"}
- queries.jsonl:   {"id": ..., "image": "<reference image file name>", "text": ...,
                    "metadata": {"subcategory": ..., ...}}
- instances.jsonl: {"qid": <query id>, "pos": [target id], "neg": [hard negative ids]}
- images: one flat folder (`imgs_mc.tar.part*` unpacked); file name = id.

Each query is its own paraphrase group unless its row has a `group_id`
(top level or in `metadata`); queries sharing a group must then have identical
judgments (error otherwise). `Query.target_id` is the single positive.

Checks follow what EDIR's official code (pytrec_eval over these files)
accepts: a query with `"pos": []` (the repository's own sample folder has
two), a query without an instances.jsonl row and a positive that is not in
the corpus are warnings, not errors. Such queries load; the metrics leave a
query without positives out of every mean and count it.
"""

from __future__ import annotations

import os
from pathlib import Path

from cir_demo.benchmarks._common import (
    as_id,
    check_judgments,
    finish,
    id_rows,
    judgment_rows,
    require_file,
    warn_rows,
)
from cir_demo.benchmarks.images import FolderImageStore
from cir_demo.benchmarks.schema import Benchmark, IssueCollector, Judgments, Query

QUERIES, CORPUS, INSTANCES = "queries.jsonl", "corpus.jsonl", "instances.jsonl"
_IMAGE_DIR_NAMES = ("images", "imgs_mc", "imgs")


def load_edir(root: str | Path, image_dir: str | Path | None = None) -> Benchmark:
    """Read and validate an EDIR folder; raise one BenchmarkError listing every error found.

    image_dir: the image folder; default the first of root/images, root/imgs_mc,
    root/imgs that exists, else root itself when it holds image files.
    """
    root = Path(root)
    col = IssueCollector(root)
    if not root.is_dir():
        col.error(None, None, "EDIR folder does not exist")
        finish(col)
    paths = {name: root / name for name in (QUERIES, CORPUS, INSTANCES)}
    present = {name: require_file(p, col, name) for name, p in paths.items()}
    if not all(present.values()):
        finish(col)

    corpus_ids, filenames = _read_corpus(paths[CORPUS], col)
    corpus = frozenset(corpus_ids)
    judgments = _read_instances(paths[INSTANCES], corpus, col)
    img_dir = _image_dir(root, image_dir, col)
    listing = _listing(img_dir)
    queries = _read_queries(paths[QUERIES], judgments, filenames, listing, col)
    if listing is not None:
        missing = [f"corpus image {i!r}" for i in corpus_ids if filenames.get(i, i) not in listing]
        warn_rows(col, missing, "image", f"corpus image file not found in {img_dir}", file=paths[CORPUS], unit="images")
    else:
        col.warn(None, None, f"image folder {img_dir} not found: images cannot be shown or embedded", file=root)
    warnings = finish(col)
    store = FolderImageStore(root=img_dir, filename_pattern="{id}", filenames=filenames)
    info = {"source": str(root), "image_dir": str(img_dir)}
    return Benchmark("edir", "edir", queries, corpus_ids, images=store, info=info, warnings=warnings)


def _read_corpus(path: Path, col: IssueCollector) -> tuple[list[str], dict[str, str]]:
    ids: list[str] = []
    first: dict[str, int] = {}
    filenames: dict[str, str] = {}
    for _, row, cid, loc in id_rows(
        path, col, "id", "id", first, "duplicate corpus id {id!r} (first on line {line})", loc_with_id=False
    ):
        ids.append(cid)
        image = row.get("image", cid)
        if not isinstance(image, str) or not image.strip():
            col.error(loc, "image", "image file name must be a non-empty string", file=path)
        elif image != cid:
            filenames[cid] = image
    if not ids:
        col.error(None, None, "corpus is empty", file=path)
    return ids, filenames


def _read_instances(path: Path, corpus: frozenset[str], col: IssueCollector) -> dict[str, tuple[int, Judgments]]:
    out: dict[str, tuple[int, Judgments]] = {}
    missing_neg, dups, pos_and_neg, several_pos, no_pos, missing_pos = [], [], [], [], [], []
    rows = judgment_rows(
        path,
        col,
        "qid",
        "query id",
        out,
        "duplicate judgments for query {id!r} (first on line {line})",
        "pos",
        "neg",
        loc_with_id=False,
    )
    for lineno, qid, loc, pos, neg in rows:
        check_judgments(
            col,
            loc,
            pos,
            neg,
            corpus,
            pos_field="pos",
            neg_field="neg",
            missing_neg=missing_neg,
            dup_rows=dups,
            pos_and_neg=pos_and_neg,
            file=path,
            no_pos=no_pos,
            missing_pos=missing_pos,
        )
        if len(pos) > 1:
            several_pos.append(loc)
        out[qid] = (lineno, Judgments(tuple(pos), tuple(neg)))
    warn_rows(
        col,
        no_pos,
        "pos",
        "no positives: left out of every mean and counted (pytrec_eval, which EDIR's "
        "official code uses, leaves such queries out)",
        file=path,
        unit="queries",
    )
    warn_rows(
        col,
        missing_pos,
        "pos",
        "positive(s) not in the corpus (no run can retrieve them; they still count "
        "in Recall's denominator, as in pytrec_eval)",
        file=path,
    )
    warn_rows(col, missing_neg, "neg", "negative(s) not in the corpus", file=path)
    warn_rows(col, dups, None, "an id is repeated within a judgment list", file=path, unit="judgment lists")
    warn_rows(col, pos_and_neg, "neg", "an id is both a positive and a negative", file=path)
    warn_rows(
        col,
        several_pos,
        "pos",
        "more than one positive (EDIR has one target; Recall@k then has no single target)",
        file=path,
    )
    return out


def _image_dir(root: Path, image_dir, col: IssueCollector) -> Path:
    if image_dir is not None:
        p = Path(image_dir)
        if not p.is_dir():
            col.error(None, None, "image folder does not exist", file=p)
        return p
    for name in _IMAGE_DIR_NAMES:
        if (root / name).is_dir():
            return root / name
    # images unpacked next to the JSONL files, else none yet (root/images, absent)
    with os.scandir(root) as it:
        flat = any(e.name.lower().endswith((".png", ".jpg", ".jpeg")) for e in it)
    return root if flat else root / _IMAGE_DIR_NAMES[0]


def _listing(img_dir: Path) -> set[str] | None:
    """File names in the image folder (one scandir: stat-ing 178K files one by one is slow)."""
    if not img_dir.is_dir():
        return None
    with os.scandir(img_dir) as it:
        return {e.name for e in it if e.is_file()}


def _read_queries(
    path: Path,
    judgments: dict[str, tuple[int, Judgments]],
    filenames: dict[str, str],
    listing: set[str] | None,
    col: IssueCollector,
) -> list[Query]:
    queries: list[Query] = []
    first: dict[str, int] = {}
    group_of: dict[str, tuple[int, Judgments]] = {}
    no_subcategory, no_judgments = [], []
    for lineno, row, qid, loc in id_rows(path, col, "id", "query id", first):
        ok = True
        image = row.get("image")
        if not isinstance(image, str) or not image.strip():
            col.error(loc, "image", "missing reference image", file=path)
            ok = False
        elif listing is not None and filenames.get(image, image) not in listing:
            col.error(loc, "image", f"reference image {image!r} does not exist in the image folder", file=path)
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            col.error(loc, "text", "empty instruction", file=path)
            ok = False
        metadata = row.get("metadata") or {}
        if not isinstance(metadata, dict):
            col.error(loc, "metadata", "must be a JSON object", file=path)
            metadata = {}
        if qid not in judgments:
            no_judgments.append(loc)
        if not ok:
            continue
        j = judgments[qid][1] if qid in judgments else Judgments(())
        group_id = as_id(row.get("group_id", metadata.get("group_id"))) or qid
        if group_id in group_of:
            g_line, g_j = group_of[group_id]
            if g_j != j:
                col.error(
                    loc,
                    "group_id",
                    f"paraphrases of group {group_id!r} have different judgments (line {g_line} differs)",
                    file=path,
                )
                continue
            j = g_j
        else:
            group_of[group_id] = (lineno, j)
        meta = {}
        sub = metadata.get("subcategory")
        if isinstance(sub, str) and sub.strip():
            meta["edit_subcategory"] = sub.strip()
        else:
            no_subcategory.append(loc)
        if isinstance(metadata.get("category"), str):
            meta["edit_category"] = metadata["category"]
        target = j.positives[0] if len(j.positives) == 1 else None
        queries.append(Query(qid, (image,), text, group_id, j, meta, target_id=target))
    extra = [f"line {line} ({q})" for q, (line, _) in judgments.items() if q not in first]
    warn_rows(col, extra, "qid", f"judgments for a query absent from {QUERIES}", file=path.parent / INSTANCES)
    warn_rows(
        col,
        no_judgments,
        "id",
        f"no judgments in {INSTANCES}: no positives, so left out of every mean "
        "(the official code's qrels lack them too)",
        file=path,
        unit="queries",
    )
    warn_rows(
        col,
        no_subcategory,
        "metadata.subcategory",
        "no edit subcategory (left out of the per-subcategory breakdown)",
        file=path,
    )
    if not queries and not col.errors:
        col.error(None, None, "no queries", file=path)
    return queries
