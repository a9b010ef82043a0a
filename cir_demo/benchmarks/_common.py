"""Validation helpers shared by the benchmark adapters (not a public API)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from cir_demo.benchmarks.schema import BenchmarkError, IssueCollector, ValidationIssue

MAX_LISTED = 5  # rows named in one aggregated warning


def files_checksum(files: Iterable[Path], *parts: Any) -> str:
    """sha256 over each file's bytes (an absent one counts as absent) and `parts` (the split, the corpus
    ids): the benchmark's fingerprint (`engine.benchmark_fingerprint`), so a run of other files, or of another
    split, of a benchmark with the same name is told apart from a run of these."""
    import hashlib

    h = hashlib.sha256()
    for f in files:
        try:
            with open(f, "rb") as fh:
                h.update(hashlib.file_digest(fh, "sha256").digest())
        except OSError:
            h.update(b"\0absent\0")
    for part in parts:
        h.update(repr(part).encode() + b"\0")
    return h.hexdigest()


def finish(collector: IssueCollector) -> list[ValidationIssue]:
    """Raise one BenchmarkError (errors first, then warnings) if any error; else return the warnings."""
    if collector.errors:
        raise BenchmarkError(collector.errors + collector.warnings)
    return collector.warnings


def list_locations(locations: Sequence[str], max_listed: int = MAX_LISTED) -> str:
    shown = ", ".join(locations[:max_listed])
    more = len(locations) - max_listed
    return f"{shown} and {more} more" if more > 0 else shown


def warn_rows(
    collector: IssueCollector,
    locations: Sequence[str],
    field: str | None,
    message: str,
    file: str | Path | None = None,
    unit: str = "rows",
) -> None:
    """One warning for a problem that repeats over many rows (the first few named, then counted)."""
    if not locations:
        return
    collector.warn(list_locations(list(locations)), field, f"{message} ({len(locations)} {unit})", file=file)


def is_missing(value: Any) -> bool:
    """None, NaN, '' and the string 'None' (PinPoint's marker for "no second image")."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value.strip() in ("", "None")


def require_file(path: Path, collector: IssueCollector, what: str) -> bool:
    if path.is_file():
        return True
    if path.exists():
        collector.error(None, None, f"{what} is not a file", file=path)
    else:
        collector.error(None, None, f"{what} is missing", file=path)
    return False


def read_id_list(path: Path, collector: IssueCollector, what: str = "id list", allow_empty: bool = False) -> list[str]:
    """One id per line; blank lines are skipped; duplicates and ids with spaces are errors."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        collector.error(None, None, f"{what} is not UTF-8 text ({exc})", file=path)
        return []
    except OSError as exc:
        collector.error(None, None, f"cannot read {what}: {exc}", file=path)
        return []
    n_errors_before = len(collector.errors)
    # Fast path (the real 230K-line list): one id per non-empty line, no repeats; checked at C speed.
    lines = text.splitlines()
    ids = text.split()
    if len(ids) == len(lines) - lines.count("") and len(set(ids)) == len(ids):
        if not ids and not allow_empty:
            collector.error(None, None, f"{what} is empty", file=path)
        return ids
    ids = []
    first_line: dict[str, int] = {}
    for lineno, raw in enumerate(lines, start=1):
        parts = raw.split(None, 1)  # C-level whitespace test: 110K lines must read in milliseconds
        if not parts:
            continue
        s = parts[0]
        if len(parts) > 1:
            collector.error(
                f"line {lineno}", None, f"{raw.strip()!r} contains whitespace; expected one id per line", file=path
            )
            continue
        if s in first_line:
            collector.error(f"line {lineno}", None, f"duplicate id {s!r} (first on line {first_line[s]})", file=path)
            continue
        first_line[s] = lineno
        ids.append(s)
    if not ids and not allow_empty and len(collector.errors) == n_errors_before:
        collector.error(None, None, f"{what} is empty", file=path)
    return ids


def read_jsonl(path: Path, collector: IssueCollector) -> list[tuple[int, dict]]:
    """(1-based line number, object) for each non-blank line; bad lines are errors."""
    rows: list[tuple[int, dict]] = []
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        collector.error(None, None, f"cannot read: {exc}", file=path)
        return rows
    with fh:
        try:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    collector.error(
                        f"line {lineno}", None, f"malformed JSON ({exc.msg} at column {exc.colno})", file=path
                    )
                    continue
                if not isinstance(obj, dict):
                    collector.error(
                        f"line {lineno}", None, f"expected a JSON object, got {type(obj).__name__}", file=path
                    )
                    continue
                rows.append((lineno, obj))
        except UnicodeDecodeError as exc:
            collector.error(None, None, f"not UTF-8 text ({exc})", file=path)
    return rows


def id_rows(
    path: Path,
    collector: IssueCollector,
    field: str,
    what: str,
    first: dict[str, int] | None = None,
    duplicate: str | None = None,
    loc_with_id: bool = True,
) -> Iterator[tuple[int, dict, str, str]]:
    """(line number, row, id, location) of each JSONL row whose `field` holds an id; a row without one is an
    error ("missing or empty <what>") and is skipped. With `first` (id -> first line, filled here) a
    repeated id is an error too (`duplicate`, formatted with the id and the first line, or "duplicate
    <what> (first on line N)") and is skipped. The location is "line N (id)", or "line N" without
    `loc_with_id`."""
    for lineno, row in read_jsonl(path, collector):
        loc = f"line {lineno}"
        rid = as_id(row.get(field))
        if rid is None:
            collector.error(loc, field, f"missing or empty {what}", file=path)
            continue
        if loc_with_id:
            loc = f"line {lineno} ({rid})"
        if first is not None:
            if rid in first:
                message = (duplicate or f"duplicate {what} (first on line {{line}})").format(id=rid, line=first[rid])
                collector.error(loc, field, message, file=path)
                continue
            first[rid] = lineno
        yield lineno, row, rid, loc


def keyed_entries(
    entries: list, collector: IssueCollector, field: str, what: str, seen: dict[str, int]
) -> Iterator[tuple[int, str, str, dict]]:
    """(index, location, id, entry) of each entry of a JSON list of objects keyed by `field`; an entry
    that is not an object, has no id or repeats one is an error and skipped. `seen` gets id -> index."""
    for k, e in enumerate(entries):
        loc = f"entry {k}"
        if not isinstance(e, dict):
            collector.error(loc, None, f"expected an object, got {type(e).__name__}")
            continue
        qid = as_id(e.get(field))
        if qid is None:
            collector.error(loc, field, f"missing {what}")
            continue
        loc = f"entry {k} ({field} {qid})"
        if qid in seen:
            collector.error(loc, field, f"duplicate {what} (first at entry {seen[qid]})")
            continue
        seen[qid] = k
        yield k, loc, qid, e


def judgment_rows(
    path: Path,
    collector: IssueCollector,
    field: str,
    what: str,
    recorded: dict[str, tuple],
    duplicate: str,
    pos_field: str,
    neg_field: str,
    loc_with_id: bool = True,
) -> Iterator[tuple[int, str, str, list[str], list[str]]]:
    """(line number, id, location, positives, negatives) of each JSONL judgment row (negatives default to
    none). Errors, and the row skipped: no id (see `id_rows`), an id already in `recorded` (the caller's
    id -> (first line, ...) of the rows it kept; `duplicate` is formatted with the id and that line), a
    list that is not a list of ids."""
    for lineno, row, rid, loc in id_rows(path, collector, field, what, loc_with_id=loc_with_id):
        if rid in recorded:
            collector.error(loc, field, duplicate.format(id=rid, line=recorded[rid][0]), file=path)
            continue
        pos, neg = id_list(row.get(pos_field)), id_list(row.get(neg_field, []))
        if pos is None:
            collector.error(loc, pos_field, "must be a list of image ids", file=path)
        if neg is None:
            collector.error(loc, neg_field, "must be a list of image ids", file=path)
        if pos is not None and neg is not None:
            yield lineno, rid, loc, pos, neg


def as_id(value: Any) -> str | None:
    """An image/query id as a string: str as is, int as its decimal form; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        s = value.strip()
        return s or None
    if isinstance(value, int):
        return str(value)
    return None


def id_list(value: Any) -> list[str] | None:
    """A JSON list of ids as strings; None when it is not a list of ids."""
    if not isinstance(value, (list, tuple)):
        return None
    out = [as_id(v) for v in value]
    return None if any(v is None for v in out) else out  # type: ignore[return-value]


def check_judgments(
    collector: IssueCollector,
    where: str,
    positives: Sequence[str],
    negatives: Sequence[str],
    corpus: frozenset[str] | set[str] | None,
    *,
    pos_field: str,
    neg_field: str,
    missing_neg: list[str],
    dup_rows: list[str],
    pos_and_neg: list[str],
    file: str | Path | None = None,
    no_pos: list[str] | None = None,
    missing_pos: list[str] | None = None,
) -> None:
    """Errors: no positives, a positive absent from the corpus.

    A benchmark whose official scorer accepts those (EDIR: pytrec_eval skips a
    query without positives and counts an absent positive in the denominator)
    passes `no_pos` / `missing_pos` lists instead: the locations are collected
    there for one aggregated warning.

    Warnings, collected into the lists for one aggregated warning by the caller:
    negatives absent from the corpus, an id both positive and negative (the
    real PinPoint file has such rows), an id repeated within a list.
    """
    if not positives:
        if no_pos is not None:
            no_pos.append(where)
        else:
            collector.error(where, pos_field, "query has no positives", file=file)
    if corpus is not None:
        absent = [p for p in positives if p not in corpus]
        if absent and missing_pos is not None:
            missing_pos.append(where)
        elif absent:
            collector.error(
                where, pos_field, f"{len(absent)} positive(s) not in the corpus: {_short(absent)}", file=file
            )
        if any(n not in corpus for n in negatives):
            missing_neg.append(where)
    if not set(positives).isdisjoint(negatives):
        pos_and_neg.append(where)
    if len(set(positives)) != len(positives):
        dup_rows.append(f"{where} [{pos_field}]")
    if len(set(negatives)) != len(negatives):
        dup_rows.append(f"{where} [{neg_field}]")


def _short(ids: Iterable[str], n: int = 3) -> str:
    ids = list(ids)
    shown = ", ".join(repr(i) for i in ids[:n])
    return shown + (f" (+{len(ids) - n} more)" if len(ids) > n else "")
