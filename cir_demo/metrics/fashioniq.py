"""FashionIQ metrics, as CLIP4Cir's `compute_fiq_val_metrics` (ABaldrati/CLIP4Cir, src/validate.py) computes them.

CLIP4Cir ranks each category's queries among that category's gallery (`split.<category>.val.json`)
and reports, per category, Recall@10 and Recall@50 (the target in the top k), then the plain mean
of the three categories (`average_recall_at10`, `average_recall_at50`) and their mean
(`average_recall`). Nothing is deleted from the ranking (unlike CIRR): a run that ranks the
reference image pays for it.

Here a ranking is first cut to the query's gallery (`ScopedJudgments.gallery`; order kept), so a
run over the union of the galleries scores as the per-category ranking would. Columns are
fractions (CLIP4Cir prints percentages):

- `Recall@k/<category>`: mean over the category's queries; `Recall@k`: mean of the categories
  present (CLIP4Cir's average); `average_recall`: (Recall@10 + Recall@50) / 2.
- `Recall@k_pooled`: mean over all queries (what the confidence intervals are of; equals
  `Recall@k` only when the categories have equally many queries).

A ranking that repeats an id is an error; a ranking with fewer than 50 gallery images that lacks
the target is counted (`n_short_rankings`) and warned about.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from cir_demo.benchmarks.schema import BenchmarkError, Query, ValidationIssue
from cir_demo.benchmarks.scoped import gallery_of
from cir_demo.metrics import (
    check_ks,
    count_warnings,
    coverage_counts,
    evaluator,
    matched_rankings,
    plain_mean,
    repeated_id_issues,
    short_ranking_count,
)

KS = (10, 50)
CATEGORIES = ("dress", "shirt", "toptee")
OFFICIAL_COLUMNS = [
    *(f"Recall@{k}/{c}" for c in CATEGORIES for k in KS),
    *(f"Recall@{k}" for k in KS),
    "average_recall",
]
HEADLINE_METRICS = [f"Recall@{k}" for k in KS]
EXTRA_COLUMNS = [
    *(f"Recall@{k}_pooled" for k in KS),
    "n_queries_total",
    "coverage",
    "total_queries",
    "n_short_rankings",
]


class ShortRankingWarning(UserWarning):
    """Some rankings list fewer gallery images than the largest cutoff and miss the target."""


def target_rank(ranking: list, target: str, gallery: frozenset[str] | None, limit: int) -> tuple[float, int]:
    """(rank of `target` among the ranking's gallery images over the whole ranking, or inf when the ranking
    lacks it; gallery images ranked, capped at `limit`).

    The rank is the official one at any depth (the failure lists and columns say where a target beyond
    the largest cutoff sits); Recall@k reads it only up to k. Positions come from `list.index` and set
    operations (C speed): the ranking holds each id once (checked before).
    """
    try:
        t = ranking.index(target)
    except ValueError:
        t = -1
    if gallery is None:
        return (t + 1 if t >= 0 else math.inf), min(len(ranking), limit)
    seen = min(len(gallery.intersection(ranking)), limit)
    if t < 0 or target not in gallery:
        return math.inf, seen
    return len(gallery.intersection(ranking[: t + 1])), seen


def per_query(
    run: Mapping[str, Sequence[str]],
    queries: Sequence[Query],
    ks: Sequence[int] = KS,
    results_key: Callable[[str], str] | None = None,
    source: str = "run",
) -> pd.DataFrame:
    """One row per query with an entry in `run`: query_id, group_id, category, scored, target_rank (within
    the category's gallery, at any depth; NaN when the ranking lacks the target), n_gallery_ranked (capped
    at the largest cutoff), Recall@k."""
    ks = check_ks(ks)
    matched, rankings = matched_rankings(run, queries, results_key)
    bad = repeated_id_issues(matched, rankings, source)
    bad += [
        ValidationIssue("error", source, f"query {q.query_id}", "target", "no target image")
        for q in matched
        if q.target_id is None
    ]
    if bad:
        raise BenchmarkError(bad)
    n = len(matched)
    rank = np.empty(n)
    seen = np.empty(n, dtype=np.int64)
    for i, (q, ranking) in enumerate(zip(matched, rankings)):
        rank[i], seen[i] = target_rank(ranking, q.target_id, gallery_of(q.judgments), ks[-1])
    columns: dict[str, object] = {
        "query_id": [q.query_id for q in matched],
        "group_id": [q.group_id for q in matched],
        "category": [q.meta.get("category") for q in matched],
        "scored": np.ones(n, dtype=bool),
        "target_rank": np.where(np.isinf(rank), np.nan, rank),
        "n_gallery_ranked": np.minimum(seen, ks[-1]),
    }
    for k in ks:
        columns[f"Recall@{k}"] = (rank <= k).astype(float)
    return pd.DataFrame(columns)


def aggregate(per_query_df: pd.DataFrame, n_queries_total: int) -> dict:
    df = per_query_df
    ks = [int(c.split("@")[1]) for c in df.columns if c.startswith("Recall@")]
    present = [c for c in CATEGORIES if c in set(df["category"])] + sorted(
        {c for c in df["category"] if c not in CATEGORIES and c is not None}
    )
    out: dict = {}
    for c in present:
        rows = df[df["category"] == c]
        for k in ks:
            out[f"Recall@{k}/{c}"] = plain_mean(rows[f"Recall@{k}"].to_numpy())
    for k in ks:
        out[f"Recall@{k}"] = plain_mean(np.array([out[f"Recall@{k}/{c}"] for c in present]))
    if 10 in ks and 50 in ks:
        out["average_recall"] = (out["Recall@10"] + out["Recall@50"]) / 2
    for k in ks:
        out[f"Recall@{k}_pooled"] = plain_mean(df[f"Recall@{k}"].to_numpy())
    for c in present:
        out[f"n_queries/{c}"] = int((df["category"] == c).sum())
    largest = max(ks, default=0)
    short = short_ranking_count(df, "n_gallery_ranked", largest)
    if short:
        warnings.warn(
            f"FashionIQ: {short} rankings list fewer than {largest} gallery images and lack the target; "
            f"Recall@{largest} counts only what they list",
            ShortRankingWarning,
            stacklevel=2,
        )
    out.update(coverage_counts("FashionIQ", len(df), n_queries_total))
    out["n_short_rankings"] = short
    return out


def run_warnings(metrics: Mapping) -> list[str]:
    return count_warnings(
        metrics,
        {
            "n_short_rankings": "rankings list fewer than 50 images of their category's "
            "gallery and lack the target: Recall@50 counts only what they list"
        },
    )


evaluate = evaluator(per_query, aggregate)
