"""CIRCO results JSON: `{"<query id>": [image id, ...], ...}`; the list order is the ranking."""
from __future__ import annotations

from pathlib import Path

from cir_demo.results.parsed import Entry, Issues, ParsedResults, is_id

NAME = "circo"
SHAPE = '{"<query>": ["<image>", ...]}'


def fits(value) -> bool:
    return isinstance(value, list)


def entry(ids: list[str], scores: list[float] | None) -> list[str]:
    """What a written file holds for one query (the format has no scores)."""
    return ids


def read(path: Path, entries: dict, spec) -> ParsedResults:
    issues = Issues(path)
    out: list[Entry] = []
    for key, value in entries.items():
        loc = f"query {key!r}"
        if not isinstance(value, list):
            issues.error(loc, None, "expected a list of image ids (CIRCO format)")
            continue
        if not set(map(type, value)) <= {str}:
            if not all(is_id(i) for i in value):
                issues.error(loc, None, "must be a list of image ids (strings)")
                continue
            value = [str(i) for i in value]
        out.append(Entry(str(key), value, None, loc))
    issues.raise_if_any()
    return ParsedResults(NAME, out, spec)
