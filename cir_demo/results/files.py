"""Results files: detect the format, read it onto a benchmark's queries, write ours.

Formats (one reader module each; `--results-format` names them):

| name | shape | ranking order |
|---|---|---|
| `pinpoint` | `{"00001": {"retrieved_items": [...], "scores": [...]?}}` | list order |
| `circo` | `{"0": [id, ...]}` | list order |
| `run-dict` | `{"q1": {"img": score, ...}}` (pytrec_eval, ranx, mteb, EDIR main.py) | score desc, ties by id desc |
| `trec` | lines `qid Q0 docid rank score tag` (.trec/.run/.txt) | score desc, ties by id desc |

Our own files are the PinPoint (or CIRCO) format with an optional `scores`
list and a `_spec` key; keys starting with `_` are metadata everywhere.
Detection: a file that parses as JSON is classified by its first query entry;
otherwise it is a TREC run when its first line has the six TREC fields. A file
that fits none gets one error naming the formats tried and its first entry.

A format is one module (NAME, SHAPE, `fits`/`read` or `fits_line`/`read_text`, and for writing
`entry(ids, scores)`, one query's JSON value, or `render(rows)`, a text file) plus its row in
JSON_READERS or TEXT_READERS below; a metric family names the one its official evaluator reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from cir_demo.benchmarks.schema import Benchmark, BenchmarkError, ValidationIssue
from cir_demo.results import circo, pinpoint, run_dict, trec
from cir_demo.results.parsed import ParsedResults, fail, short, trec_order
from cir_demo.utils.io import write_json_atomic, write_text_atomic

# Detection order for JSON files: the first whose `fits` accepts the first entry wins.
JSON_READERS = (pinpoint, circo, run_dict)
# Line formats, tried in this order (their `fits_line` on the first line) when a file is not JSON.
TEXT_READERS = (trec,)
READERS = {m.NAME: m for m in (*JSON_READERS, *TEXT_READERS)}
FORMATS = tuple(READERS)
FORMAT_CHOICES = ("auto", *FORMATS)  # what --results-format accepts
ResultsFormat = str


@dataclass
class ResultsFile:
    """A results file mapped onto a benchmark's query ids, plus what was wrong with it."""

    path: Path
    name: str
    format: ResultsFormat
    run: dict[str, list[str]]
    scores: dict[str, list[float]] = field(default_factory=dict)
    spec: dict[str, Any] | None = None
    unknown_query_keys: list[str] = field(default_factory=list)
    n_missing_queries: int = 0
    n_unknown_ids: int = 0  # retrieved ids not in the corpus (counted per occurrence)
    queries_with_duplicates: list[str] = field(default_factory=list)
    n_empty: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def coverage(self) -> float:
        total = len(self.run) + self.n_missing_queries
        return len(self.run) / total if total else 0.0

    def warnings(self) -> list[ValidationIssue]:
        out: list[ValidationIssue] = []

        def warn(field_: str | None, msg: str) -> None:
            out.append(ValidationIssue("warning", str(self.path), None, field_, msg))

        if self.unknown_query_keys:
            ex = ", ".join(repr(k) for k in self.unknown_query_keys[:5])
            warn(None, f"{len(self.unknown_query_keys)} query keys are not in the benchmark (e.g. {ex}); ignored")
        if self.n_missing_queries:
            warn(
                None,
                f"{self.n_missing_queries} benchmark queries have no entry (coverage {self.coverage:.1%}); "
                "they are left out of every mean, as the official evaluator does",
            )
        if self.n_empty:
            warn(
                "retrieved_items",
                f"{self.n_empty} queries have an empty ranking; counted in total_queries "
                "but left out of the means, as the official evaluator does",
            )
        if self.n_unknown_ids:
            warn("retrieved_items", f"{self.n_unknown_ids} retrieved ids are not in the corpus (they count as misses)")
        if self.queries_with_duplicates:
            ex = ", ".join(self.queries_with_duplicates[:5])
            warn(
                "retrieved_items",
                f"{len(self.queries_with_duplicates)} rankings repeat an id (e.g. {ex}); "
                "the PinPoint evaluator counts every repeat as a hit, so we do too",
            )
        for note in self.notes:
            warn(None, note)
        return out


def _formats_tried() -> str:
    return "; ".join(f"{m.NAME} ({m.SHAPE})" for m in READERS.values())


def _no_format(path: Path, location: str, first: str) -> BenchmarkError:
    return fail(
        path, location, None, f"fits none of the results formats tried: {_formats_tried()}. {FIRST_ENTRY} {first}"
    )


FIRST_ENTRY = "Its first entry is"  # the quote that `problem_line` leaves out


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)  # C speed; this hook runs for every object of a 10 MB file
    if len(out) != len(pairs):
        seen: set = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return out


def _first_line(text: str) -> tuple[int, str] | None:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            return lineno, line
    return None


def parse_results(path: str | Path, fmt: str | None = None, default: str = "pinpoint") -> ParsedResults:
    """Read a results file in `fmt` (None or "auto": detected); `default` names the format of an empty JSON object."""
    path = Path(path)
    if fmt in (None, "auto"):
        fmt = None
    elif fmt not in READERS:
        raise BenchmarkError(
            f"parameter --results-format: unknown format {fmt!r}; choose from auto, " + ", ".join(FORMATS)
        )
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark (some Windows editors write one) is no content
    except FileNotFoundError:
        raise fail(path, None, None, "results file not found") from None
    except IsADirectoryError:
        raise fail(path, None, None, "is a folder, not a results file") from None
    except UnicodeDecodeError as exc:
        raise fail(path, None, None, f"not UTF-8 text: {exc}") from None

    if fmt is not None and hasattr(READERS[fmt], "read_text"):
        return READERS[fmt].read_text(path, text)
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        raise fail(
            path,
            repr(exc.key),
            None,
            f"key {exc.key!r} appears twice (JSON would silently keep the last one); remove one of them",
        ) from None
    except RecursionError:  # deeper than the parser's stack: no results format nests beyond 3 levels
        raise fail(
            path,
            None,
            None,
            "nested too deeply (arrays or objects inside each other thousands of levels down) to be a results file",
        ) from None
    except json.JSONDecodeError as exc:
        if fmt is not None:
            raise fail(path, None, None, f"not valid JSON ({fmt} format): {exc}") from None
        first = _first_line(text)
        reader = next((m for m in TEXT_READERS if first is not None and m.fits_line(first[1])), None)
        if reader is not None:
            return reader.read_text(path, text)
        if first is None:
            raise fail(path, None, None, "the results file is empty") from None
        raise _no_format(path, f"line {first[0]}", f"{short(first[1])} (not valid JSON: {exc})") from None
    if not isinstance(raw, dict):
        if fmt is None:
            raise _no_format(path, None, f"a JSON {type(raw).__name__} at the top level: {short(raw)}")
        raise fail(
            path, None, None, f"top level must be an object mapping query ids to rankings, got {type(raw).__name__}"
        )
    spec = raw.get("_spec") if isinstance(raw.get("_spec"), dict) else None
    entries = {k: v for k, v in raw.items() if not str(k).startswith("_")}
    if fmt is None:
        if not entries:
            fmt = default
        else:
            key, value = next(iter(entries.items()))
            reader = next((m for m in JSON_READERS if m.fits(value)), None)
            if reader is None:
                raise _no_format(path, f"query {key!r}", f"{key!r}: {short(value)}")
            fmt = reader.NAME
    return READERS[fmt].read(path, entries, spec)


def official_format(benchmark: Benchmark) -> str:
    """The results format the benchmark's official evaluator reads (its metric family says)."""
    from cir_demo.benchmarks.families import metric_family

    return metric_family(benchmark.metric_family).results_format


def read_results(path: str | Path, benchmark: Benchmark, fmt: str | None = None) -> ResultsFile:
    """Parse a results file (format detected unless `fmt` names it) against `benchmark`.

    Raises BenchmarkError on malformed input, naming the file, the query or
    line and the field.
    """
    path = Path(path)
    parsed = parse_results(path, fmt, default=official_format(benchmark))

    key_to_qid = {benchmark.results_key(q.query_id): q.query_id for q in benchmark.queries}
    # accept our own query ids as keys too (e.g. "query_00001" or world ids)
    for q in benchmark.queries:
        key_to_qid.setdefault(q.query_id, q.query_id)

    errors: list[ValidationIssue] = []
    res = ResultsFile(
        path=path, name=path.stem, format=parsed.format, run={}, spec=parsed.spec, notes=list(parsed.notes)
    )
    corpus = benchmark.corpus_set
    for entry in parsed.entries:
        qid = key_to_qid.get(entry.key)
        if qid is None:
            res.unknown_query_keys.append(entry.key)
            continue
        if qid in res.run:
            errors.append(
                ValidationIssue("error", str(path), entry.location, None, f"two keys map to the same query {qid!r}")
            )
            continue
        ids = entry.items
        res.run[qid] = ids
        if entry.scores is not None:
            res.scores[qid] = entry.scores
        if not ids:
            res.n_empty += 1
        if len(set(ids)) != len(ids):
            res.queries_with_duplicates.append(entry.key)
        res.n_unknown_ids += len(ids) - sum(map(corpus.__contains__, ids))
    if errors:
        raise BenchmarkError(errors)
    res.n_missing_queries = sum(1 for q in benchmark.queries if q.query_id not in res.run)
    return res


def write_results(
    path: str | Path,
    benchmark: Benchmark,
    run: Mapping[str, Sequence[str]],
    scores: Mapping[str, Sequence[float]] | None = None,
    spec: Mapping[str, Any] | None = None,
    fmt: ResultsFormat | None = None,
) -> Path:
    """Write `run` (atomic) in `fmt`, by default the benchmark's official results format.

    run-dict and TREC files need a score per image: where `scores` has none,
    rank r of n gets n - r, so every reader recovers the same order. (Ties in
    given scores are re-ordered by the trec_eval rule when read back.)
    """
    fmt = fmt or official_format(benchmark)
    if fmt not in READERS:
        raise ValueError(f"parameter fmt: unknown results format {fmt!r}; choose from {', '.join(FORMATS)}")
    rows: list[tuple[str, list[str], list[float] | None]] = []
    for q in benchmark.queries:
        if q.query_id not in run:
            continue
        s = scores.get(q.query_id) if scores is not None else None
        rows.append(
            (benchmark.results_key(q.query_id), list(run[q.query_id]), [float(x) for x in s] if s is not None else None)
        )
    writer = READERS[fmt]  # each format's module writes its own shape: `render(rows)` or one JSON `entry` per query
    if hasattr(writer, "render"):
        write_text_atomic(path, writer.render(rows))
        return Path(path)
    out: dict[str, Any] = {}
    if spec is not None:
        out["_spec"] = dict(spec)
    for key, ids, s in rows:
        out[key] = writer.entry(ids, s)
    write_json_atomic(path, out, indent=None)
    return Path(path)


__all__ = [
    "FORMATS",
    "FORMAT_CHOICES",
    "ResultsFile",
    "ResultsFormat",
    "parse_results",
    "read_results",
    "trec_order",
    "write_results",
]


def problem_line(exc: BaseException, path: str | Path) -> str:
    """An error reading a results file as one line for a page or a listing: the file's name (never its
    server path), the first problem and how many more there are."""
    issues = getattr(exc, "issues", None)
    name = Path(path).name
    if issues:
        first = issues[0]
        where = ", ".join(x for x in (first.location, f"field {first.field!r}" if first.field else None) if x)
        more = (
            f" (and {len(issues) - 1} more problems; `python app.py --eval --results-json` lists them)"
            if len(issues) > 1
            else ""
        )
        return f"{name}: {where + ': ' if where else ''}{_without_content(first.message)}{more}"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{name}: {_without_content(text.replace(str(Path(path).resolve()), name).replace(str(Path(path)), name))}"


def _without_content(message: str) -> str:
    """`message` without the quote of the file's first entry that a refusal carries for the operator: a
    page's visitors never see what a file that is no results file holds (`--runs x=/etc/passwd`)."""
    return message.split(f" {FIRST_ENTRY}", 1)[0]
