"""PinPoint adapter: the official `pinpoint_licensed.parquet` + `index_signatures.txt`.

Reading
-------
- `query_image_signature2` holds the string 'None' for single-image queries.
- Paraphrase groups: a `paraphrase_group_id` column (written by our exporter)
  is used when present. Otherwise queries with the same *set* of positives form
  one group (the group id is its first query id): that gives the 1,544 intents of
  the real file's 7,635 queries. Paraphrases of one intent there sometimes differ
  in one negative or even in the reference image, so every query keeps its own
  judgment lists exactly as the file gives them (identical lists share one
  `Judgments` object), and such groups are reported as a warning.
- Negative lists of the real file end with a null element (6,729 rows). It is
  dropped from `Judgments.negatives` and counted in
  `Judgments.n_null_negatives`, because the official evaluator counts it in
  NegRecall@k's denominator `min(len(negatives), k)`; `export_pinpoint` writes
  it back.
- `skin_tone_bucket` 'UNKNOWN' becomes None (no person); the four Monk buckets
  are kept.

Every problem is collected; errors raise one BenchmarkError naming the file,
row (0-based parquet row and query id) and column.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from cir_demo.benchmarks._common import check_judgments, finish, is_missing, read_id_list, warn_rows
from cir_demo.benchmarks.images import FolderImageStore, pinpoint_cdn_url
from cir_demo.benchmarks.schema import (
    SKIN_TONE_BUCKETS,
    Benchmark,
    IssueCollector,
    Judgments,
    Query,
    normalize_pinpoint_query_id,
)
from cir_demo.utils.io import atomic_path, write_json_atomic, write_text_atomic

ANNOTATIONS_NAME = "pinpoint_licensed.parquet"
CORPUS_NAME = "index_signatures.txt"
QUERY_ID_MAP_NAME = "query_id_map.json"
# our addition: reference-only images (not retrievable), written by export_pinpoint when needed
EXTRA_REFS_NAME = "reference_signatures.txt"

REQUIRED_COLUMNS = (
    "query_id",
    "query_image_signature",
    "query_image_signature2",
    "instruction",
    "positive_candidates",
    "negative_candidates",
)
# official column -> schema meta key
META_COLUMNS = {
    "query_category": "intent_category",
    "l1_interest": "domain",
    "skin_tone_bucket": "skin_tone_bucket",
    "is_question": "is_question",
    "is_imperative": "is_imperative",
    "is_single": "is_single",
    "length_category": "length_category",
    "token_count": "token_count",
}
OFFICIAL_COLUMNS = REQUIRED_COLUMNS[:6] + (
    "token_count",
    "length_category",
    "is_question",
    "is_imperative",
    "is_single",
    "query_category",
    "skin_tone_bucket",
    "l1_interest",
)
# our addition: the paraphrase group of each query (the official evaluator ignores extra columns)
GROUP_COLUMN = "paraphrase_group_id"
_QUERY_ID = re.compile(r"^query_\d+$")
_STRING_COLUMNS = (
    "query_id",
    "query_image_signature",
    "query_image_signature2",
    "instruction",
    "query_category",
    "l1_interest",
    "skin_tone_bucket",
    "length_category",
)
_BOOL_COLUMNS = ("is_question", "is_imperative", "is_single")
# token_count -> length_category, as measured on the real file (short 1-6, medium 7-15, long 16+)
_LENGTH_BOUNDS = ((6, "short"), (15, "medium"))


# --------------------------------------------------------------------------- load
def load_pinpoint(
    annotations: str | Path,
    corpus_ids: str | Path | Sequence[str] | None = None,
    image_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    online: bool = False,
    reuse_validation: bool = True,
) -> Benchmark:
    """Read and validate PinPoint; raise one BenchmarkError listing every error found.

    annotations: the parquet file, or a folder holding `pinpoint_licensed.parquet`.
    corpus_ids: `index_signatures.txt` (or a list of ids); when None, the file of
        that name beside the parquet, else the ids named in the annotations (warning).
    image_dir / cache_dir / online: see `FolderImageStore` (images are `<signature>.jpg`,
        fetched from the public CDN into `cache_dir` only when `online`).
    reuse_validation: replay a stored earlier load of the same files (benchmarks/load_cache.py;
        the same result, half a second sooner). Not with `image_dir` (its contents are checked)
        or a corpus given as a list.
    """
    path = Path(annotations)
    if path.is_dir():
        path = path / ANNOTATIONS_NAME
    stored = None
    if reuse_validation and image_dir is None and (corpus_ids is None or isinstance(corpus_ids, (str, Path))):
        from cir_demo.benchmarks import load_cache

        corpus_file = Path(corpus_ids) if corpus_ids is not None else path.parent / CORPUS_NAME
        key = load_cache.cache_key("pinpoint", [path, corpus_file, path.parent / EXTRA_REFS_NAME], [corpus_ids is None])
        stored = load_cache.cache_path("pinpoint", key)
        replay = load_cache.read(stored)
        if replay is not None:
            queries, corpus, info, warnings = replay
            return Benchmark(
                "pinpoint",
                "pinpoint",
                queries,
                corpus,
                images=_image_store(None, cache_dir, online),
                info=info,
                warnings=warnings,
                results_id_format="pinpoint",
            )
    col = IssueCollector(path)
    table = _read_table(path, col)
    finish(col)  # nothing more can be checked without the table

    corpus, corpus_source = _read_corpus(corpus_ids, path, col)
    extra_refs = path.parent / EXTRA_REFS_NAME
    if corpus is not None and extra_refs.is_file():
        corpus_plus_refs = frozenset(corpus) | frozenset(read_id_list(extra_refs, col, "reference list", True))
    else:
        corpus_plus_refs = None
    if image_dir is not None and not Path(image_dir).is_dir():
        col.error(None, None, f"image folder {image_dir} does not exist", file=image_dir)
    queries, stats = _build_queries(table, path, corpus, corpus_plus_refs, image_dir, col)
    if corpus is None:
        corpus = stats.pop("referenced_ids")
        col.warn(
            None,
            None,
            f"no {CORPUS_NAME} given or found beside the annotations: the corpus is the "
            f"{len(corpus)} images the annotations name (far easier than the official index)",
            file=path,
        )
    else:
        stats.pop("referenced_ids")
    warnings = finish(col)

    info = {
        "source": str(path),
        "corpus_source": corpus_source,
        "grouping": "paraphrase_group_id column" if GROUP_COLUMN in table.column_names else "same set of positives",
        **stats,
    }
    if stored is not None:
        load_cache.write(stored, queries, corpus, info, warnings)
    return Benchmark(
        "pinpoint",
        "pinpoint",
        queries,
        list(corpus),
        images=_image_store(image_dir, cache_dir, online),
        info=info,
        warnings=warnings,
        results_id_format="pinpoint",
    )


def _image_store(image_dir, cache_dir, online: bool) -> FolderImageStore:
    from cir_demo.paths import cache_dir as default_cache

    return FolderImageStore(
        root=image_dir,
        filename_pattern="{id}.jpg",
        url_pattern=pinpoint_cdn_url,
        cache_dir=Path(cache_dir) if cache_dir is not None else default_cache() / "images" / "pinpoint",
        online=online,
    )


def _read_table(path: Path, col: IssueCollector):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        col.error(None, None, "annotations file is missing" if not path.exists() else "annotations path is not a file")
        return None
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        col.error(None, None, f"not a readable parquet file (truncated or corrupt?): {exc}")
        return None
    names = set(schema.names)
    for c in REQUIRED_COLUMNS:
        if c not in names:
            col.error(None, c, "required column is missing")
    for c in META_COLUMNS:
        if c not in names:
            col.warn(None, c, f"metadata column is missing; breakdowns by {META_COLUMNS[c]} will be empty")
    for c in _STRING_COLUMNS:
        if c in names and not (
            pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(schema.field(c).type)
        ):
            col.error(None, c, f"expected a string column, got {schema.field(c).type}")
    for c in ("positive_candidates", "negative_candidates"):
        if c in names:
            t = schema.field(c).type
            if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not (
                pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)
            ):
                col.error(None, c, f"expected a list of strings, got {t}")
    for c in _BOOL_COLUMNS:
        if c in names and not pa.types.is_boolean(schema.field(c).type):
            col.error(None, c, f"expected a boolean column, got {schema.field(c).type}")
    if "token_count" in names and not pa.types.is_integer(schema.field("token_count").type):
        col.error(None, "token_count", f"expected an integer column, got {schema.field('token_count').type}")
    if col.errors:
        return None
    wanted = [c for c in OFFICIAL_COLUMNS + (GROUP_COLUMN,) if c in names]
    try:
        return pq.read_table(path, columns=wanted)
    except (pa.ArrowException, OSError, ValueError) as exc:
        col.error(None, None, f"cannot read parquet data (truncated or corrupt?): {exc}")
        return None


def _read_corpus(corpus_ids, annotations: Path, col: IssueCollector) -> tuple[list[str] | None, str]:
    if corpus_ids is None:
        beside = annotations.parent / CORPUS_NAME
        if not beside.is_file():
            return None, "ids named in the annotations"
        corpus_ids = beside
    if isinstance(corpus_ids, (str, Path)):
        p = Path(corpus_ids)
        if not p.is_file():
            col.error(None, None, "corpus id list is missing", file=p)
            return [], str(p)
        return read_id_list(p, col, "corpus id list"), str(p)
    ids = [str(i) for i in corpus_ids]
    if len(set(ids)) != len(ids):
        col.error(None, "corpus_ids", "the corpus id list has duplicates", file="<corpus_ids argument>")
    return ids, "<corpus_ids argument>"


def _column(table, name: str, n: int) -> list:
    return table.column(name).to_pylist() if name in table.column_names else [None] * n


class _QueryRows:
    """Reads the annotation rows into queries, one row at a time: every error goes to `col` as it is
    found, row-level oddities are gathered into lists and warned about once, at the end (`warn`)."""

    def __init__(self, table, corpus: list[str] | None, known_refs: frozenset[str] | None, image_dir):
        n = table.num_rows
        self.corpus_set = frozenset(corpus) if corpus is not None else None
        self.known_refs = known_refs if known_refs is not None else self.corpus_set
        self.image_root = Path(image_dir) if image_dir is not None else None
        self.qids = _column(table, "query_id", n)
        self.refs1 = _column(table, "query_image_signature", n)
        self.refs2 = _column(table, "query_image_signature2", n)
        self.instructions = _column(table, "instruction", n)
        self.positives = _column(table, "positive_candidates", n)
        self.negatives = _column(table, "negative_candidates", n)
        self.meta_cols = {key: _column(table, c, n) for c, key in META_COLUMNS.items() if c in table.column_names}
        self.group_col = _column(table, GROUP_COLUMN, n) if GROUP_COLUMN in table.column_names else None
        self.groups: dict[object, str] = {}  # group key -> group id
        self.group_first: dict[str, tuple] = {}  # group id -> (refs, negatives, n_null) of its first query
        self.mixed_groups: set[str] = set()
        self.judgments_cache: dict[tuple, Judgments] = {}
        self.seen_ids: dict[str, int] = {}
        self.seen_keys: dict[str, str] = {}
        self.referenced: dict[str, None] = {}
        self.odd_ids, self.null_negs, self.missing_neg, self.dup_rows, self.pos_and_neg = [], [], [], [], []
        self.no_markers, self.stray_markers, self.single_mismatch, self.same_refs = [], [], [], []
        self.ref_is_pos, self.odd_tone = [], []

    def query(self, i: int, col: IssueCollector) -> Query | None:
        """Row i as a Query; None when it has an error."""
        qid = self.qids[i]
        loc = f"row {i} ({qid})" if qid else f"row {i}"
        if not self._check_id(i, qid, loc, col):
            return None
        refs, refs_ok = self._refs(i, loc, col)
        instruction_ok = self._check_instruction(self.instructions[i], refs, loc, col)
        pos, neg, n_null, lists_ok = self._judgment_lists(i, loc, col)
        if not (refs_ok and instruction_ok and lists_ok):
            return None
        group_id = self._group(i, qid, refs, pos, neg, n_null)
        judgments = self._judgments(pos, neg, n_null, refs, loc, col)
        if refs[0] in judgments.positives or (len(refs) == 2 and refs[1] in judgments.positives):
            self.ref_is_pos.append(loc)
        return Query(qid, refs, self.instructions[i], group_id, judgments, self._meta(i, refs, loc))

    def _check_id(self, i: int, qid, loc: str, col: IssueCollector) -> bool:
        if is_missing(qid):
            col.error(f"row {i}", "query_id", "empty query id")
            return False
        if qid in self.seen_ids:
            col.error(loc, "query_id", f"duplicate query id (first at row {self.seen_ids[qid]})")
            return False
        self.seen_ids[qid] = i
        if not _QUERY_ID.match(qid):
            self.odd_ids.append(loc)
        key = normalize_pinpoint_query_id(qid)
        if key in self.seen_keys:
            col.error(loc, "query_id", f"results key {key!r} collides with query {self.seen_keys[key]!r}")
        self.seen_keys[key] = qid
        return True

    def _refs(self, i: int, loc: str, col: IssueCollector) -> tuple[tuple, bool]:
        """The row's reference ids, and whether it has a first one; unknown references are errors."""
        r1, r2 = self.refs1[i], self.refs2[i]
        ok = True
        if is_missing(r1):
            col.error(loc, "query_image_signature", "no reference image")
            ok = False
        refs = (r1,) if is_missing(r2) else (r1, r2)
        for field, r in zip(("query_image_signature", "query_image_signature2"), refs):
            if is_missing(r) or (self.known_refs is not None and r in self.known_refs):
                continue
            if self.image_root is not None and (self.image_root / f"{r}.jpg").is_file():
                continue
            if self.corpus_set is not None:
                col.error(
                    loc,
                    field,
                    f"reference image {r!r} does not exist (not in the corpus id list or "
                    f"{EXTRA_REFS_NAME}" + (", not in the image folder)" if self.image_root is not None else ")"),
                )
        if len(refs) == 2 and r1 == r2:
            self.same_refs.append(loc)
        return refs, ok

    def _check_instruction(self, instruction, refs: tuple, loc: str, col: IssueCollector) -> bool:
        if not isinstance(instruction, str) or not instruction.strip():
            col.error(loc, "instruction", "empty instruction")
            return False
        has1, has2 = "<img1>" in instruction, "<img2>" in instruction
        if len(refs) == 2 and not (has1 and has2):
            self.no_markers.append(loc)
        elif len(refs) == 1 and (has1 or has2):
            self.stray_markers.append(loc)
        return True

    def _judgment_lists(self, i: int, loc: str, col: IssueCollector) -> tuple[list, list, int, bool]:
        """(positives, negatives without null entries, number of null negatives, whether the lists are usable)."""
        pos, neg = self.positives[i], self.negatives[i]
        ok = True
        if pos is None:
            col.error(loc, "positive_candidates", "null list")
            ok = False
            pos = []
        if None in pos or "" in pos:
            col.error(loc, "positive_candidates", "list contains a null or empty id")
            ok = False
        if neg is None:
            col.error(loc, "negative_candidates", "null list (use an empty list for no negatives)")
            ok = False
            neg = []
        n_null = neg.count(None) + neg.count("")
        if n_null:
            self.null_negs.append(loc)
            neg = [x for x in neg if not (x is None or x == "")]
        return pos, neg, n_null, ok

    def _group(self, i: int, qid: str, refs: tuple, pos: list, neg: list, n_null: int) -> str:
        """The paraphrase group id: the group column's value, else the first query with the same positives."""
        if self.group_col is not None and not is_missing(self.group_col[i]):
            group_id = self.groups.setdefault(self.group_col[i], self.group_col[i])
        else:
            group_id = self.groups.setdefault(frozenset(pos), qid)
        first = self.group_first.setdefault(group_id, (refs, tuple(neg), n_null))
        if first != (refs, tuple(neg), n_null):
            self.mixed_groups.add(group_id)
        return group_id

    def _judgments(self, pos: list, neg: list, n_null: int, refs: tuple, loc: str, col: IssueCollector) -> Judgments:
        """One shared Judgments per distinct set of lists, checked against the corpus once."""
        judgments_key = (tuple(pos), tuple(neg), n_null)
        judgments = self.judgments_cache.get(judgments_key)
        if judgments is None:
            judgments = self.judgments_cache[judgments_key] = Judgments(tuple(pos), tuple(neg), n_null)
            check_judgments(
                col,
                loc,
                judgments.positives,
                judgments.negatives,
                self.corpus_set,
                pos_field="positive_candidates",
                neg_field="negative_candidates",
                missing_neg=self.missing_neg,
                dup_rows=self.dup_rows,
                pos_and_neg=self.pos_and_neg,
            )
            for x in refs + judgments.positives + judgments.negatives:
                self.referenced[x] = None
        return judgments

    def _meta(self, i: int, refs: tuple, loc: str) -> dict:
        meta = {key: values[i] for key, values in self.meta_cols.items()}
        tone = meta.get("skin_tone_bucket")
        if "skin_tone_bucket" in meta:
            if is_missing(tone) or tone == "UNKNOWN":
                meta["skin_tone_bucket"] = None
            elif tone not in SKIN_TONE_BUCKETS:
                self.odd_tone.append(loc)
        if "is_single" in meta and meta["is_single"] is not None and meta["is_single"] != (len(refs) == 1):
            self.single_mismatch.append(loc)
        return meta

    def warn(self, col: IssueCollector) -> None:
        warn_rows(
            col,
            self.odd_ids,
            "query_id",
            "query id is not 'query_<digits>'; results files key it as normalize_pinpoint_query_id(id)",
        )
        warn_rows(
            col,
            self.null_negs,
            "negative_candidates",
            "null entry in the negative list, dropped (counted in "
            "Judgments.n_null_negatives: the official evaluator counts it in NegRecall's min(len(negatives), k))",
        )
        if self.mixed_groups:
            col.warn(
                None,
                "positive_candidates",
                f"{len(self.mixed_groups)} paraphrase groups (same positives) differ in "
                "their reference images or negatives between paraphrases; each query keeps its own lists, "
                "as the official evaluator does",
            )
        warn_rows(
            col,
            self.missing_neg,
            "negative_candidates",
            "negative(s) not in the corpus (they can never be retrieved)",
            unit="paraphrase groups",
        )
        warn_rows(
            col,
            self.dup_rows,
            None,
            "an id is repeated within a judgment list (kept: the official evaluator counts list lengths with repeats)",
            unit="judgment lists",
        )
        warn_rows(
            col,
            self.pos_and_neg,
            "negative_candidates",
            "an id is both a positive and a negative (the official evaluator counts it as both)",
            unit="paraphrase groups",
        )
        warn_rows(col, self.no_markers, "instruction", "two-image query without both <img1> and <img2> markers")
        warn_rows(col, self.stray_markers, "instruction", "single-image query mentions <img1>/<img2>")
        warn_rows(
            col,
            self.single_mismatch,
            "is_single",
            "is_single disagrees with the reference images "
            "(query_image_signature2 set but is_single=True, or the reverse); meta keeps the file's label",
        )
        warn_rows(col, self.same_refs, "query_image_signature2", "second reference image equals the first")
        warn_rows(col, self.ref_is_pos, "positive_candidates", "a reference image is also a positive")
        warn_rows(col, self.odd_tone, "skin_tone_bucket", f"value not in {SKIN_TONE_BUCKETS} or UNKNOWN")


def _build_queries(
    table, path: Path, corpus: list[str] | None, known_refs: frozenset[str] | None, image_dir, col: IssueCollector
):
    if table.num_rows == 0:
        col.error(None, None, "the annotations have no rows")
    rows = _QueryRows(table, corpus, known_refs, image_dir)
    queries = [q for q in (rows.query(i, col) for i in range(table.num_rows)) if q is not None]
    rows.warn(col)
    stats = {
        "n_groups": len(rows.groups),
        "n_reference_sets": len({q.reference_ids for q in queries}),
        "referenced_ids": list(rows.referenced),
    }
    return queries, stats


# --------------------------------------------------------------------------- export
def export_pinpoint(benchmark: Benchmark, out_dir: str | Path) -> dict[str, Path]:
    """Write `benchmark` in the official PinPoint files so the official evaluator can score it.

    Returns {"annotations": parquet, "corpus_ids": index_signatures.txt} plus
    "reference_ids" (reference_signatures.txt, reference images outside the
    corpus; the official evaluator ignores it) when there are any, and
    "query_id_map" (new id -> original id) when ids had to be renumbered: ids
    that are not all `query_<digits>` (with distinct results keys) become
    query_00001... in benchmark order. Missing metadata is derived where the
    real file shows an exact rule (is_question: ends with '?'; length_category
    from token_count), token_count falls back to the whitespace word count,
    is_imperative to False, and missing string metadata is written as null.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    new_ids, id_map = _official_query_ids([q.query_id for q in benchmark.queries])
    rows: dict[str, list] = {c: [] for c in OFFICIAL_COLUMNS + (GROUP_COLUMN,)}
    for q, new_id in zip(benchmark.queries, new_ids):
        m = q.meta
        token_count = m.get("token_count")
        token_count = int(token_count) if token_count is not None else len(q.instruction.split())
        length = m.get("length_category") or length_category(token_count)
        is_question = m.get("is_question")
        is_imperative = m.get("is_imperative")
        tone = m.get("skin_tone_bucket")
        rows["query_id"].append(new_id)
        rows["query_image_signature"].append(q.reference_ids[0])
        rows["query_image_signature2"].append(q.reference_ids[1] if len(q.reference_ids) > 1 else "None")
        rows["instruction"].append(q.instruction)
        rows["positive_candidates"].append(list(q.positives))
        rows["negative_candidates"].append(list(q.negatives) + [None] * q.judgments.n_null_negatives)
        rows["token_count"].append(token_count)
        rows["length_category"].append(str(length))
        rows["is_question"].append(
            bool(is_question) if is_question is not None else q.instruction.rstrip().endswith("?")
        )
        rows["is_imperative"].append(bool(is_imperative) if is_imperative is not None else False)
        rows["is_single"].append(bool(m.get("is_single", q.is_single)))
        rows["query_category"].append(_str_or_none(m.get("intent_category")))
        rows["skin_tone_bucket"].append(str(tone) if tone is not None else "UNKNOWN")
        rows["l1_interest"].append(_str_or_none(m.get("domain")))
        rows[GROUP_COLUMN].append(q.group_id)
    string, strings = pa.large_string(), pa.list_(pa.string())
    types = {
        "positive_candidates": strings,
        "negative_candidates": strings,
        "token_count": pa.int64(),
        "is_question": pa.bool_(),
        "is_imperative": pa.bool_(),
        "is_single": pa.bool_(),
    }
    schema = pa.schema([(c, types.get(c, string)) for c in OFFICIAL_COLUMNS + (GROUP_COLUMN,)])
    table = pa.table(rows, schema=schema)

    ann = out / ANNOTATIONS_NAME
    with atomic_path(ann) as tmp:
        pq.write_table(table, tmp)
    corpus = out / CORPUS_NAME
    write_text_atomic(corpus, "".join(f"{i}\n" for i in benchmark.corpus_ids))
    paths = {"annotations": ann, "corpus_ids": corpus}
    extra = list(dict.fromkeys(r for q in benchmark.queries for r in q.reference_ids if r not in benchmark.corpus_set))
    if extra:  # reference-only images: not retrievable, so not in the index list
        paths["reference_ids"] = out / EXTRA_REFS_NAME
        write_text_atomic(paths["reference_ids"], "".join(f"{i}\n" for i in extra))
    if id_map is not None:
        paths["query_id_map"] = out / QUERY_ID_MAP_NAME
        write_json_atomic(paths["query_id_map"], id_map)
    return paths


def _official_query_ids(ids: list[str]) -> tuple[list[str], dict[str, str] | None]:
    keys = [normalize_pinpoint_query_id(i) for i in ids]
    if all(_QUERY_ID.match(i) for i in ids) and len(set(keys)) == len(keys):
        return list(ids), None
    new = [f"query_{k:05d}" for k in range(1, len(ids) + 1)]
    return new, dict(zip(new, ids))


def length_category(token_count: int) -> str:
    """The caption-length bucket PinPoint uses (short up to 6 words, medium up to 15, else long); CIRR shares it."""
    for bound, name in _LENGTH_BOUNDS:
        if token_count <= bound:
            return name
    return "long"


def _str_or_none(v) -> str | None:
    return None if v is None else str(v)


__all__ = ["load_pinpoint", "export_pinpoint", "OFFICIAL_COLUMNS"]
