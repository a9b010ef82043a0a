"""PinPoint results JSON: `{"00001": {"retrieved_items": [id, ...], "scores": [float, ...]?}, ...}`.

`scores` is ours and optional (the official evaluator ignores it); keys
starting with `_` are metadata (`_spec`) and ignored by the official code too.
The list order is the ranking.
"""

from __future__ import annotations

from pathlib import Path

from cir_demo.results.parsed import Issues, ParsedResults, as_ids, is_number, read_per_query, short

NAME = "pinpoint"
SHAPE = '{"<query>": {"retrieved_items": ["<image>", ...]}}'


def fits(value) -> bool:
    return isinstance(value, dict) and "retrieved_items" in value


def _ranking(value, loc: str, issues: Issues):
    if not fits(value):
        issues.error(loc, "retrieved_items", "expected an object with a 'retrieved_items' list (PinPoint format)")
        return None
    items, scores = value["retrieved_items"], value.get("scores")
    if items is None:  # the official reader treats a null list as empty
        items = []
    ids = as_ids(items) if isinstance(items, list) else None
    if ids is None:
        issues.error(loc, "retrieved_items", "must be a list of image ids (strings)")
        return None
    if scores is not None:
        fault = _scores_fault(scores, ids)
        if fault:
            issues.error(loc, "scores", f"{fault}: must be a list of finite numbers as long as retrieved_items")
            return None
    return ids, [float(s) for s in scores] if scores is not None else None


def _scores_fault(scores, ids: list[str]) -> str | None:
    """What is wrong with a `scores` list (None when nothing): its type, its length, or its first bad score."""
    if not isinstance(scores, list):
        return f"got {short(scores)}"
    if len(scores) != len(ids):
        return f"{len(scores)} scores for {len(ids)} retrieved items"
    bad = next((i for i, s in enumerate(scores) if not is_number(s)), None)
    if bad is None:
        return None
    return f"the score of image {ids[bad]!r} (position {bad}) is {short(scores[bad])}"


def entry(ids: list[str], scores: list[float] | None) -> dict:
    """What a written file holds for one query: the ranking, and our scores (6 decimals) when given."""
    out: dict = {"retrieved_items": ids}
    if scores is not None:
        out["scores"] = [round(v, 6) for v in scores]
    return out


def read(path: Path, entries: dict, spec) -> ParsedResults:
    return read_per_query(NAME, path, entries, spec, _ranking)
