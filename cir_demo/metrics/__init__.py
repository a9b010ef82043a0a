"""Retrieval metrics as pure functions over rankings and judgments.

Modules (import the one you need; none of them imports torch):

- `pinpoint`: the official PinPoint `evaluate.py` metrics (precision/recall/AP/
  NegRecall at k, the no-negatives variant, linguistic sensitivity) plus the
  paper's paraphrase-group sensitivity.
- `circo`: the official CIRCO metrics (mAP@k over all ground truths, Recall@k
  over the single target, semantic-aspect mAP@10).
- `edir`: EDIR Recall@1/@3, overall and per edit subcategory.
- `bootstrap`: group-resampling confidence intervals and the paired bootstrap.
- `breakdown`: any per-query metric broken down by a metadata field.

Shared conventions: a run is `{query_id: [image_id, ...]}` best first; every
metric is a fraction in [0, 1]; `per_query` returns one row per query that has
an entry in the run (queries missing from the run are left out of every mean
and reported through `coverage`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np


class CoverageWarning(UserWarning):
    """A run has no entry for some of the benchmark's queries."""


def check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    """Cutoffs as a sorted tuple of distinct positive ints (clear error otherwise)."""
    try:
        out = tuple(sorted({int(k) for k in ks}))
    except (TypeError, ValueError):
        raise ValueError(f"parameter ks: expected positive integers, got {ks!r}") from None
    if not out or out[0] < 1 or any(int(k) != k for k in ks):
        raise ValueError(f"parameter ks: expected positive integers, got {ks!r}")
    return out


def ranking_or_none(run: Mapping[str, Any], query_id: str, results_key: Callable[[str], str] | None):
    """The ranking of one query as a list (None when the run has no entry).

    A `None` value counts as an empty ranking (the official PinPoint reader
    treats a missing `retrieved_items` the same way). A bare string is refused:
    iterating it would silently rank its characters.
    """
    key = results_key(query_id) if results_key is not None else query_id
    if key not in run:
        return None
    ranking = run[key]
    if ranking is None:
        return []
    if isinstance(ranking, (str, bytes)):
        raise TypeError(f"run[{key!r}]: a ranking must be a list of image ids, got a {type(ranking).__name__}")
    return ranking if isinstance(ranking, list) else list(ranking)


def matched_rankings(
    run: Mapping[str, Any], queries: Sequence, results_key: Callable[[str], str] | None
) -> tuple[list, list[list]]:
    """(the queries of `queries` that have an entry in `run`, in their order; those entries as lists)."""
    matched, rankings = [], []
    for q in queries:
        ranking = ranking_or_none(run, q.query_id, results_key)
        if ranking is not None:
            matched.append(q)
            rankings.append(ranking)
    return matched, rankings


def evaluator(per_query: Callable, aggregate: Callable) -> Callable:
    """A metrics module's `evaluate(run, queries, **per_query options) -> (metrics, per-query table)`:
    `aggregate(per_query(...))` with the benchmark size taken from `queries`."""

    def evaluate(run, queries, *args, **kwargs):
        """`aggregate(per_query(run, queries, ...))` with the benchmark size taken from `queries`."""
        df = per_query(run, queries, *args, **kwargs)
        return aggregate(df, len(queries)), df

    return evaluate


def plain_mean(values: np.ndarray) -> float:
    """`np.mean` over the values, 0.0 when there are none (the official rule)."""
    values = np.asarray(values, dtype=float)
    return float(np.mean(values)) if values.size else 0.0


def warn_coverage(benchmark: str, matched: int, total: int, stacklevel: int = 3) -> float:
    """Coverage of a run (matched / total); warns when below 100%."""
    coverage = matched / total if total else math.nan
    if total and matched < total:
        warnings.warn(
            f"{benchmark}: the run has results for {matched} of {total} queries ({coverage:.1%}); "
            "the missing queries are left out of every mean",
            CoverageWarning,
            stacklevel=stacklevel,
        )
    return coverage


def coverage_counts(benchmark: str, matched: int, total: int, **between: Any) -> dict[str, Any]:
    """The counts every family's `aggregate` ends with: `total_queries` (the rankings scored), then
    `between` (a family's own counts, in order), `n_queries_total` and `coverage` (warned when below 100%)."""
    # stacklevel 4: the warning names the line that called the family's `aggregate`
    coverage = warn_coverage(benchmark, matched, total, stacklevel=4)
    return {"total_queries": matched, **between, "n_queries_total": int(total), "coverage": coverage}


def short_ranking_count(df, listed: str, largest: int) -> int:
    """Rankings that list fewer than `largest` images (column `listed`, counted after the protocol's deletion
    or gallery cut) and lack the target: their Recall@largest counts only what they list."""
    return int(((df[listed] < largest) & df["target_rank"].isna()).sum()) if len(df) else 0


def duplicate_count(ranking: Sequence[str]) -> int:
    """How many entries of a ranking repeat an earlier entry."""
    return len(ranking) - len(set(ranking))


def repeated_id_issues(matched, rankings, source: str, why: str = "") -> list:
    """One error per ranking that lists an image twice (protocols whose reference rankings are permutations)."""
    from cir_demo.benchmarks.schema import ValidationIssue

    return [
        ValidationIssue("error", source, f"query {q.query_id}", "ranking", "the ranking repeats an image" + why)
        for q, r in zip(matched, rankings)
        if len(set(r)) != len(r)
    ]


def count_warnings(metrics: Mapping, messages: Mapping[str, str]) -> list[str]:
    """`run_warnings` of a metrics module: "<count> <message>" for each count in `metrics` that is not 0."""
    return [f"{metrics[key]} {message}" for key, message in messages.items() if metrics.get(key)]
