"""CIRCO results JSON: `{"<query id>": [image id, ...], ...}`; the list order is the ranking."""

from __future__ import annotations

from pathlib import Path

from cir_demo.results.parsed import Issues, ParsedResults, as_ids, read_per_query

NAME = "circo"
SHAPE = '{"<query>": ["<image>", ...]}'


def fits(value) -> bool:
    return isinstance(value, list)


def _ranking(value, loc: str, issues: Issues):
    if not isinstance(value, list):
        issues.error(loc, None, "expected a list of image ids (CIRCO format)")
        return None
    items = as_ids(value)
    if items is None:
        issues.error(loc, None, "must be a list of image ids (strings)")
        return None
    return items, None


def entry(ids: list[str], scores: list[float] | None) -> list[str]:
    """What a written file holds for one query (the format has no scores)."""
    return ids


def read(path: Path, entries: dict, spec) -> ParsedResults:
    return read_per_query(NAME, path, entries, spec, _ranking)
