"""The project's own benchmark format: a folder of JSONL + text files + images.

    <root>/benchmark.json    manifest: format, format_version, name, metric_family,
                             results_id_format, counts, images {folder, mode}, info
    <root>/queries.jsonl     one query per line: query_id, group_id, reference_ids (1-2),
                             instruction, meta (object, optional), target_id (optional)
    <root>/judgments.jsonl   one line per paraphrase group: group_id, positives, negatives
    <root>/corpus.txt        retrievable image ids, one per line, in corpus order
    <root>/extra_images.txt  reference-only image ids (not retrievable), optional
    <root>/images/<id>.png   (or .jpg/.jpeg) the pixels, unless exported with image_mode="none"

Judgments are stored once per group, so paraphrases share them by
construction. See docs/formats.md for the full specification and the table of
errors and warnings.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Literal

from cir_demo.benchmarks._common import (
    as_id,
    check_judgments,
    finish,
    id_list,
    id_rows,
    judgment_rows,
    read_id_list,
    require_file,
    warn_rows,
)
from cir_demo.benchmarks.families import FAMILIES
from cir_demo.benchmarks.images import FolderImageStore, check_image_id
from cir_demo.benchmarks.schema import (
    SKIN_TONE_BUCKETS,
    Benchmark,
    BenchmarkError,
    IssueCollector,
    Judgments,
    Query,
    ValidationIssue,
)
from cir_demo.utils.io import atomic_path, write_json_atomic, write_text_atomic

FORMAT = "cir_demo-benchmark"
FORMAT_VERSION = 1
MANIFEST, QUERIES, JUDGMENTS = "benchmark.json", "queries.jsonl", "judgments.jsonl"
CORPUS, EXTRA_IMAGES, IMAGES = "corpus.txt", "extra_images.txt", "images"
RESULTS_ID_FORMATS = ("same", "pinpoint")
_COPY_SUFFIXES = (".jpg", ".jpeg", ".png")

ImageMode = Literal["copy", "render", "none"]


# --------------------------------------------------------------------------- export
def export_jsonl_benchmark(benchmark: Benchmark, out_dir: str | Path, image_mode: ImageMode = "copy") -> Path:
    """Write `benchmark` as a JSONL benchmark folder; returns the folder.

    image_mode: "copy" copies local image files (re-encoding other formats to
    PNG), "render" opens every image through `benchmark.images` and saves PNG
    (generated worlds), "none" writes no images. The manifest is written last,
    so an interrupted export is never mistaken for a complete one.
    """
    if image_mode not in ("copy", "render", "none"):
        raise ValueError(f"image_mode must be 'copy', 'render' or 'none', got {image_mode!r}")
    out = Path(out_dir)
    groups = _group_judgments(benchmark)
    corpus_set = benchmark.corpus_set
    extra = list(dict.fromkeys(r for q in benchmark.queries for r in q.reference_ids if r not in corpus_set))

    query_lines = [_dumps(_query_record(q)) for q in benchmark.queries]
    judgment_lines = [
        _dumps({"group_id": g, "positives": list(j.positives), "negatives": list(j.negatives)})
        for g, j in groups.items()
    ]
    write_text_atomic(out / QUERIES, "".join(line + "\n" for line in query_lines))
    write_text_atomic(out / JUDGMENTS, "".join(line + "\n" for line in judgment_lines))
    write_text_atomic(out / CORPUS, "".join(f"{i}\n" for i in benchmark.corpus_ids))
    if extra:
        write_text_atomic(out / EXTRA_IMAGES, "".join(f"{i}\n" for i in extra))
    elif (out / EXTRA_IMAGES).exists():
        write_text_atomic(out / EXTRA_IMAGES, "")

    n_images = 0
    if image_mode != "none":
        n_images = export_images(benchmark, list(benchmark.corpus_ids) + extra, out / IMAGES, image_mode)

    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": benchmark.name,
        "metric_family": benchmark.metric_family,
        "results_id_format": benchmark.results_id_format,
        "counts": {
            "queries": len(benchmark.queries),
            "groups": len(groups),
            "corpus": len(benchmark.corpus_ids),
            "extra_images": len(extra),
            "images": n_images,
        },
        "images": {"folder": IMAGES, "mode": image_mode},
        "info": _jsonable_info(benchmark.info),
    }
    write_json_atomic(out / MANIFEST, manifest)
    return out


def _group_judgments(benchmark: Benchmark) -> dict[str, Judgments]:
    groups: dict[str, Judgments] = {}
    issues = []
    for q in benchmark.queries:
        j = groups.setdefault(q.group_id, q.judgments)
        if j != q.judgments:
            issues.append(
                ValidationIssue(
                    "error",
                    f"<benchmark {benchmark.name}>",
                    f"query {q.query_id}",
                    "group_id",
                    f"paraphrase group {q.group_id!r} has different judgments across its "
                    "queries; the JSONL format stores one judgment set per group",
                )
            )
    if issues:
        raise BenchmarkError(issues)
    return groups


def _query_record(q: Query) -> dict:
    rec: dict[str, Any] = {
        "query_id": q.query_id,
        "group_id": q.group_id,
        "reference_ids": list(q.reference_ids),
        "instruction": q.instruction,
    }
    meta = {k: _jsonable(v, f"query {q.query_id} meta {k!r}") for k, v in q.meta.items()}
    if meta:
        rec["meta"] = meta
    if q.target_id is not None:
        rec["target_id"] = q.target_id
    return rec


def _jsonable(v: Any, what: str) -> Any:
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x, what) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x, what) for k, x in v.items()}
    item = getattr(v, "item", None)  # numpy scalars
    if callable(item):
        return _jsonable(item(), what)
    raise BenchmarkError(f"{what}: value {v!r} of type {type(v).__name__} cannot be written as JSON")


def _jsonable_info(info: dict) -> dict:
    out = {}
    for k, v in info.items():
        try:
            out[str(k)] = json.loads(json.dumps(_jsonable(v, k)))
        except (BenchmarkError, TypeError, ValueError):
            continue  # info is descriptive; drop what JSON cannot hold
    return out


def _dumps(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# zlib level of exported PNGs (lossless at every level): on the world's rendered images the default (6)
# makes files no smaller than level 1 does, at several times the CPU (docs/benchmarks.md)
EXPORT_PNG_LEVEL = 1


def export_images(benchmark: Benchmark, ids: list[str], folder: Path, mode: ImageMode) -> int:
    from tqdm import tqdm

    store = benchmark.images
    if store is None:
        raise BenchmarkError(f"benchmark {benchmark.name!r} has no image store; export with image_mode='none'")
    problems: list[ValidationIssue] = []
    n = 0
    for image_id in tqdm(ids, desc=f"exporting {benchmark.name} images", unit="img", disable=len(ids) < 200):
        try:
            check_image_id(image_id)
            local = store.local_path(image_id) if mode == "copy" and isinstance(store, FolderImageStore) else None
            if local is not None and local.suffix.lower() in _COPY_SUFFIXES:
                dest = folder / f"{image_id}{local.suffix.lower()}"
                with atomic_path(dest) as tmp:
                    shutil.copyfile(local, tmp)
            else:
                img = store.open(image_id)
                with atomic_path(folder / f"{image_id}.png") as tmp:
                    img.save(tmp, format="PNG", compress_level=EXPORT_PNG_LEVEL)
            n += 1
        except (OSError, ValueError) as exc:
            problems.append(ValidationIssue("error", str(folder), f"image {image_id!r}", None, str(exc)))
    if problems:
        raise BenchmarkError(problems)
    return n


# --------------------------------------------------------------------------- load
def load_jsonl_benchmark(root: str | Path) -> Benchmark:
    """Read and validate a JSONL benchmark folder; raise one BenchmarkError listing every error found."""
    root = Path(root)
    col = IssueCollector(root / MANIFEST)
    if not root.is_dir():
        col.error(None, None, f"benchmark folder {root} does not exist")
        finish(col)
    manifest = _read_manifest(root / MANIFEST, col)
    required = [require_file(root / name, col, name) for name in (QUERIES, JUDGMENTS, CORPUS)]
    if not all(required) or manifest is None:
        finish(col)

    corpus = read_id_list(root / CORPUS, col, "corpus")
    extra_path = root / EXTRA_IMAGES
    extra = read_id_list(extra_path, col, "extra image list", allow_empty=True) if extra_path.is_file() else []
    corpus_set = frozenset(corpus)
    images_dir = root / IMAGES
    listing = _image_ids(images_dir)
    known_images = corpus_set | frozenset(extra) | (listing or frozenset())

    judgments = _read_judgments(root / JUDGMENTS, corpus_set, col)
    queries, used_groups = _read_queries(root / QUERIES, judgments, corpus_set, known_images, col)
    unused = [f"line {line} ({g})" for g, (line, _) in judgments.items() if g not in used_groups]
    warn_rows(col, unused, "group_id", "judgments for a group no query uses", file=root / JUDGMENTS)

    mode = (manifest.get("images") or {}).get("mode", "copy")
    if mode != "none":
        if listing is None:
            col.warn(None, "images", f"no {IMAGES}/ folder: images cannot be shown or embedded")
        else:
            missing = [i for i in corpus if i not in listing]
            warn_rows(col, missing, None, f"corpus image without a file in {IMAGES}/", file=images_dir, unit="images")
    _check_counts(manifest, queries, judgments, corpus, col)
    warnings = finish(col)

    info = dict(manifest.get("info") or {})
    info.update({"source": str(root), "image_mode": mode})
    store = FolderImageStore(root=images_dir, filename_pattern="{id}.png")
    return Benchmark(
        manifest["name"],
        manifest["metric_family"],
        queries,
        corpus,
        images=store,
        info=info,
        warnings=warnings,
        results_id_format=manifest.get("results_id_format", "same"),
    )


def _read_manifest(path: Path, col: IssueCollector) -> dict | None:
    if not require_file(path, col, MANIFEST):
        return None
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        col.error(None, None, f"malformed JSON: {exc}")
        return None
    if not isinstance(m, dict):
        col.error(None, None, "expected a JSON object")
        return None
    if m.get("format") != FORMAT:
        col.error(None, "format", f"expected {FORMAT!r}, got {m.get('format')!r}")
    v = m.get("format_version")
    if not isinstance(v, int) or isinstance(v, bool):
        col.error(None, "format_version", f"expected an integer, got {v!r}")
    elif v > FORMAT_VERSION:
        col.error(None, "format_version", f"version {v} is newer than this reader ({FORMAT_VERSION})")
    if not isinstance(m.get("name"), str) or not m.get("name"):
        col.error(None, "name", "missing benchmark name")
    if m.get("metric_family") not in FAMILIES:  # read now: families registered after import count
        col.error(None, "metric_family", f"expected one of {tuple(FAMILIES)}, got {m.get('metric_family')!r}")
    if m.get("results_id_format", "same") not in RESULTS_ID_FORMATS:
        col.error(
            None, "results_id_format", f"expected one of {RESULTS_ID_FORMATS}, got {m.get('results_id_format')!r}"
        )
    if "info" in m and not isinstance(m["info"], dict):
        col.error(None, "info", "must be a JSON object")
    if "images" in m and not isinstance(m["images"], dict):
        col.error(None, "images", "must be a JSON object")
        m["images"] = {}
    return m


def _image_ids(folder: Path) -> frozenset[str] | None:
    if not folder.is_dir():
        return None
    with os.scandir(folder) as it:
        names = [e.name for e in it if e.is_file()]
    return frozenset(n.rsplit(".", 1)[0] for n in names if n.lower().endswith(_COPY_SUFFIXES))


def _read_judgments(path: Path, corpus: frozenset[str], col: IssueCollector) -> dict[str, tuple[int, Judgments]]:
    out: dict[str, tuple[int, Judgments]] = {}
    missing_neg, dups, pos_and_neg = [], [], []
    rows = judgment_rows(
        path, col, "group_id", "group id", out, "duplicate group id (first on line {line})", "positives", "negatives"
    )
    for lineno, gid, loc, pos, neg in rows:
        check_judgments(
            col,
            loc,
            pos,
            neg,
            corpus,
            pos_field="positives",
            neg_field="negatives",
            missing_neg=missing_neg,
            dup_rows=dups,
            pos_and_neg=pos_and_neg,
            file=path,
        )
        out[gid] = (lineno, Judgments(tuple(pos), tuple(neg)))
    warn_rows(col, missing_neg, "negatives", "negative(s) not in the corpus", file=path)
    warn_rows(col, dups, None, "an id is repeated within a judgment list", file=path, unit="judgment lists")
    warn_rows(col, pos_and_neg, "negatives", "an id is both a positive and a negative", file=path)
    return out


def _read_queries(
    path: Path,
    judgments: dict[str, tuple[int, Judgments]],
    corpus: frozenset[str],
    known_images: frozenset[str],
    col: IssueCollector,
) -> tuple[list[Query], set[str]]:
    queries: list[Query] = []
    first: dict[str, int] = {}
    used: set[str] = set()
    odd_tone, single_mismatch, target_not_pos = [], [], []
    for lineno, row, qid, loc in id_rows(path, col, "query_id", "query id", first):
        ok = True
        refs = id_list(row.get("reference_ids"))
        if refs is None or not 1 <= len(refs) <= 2:
            col.error(loc, "reference_ids", "must be a list of one or two image ids", file=path)
            ok = False
        else:
            for k, r in enumerate(refs):
                if r not in known_images:
                    col.error(
                        loc,
                        f"reference_ids[{k}]",
                        f"reference image {r!r} does not exist (not in {CORPUS}, {EXTRA_IMAGES} or {IMAGES}/)",
                        file=path,
                    )
        instruction = row.get("instruction")
        if not isinstance(instruction, str) or not instruction.strip():
            col.error(loc, "instruction", "empty instruction", file=path)
            ok = False
        gid = as_id(row.get("group_id"))
        if gid is None:
            col.error(loc, "group_id", "missing or empty group id", file=path)
            ok = False
        elif gid not in judgments:
            col.error(loc, "group_id", f"group {gid!r} has no judgments in {JUDGMENTS}", file=path)
            ok = False
        meta = row.get("meta", {})
        if not isinstance(meta, dict):
            col.error(loc, "meta", "must be a JSON object", file=path)
            ok = False
        target = row.get("target_id")
        if target is not None:
            target = as_id(target)
            if target is None:
                col.error(loc, "target_id", "must be an image id or null", file=path)
                ok = False
            elif target not in corpus:
                col.error(loc, "target_id", f"target image {target!r} is not in the corpus", file=path)
        if not ok:
            continue
        used.add(gid)
        j = judgments[gid][1]
        tone = meta.get("skin_tone_bucket")
        if tone is not None and tone not in SKIN_TONE_BUCKETS:
            odd_tone.append(loc)
        if "is_single" in meta and meta["is_single"] != (len(refs) == 1):
            single_mismatch.append(loc)
        if target is not None and target not in j.positives:
            target_not_pos.append(loc)
        queries.append(Query(qid, tuple(refs), instruction, gid, j, meta, target_id=target))
    warn_rows(col, odd_tone, "meta.skin_tone_bucket", f"value not in {SKIN_TONE_BUCKETS}", file=path)
    warn_rows(
        col, single_mismatch, "meta.is_single", "is_single disagrees with the number of reference images", file=path
    )
    warn_rows(col, target_not_pos, "target_id", "target image is not among the group's positives", file=path)
    if not first and not col.errors:
        col.error(None, None, "no queries", file=path)
    return queries, used


def _check_counts(manifest: dict, queries: list, judgments: dict, corpus: list, col: IssueCollector) -> None:
    counts = manifest.get("counts") or {}
    actual = {"queries": len(queries), "groups": len(judgments), "corpus": len(corpus)}
    for key, n in actual.items():
        if key in counts and counts[key] != n:
            col.warn(None, f"counts.{key}", f"manifest says {counts[key]}, the files hold {n}")
