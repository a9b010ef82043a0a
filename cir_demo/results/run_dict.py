"""Run dicts: `{"<query id>": {"<image id>": score, ...}, ...}`.

The shape pytrec_eval takes and ranx, mteb and EDIR's `main.py` write (EDIR
saves each query's top 100). A dict has no order, so the ranking is by score
descending, equal scores by image id descending (trec_eval's rule, see
`parsed.trec_order`), which makes our numbers equal pytrec_eval's.
"""

from __future__ import annotations

from pathlib import Path

from cir_demo.results.parsed import (
    Issues,
    ParsedResults,
    is_number,
    is_score,
    rank_scores,
    read_per_query,
    short,
    trec_order,
)

NAME = "run-dict"
SHAPE = '{"<query>": {"<image>": <score>, ...}}'


def fits(value) -> bool:
    """Its shape: numbers by image id (a NaN or Infinity among them is this format's fault, said by `read`)."""
    return isinstance(value, dict) and "retrieved_items" not in value and all(is_score(s) for s in value.values())


def _ranking(value, loc: str, issues: Issues):
    if not isinstance(value, dict):
        issues.error(loc, None, f"expected an object mapping image ids to scores (run dict), got {short(value)}")
        return None
    bad = next((k for k, s in value.items() if not is_number(s)), None)
    if bad is not None:
        issues.error(loc, str(bad), f"score must be a finite number, got {short(value[bad])}")
        return None
    return trec_order([str(k) for k in value], [float(s) for s in value.values()])


def entry(ids: list[str], scores: list[float] | None) -> dict:
    """What a written file holds for one query; without scores, rank r of n gets n - r (same order back)."""
    return dict(zip(ids, scores if scores is not None else rank_scores(len(ids))))


def read(path: Path, entries: dict, spec) -> ParsedResults:
    return read_per_query(NAME, path, entries, spec, _ranking)
