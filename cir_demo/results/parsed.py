"""What every reader returns: rankings keyed as in the file, before they meet a benchmark."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cir_demo.benchmarks.schema import BenchmarkError, ValidationIssue


@dataclass
class Entry:
    """One query's ranking as the file gives it (best first)."""

    key: str  # the query key as written in the file
    items: list[str]
    scores: list[float] | None
    location: str  # where it is in the file: "query '00001'" or "line 12"


@dataclass
class ParsedResults:
    format: str
    entries: list[Entry]
    spec: dict[str, Any] | None = None
    # per-format facts worth a warning (e.g. TREC lines whose rank column disagrees with the score order)
    notes: list[str] = field(default_factory=list)


class Issues:
    """Errors found while reading one file in the format `fmt`; raised together at the end. Each
    names the format the file was read in, so a fault reads the same in every format."""

    def __init__(self, path: Path, fmt: str):
        self.path = path
        self.format = fmt
        self.errors: list[ValidationIssue] = []

    def error(self, location: str | None, field_: str | None, message: str) -> None:
        self.errors.append(
            ValidationIssue("error", str(self.path), location, field_, f"read as {self.format} results: {message}")
        )

    def raise_if_any(self) -> None:
        if self.errors:
            raise BenchmarkError(self.errors)


def read_per_query(name: str, path: Path, entries: dict, spec, ranking_of: Callable) -> ParsedResults:
    """The Entry of each query of a results object `{query key: value}`: `ranking_of(value, location, issues)`
    gives (items, scores or None), or None after recording an error; all errors are raised together."""
    issues = Issues(path, name)
    out: list[Entry] = []
    for key, value in entries.items():
        loc = f"query {key!r}"
        ranking = ranking_of(value, loc, issues)
        if ranking is not None:
            out.append(Entry(str(key), ranking[0], ranking[1], loc))
    issues.raise_if_any()
    return ParsedResults(name, out, spec)


def as_ids(items: list) -> list[str] | None:
    """A list of image ids as strings (integer ids converted); None when an entry is not an id."""
    if set(map(type, items)) <= {str}:  # the common case checked at C speed; the rest one by one
        return items
    if not all(is_id(i) for i in items):
        return None
    return [str(i) for i in items]


def fail(path: Path, location: str | None, field_: str | None, message: str) -> BenchmarkError:
    return BenchmarkError([ValidationIssue("error", str(path), location, field_, message)])


def is_score(x: Any) -> bool:
    """A JSON number, finite or not (NaN and Infinity parse as floats): what a score field holds."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    return is_score(x) and math.isfinite(x)


def is_id(x: Any) -> bool:
    return isinstance(x, (str, int)) and not isinstance(x, bool)


def rank_scores(n: int) -> list[float]:
    """Scores for a ranking written without any: rank r of n gets n - r, so every reader recovers the order."""
    return [float(n - r) for r in range(n)]


def trec_order(ids: list[str], scores: list[float]) -> tuple[list[str], list[float]]:
    """Score descending; equal scores by image id descending (byte order).

    This is trec_eval's rule (and so pytrec_eval's): it sorts a query's
    documents by score, then by document id in reverse `strcmp` order, and
    ignores any rank column. Using it makes our Recall@k on a score file
    equal to pytrec_eval's, ties included.
    """
    pairs = sorted(zip(ids, scores), key=lambda p: p[0].encode("utf-8"), reverse=True)
    pairs.sort(key=lambda p: p[1], reverse=True)  # stable: equal scores keep the id-descending order
    return [p[0] for p in pairs], [p[1] for p in pairs]


def short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
