"""CIRR metrics, as CLIP4Cir's `compute_cirr_val_metrics` (ABaldrati/CLIP4Cir, src/validate.py) computes them.

Per query, from its ranking (best first):

1. The reference image is deleted from the ranking (every occurrence; CLIP4Cir ranks the whole
   image split, the reference included, and masks it out first).
2. Recall@k (k in 1, 5, 10, 50) = 1 when the hard target is in the top k of what remains.
3. Recall_subset@k (k in 1, 2, 3): the remaining ranking is cut to the members of the query's
   `img_set` (order kept); 1 when the target is in its top k. Members the run never ranked are put
   last, the target after the other unseen members (it gets no credit from an order the run did not
   give), and counted: `n_unseen_set_members` per query, `n_queries_with_unseen_set_members`
   overall, with an `UnseenSetMemberWarning`.

Means are over the queries with an entry in the run, as fractions in [0, 1] (CLIP4Cir prints
percentages: ours x 100). A ranking that repeats an id is an error (CLIP4Cir's rankings are
permutations). A ranking shorter than 50 after the deletion cannot show a target at ranks it does
not list: such rankings are counted (`n_short_rankings`) and warned about.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from cir_demo.benchmarks.schema import BenchmarkError, Query, ValidationIssue
from cir_demo.benchmarks.scoped import subset_of
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

KS = (1, 5, 10, 50)
SUBSET_KS = (1, 2, 3)

OFFICIAL_COLUMNS = [*(f"Recall@{k}" for k in KS), *(f"Recall_subset@{k}" for k in SUBSET_KS)]
# the CIRR leaderboard's "Avg": (Recall@5 + Recall_subset@1) / 2, CLIP4Cir's `mean(R@5+R_s@1)`
AVERAGE = "mean(Recall@5,Recall_subset@1)"
HEADLINE_METRICS = ["Recall@1", "Recall@5", "Recall@10", "Recall@50", "Recall_subset@1"]
EXTRA_COLUMNS = [
    AVERAGE,
    "n_queries_total",
    "coverage",
    "total_queries",
    "n_queries_with_unseen_set_members",
    "n_short_rankings",
]


class UnseenSetMemberWarning(UserWarning):
    """Some rankings lack members of the query's img_set: they are ranked last for Recall_subset@k."""


class ShortRankingWarning(UserWarning):
    """Some rankings list fewer images than the largest cutoff once the reference is deleted."""


def _check(matched: Sequence[Query], rankings: Sequence[list], source: str) -> None:
    issues = repeated_id_issues(matched, rankings, source, "; CIRR rankings list each image once")
    issues += [
        ValidationIssue(
            "error",
            source,
            f"query {q.query_id}",
            "target_hard",
            "no target (the test1 split hides them): write the test-server files with "
            "`python -m cir_demo submission --benchmark cirr --split test1 ...`",
        )
        for q in matched
        if q.target_id is None
    ]
    if issues:
        raise BenchmarkError(issues)


def target_ranks(ranking: list, q: Query) -> tuple[float, int, int, int]:
    """(target rank after the reference deletion or inf, its rank within the set, set size, unseen members).

    Positions come from `list.index` (C speed): the ranking holds each id once (checked before).
    """
    ref = q.reference_ids[0]
    members = [m for m in subset_of(q.judgments) if m != ref]
    pos = {}
    for m in members:
        try:
            pos[m] = ranking.index(m)
        except ValueError:
            pass
    target = q.target_id
    try:
        t = ranking.index(target) if target not in pos else pos[target]
    except ValueError:
        rank = math.inf
    else:
        try:
            rank = t + 1 - (ranking.index(ref) < t)
        except ValueError:
            rank = t + 1
    unseen = len(members) - len(pos)
    if target in pos:
        subset_rank = 1 + sum(p < pos[target] for p in pos.values())
    else:  # unseen: after every other member, seen or not
        subset_rank = len(members)
    return rank, subset_rank, len(members), unseen


def per_query(
    run: Mapping[str, Sequence[str]],
    queries: Sequence[Query],
    ks: Sequence[int] = KS,
    results_key: Callable[[str], str] | None = None,
    source: str = "run",
    subset_ks: Sequence[int] = SUBSET_KS,
) -> pd.DataFrame:
    """One row per query of `queries` with an entry in `run` (in the order of `queries`).

    Columns: query_id, group_id, scored (True), n_retrieved (after the reference deletion),
    target_rank (NaN when not ranked), subset_rank, n_unseen_set_members, reference_rank (where the run put
    the reference before its deletion, NaN when absent), Recall@k, Recall_subset@k.
    Raises BenchmarkError naming every query whose ranking repeats an id or that has no target.
    """
    ks, subset_ks = check_ks(ks), check_ks(subset_ks)
    matched, rankings = matched_rankings(run, queries, results_key)
    _check(matched, rankings, source)
    n = len(matched)
    rank = np.empty(n)
    subset_rank = np.empty(n)
    unseen = np.empty(n, dtype=np.int64)
    n_retrieved = np.empty(n, dtype=np.int64)
    reference_rank = np.full(n, np.nan)
    for i, (q, ranking) in enumerate(zip(matched, rankings)):
        rank[i], subset_rank[i], _, unseen[i] = target_ranks(ranking, q)
        has_reference = q.reference_ids[0] in ranking
        n_retrieved[i] = len(ranking) - has_reference
        if has_reference:
            reference_rank[i] = ranking.index(q.reference_ids[0]) + 1
    columns: dict[str, object] = {
        "query_id": [q.query_id for q in matched],
        "group_id": [q.group_id for q in matched],
        "scored": np.ones(n, dtype=bool),
        "n_retrieved": n_retrieved,
        "target_rank": np.where(np.isinf(rank), np.nan, rank),
        "subset_rank": subset_rank,
        "n_unseen_set_members": unseen,
        "reference_rank": reference_rank,
    }
    for k in ks:
        columns[f"Recall@{k}"] = (rank <= k).astype(float)
    for k in subset_ks:
        columns[f"Recall_subset@{k}"] = (subset_rank <= k).astype(float)
    return pd.DataFrame(columns)


def aggregate(per_query_df: pd.DataFrame, n_queries_total: int) -> dict:
    """Recall@k and Recall_subset@k (plain means, fractions), their CIRR average, coverage and counts."""
    df = per_query_df
    out: dict = {}
    for c in df.columns:
        if c.startswith(("Recall@", "Recall_subset@")):
            out[c] = plain_mean(df[c].to_numpy())
    if "Recall@5" in out and "Recall_subset@1" in out:
        out[AVERAGE] = (out["Recall@5"] + out["Recall_subset@1"]) / 2
    with_unseen = int((df["n_unseen_set_members"] > 0).sum()) if len(df) else 0
    largest = max((int(c.split("@")[1]) for c in df.columns if c.startswith("Recall@")), default=0)
    short = short_ranking_count(df, "n_retrieved", largest)
    if with_unseen:
        warnings.warn(
            f"CIRR: {with_unseen} rankings lack some members of their img_set; those are ranked last "
            "(the target after the others) for Recall_subset@k",
            UnseenSetMemberWarning,
            stacklevel=2,
        )
    if short:
        warnings.warn(
            f"CIRR: {short} rankings list fewer than {largest} images once the reference is deleted and "
            f"do not contain the target; Recall@{largest} counts only what they list",
            ShortRankingWarning,
            stacklevel=2,
        )
    out.update(coverage_counts("CIRR", len(df), n_queries_total))
    out["n_queries_with_unseen_set_members"] = with_unseen
    out["n_short_rankings"] = short
    return out


def run_warnings(metrics: Mapping) -> list[str]:
    """What the report should say about a scored run (the counts `aggregate` returned)."""
    return count_warnings(
        metrics,
        {
            "n_queries_with_unseen_set_members": "rankings lack some members of their img_set: those members are ranked "
            "last (the target after the others) for Recall_subset@k",
            "n_short_rankings": "rankings are shorter than 50 once the reference is deleted and do not contain the "
            "target: Recall@50 counts only what they list",
        },
    )


evaluate = evaluator(per_query, aggregate)
