"""i-CIR metrics, as billpsomas/icir's `run_retrieval.py` computes them (`utils.compute_ap`, `save_results`).

Per query, its ranking is cut to its instance's database (`ScopedJudgments.gallery`; order kept;
the reference code ranks only that database). With the positives at 0-based ranks r_0 < r_1 < ...
of the cut ranking and n = the number of positives:

    AP = sum_j (p0_j + p1_j) / 2 * 1 / (n + 1e-5),  p0_j = 1 if r_j == 0 else j / r_j,  p1_j = (j + 1) / (r_j + 1)

(the trapezoidal rule of the Oxford/Paris evaluation, epsilon included, so a perfect ranking
scores n / (n + 1e-5), a little under 1). Aggregates, as fractions (the reference prints x 100
rounded to 2 decimals): `mAP` (mean over queries), `mmAP` (mean over instances of their mean AP),
`minmAP` (mean over instances of their lowest AP).

The reference code's n is the positives its full ranking holds, so all of them; here n is the
number of positives, so a ranking that leaves positives out is scored as if they were never found:
such rankings are counted (`n_partial_rankings`) and warned about. A repeated id is an error.
"""

from __future__ import annotations

import warnings
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from cir_demo.benchmarks.schema import BenchmarkError, Query
from cir_demo.benchmarks.scoped import gallery_of
from cir_demo.metrics import (
    count_warnings,
    coverage_counts,
    evaluator,
    matched_rankings,
    plain_mean,
    repeated_id_issues,
)

EPSILON = 1e-5  # the reference code's recall step is 1 / (n + 1e-5)
OFFICIAL_COLUMNS = ["model", "mAP", "mmAP", "minmAP"]
HEADLINE_METRICS = ["AP"]
EXTRA_COLUMNS = ["n_instances", "n_queries_total", "coverage", "total_queries", "n_partial_rankings"]


class PartialRankingWarning(UserWarning):
    """Some rankings leave positives of their query unranked."""


def trapezoid_ap(hit_ranks: Sequence[int], n_positives: int) -> float:
    step = 1.0 / (n_positives + EPSILON)
    ap = 0.0
    for j, r in enumerate(hit_ranks):
        p0 = 1.0 if r == 0 else j / r
        ap += (p0 + (j + 1) / (r + 1)) * step / 2.0
    return ap


def per_query(
    run: Mapping[str, Sequence[str]],
    queries: Sequence[Query],
    ks: Sequence[int] = (),
    results_key: Callable[[str], str] | None = None,
    source: str = "run",
) -> pd.DataFrame:
    """One row per query with an entry in `run`: query_id, group_id (the instance), instance, scored,
    n_positives, n_positives_ranked, AP. `ks` is accepted for the common signature and unused."""
    matched, rankings = matched_rankings(run, queries, results_key)
    bad = repeated_id_issues(matched, rankings, source)
    if bad:
        raise BenchmarkError(bad)
    ap, found = np.empty(len(matched)), np.empty(len(matched), dtype=np.int64)
    for i, (q, ranking) in enumerate(zip(matched, rankings)):
        gallery, positives = gallery_of(q.judgments), frozenset(q.positives)
        cut = ranking if gallery is None else [x for x in ranking if x in gallery]
        hits = [r for r, x in enumerate(cut) if x in positives]
        ap[i], found[i] = trapezoid_ap(hits, len(positives)), len(hits)
    return pd.DataFrame(
        {
            "query_id": [q.query_id for q in matched],
            "group_id": [q.group_id for q in matched],
            "instance": [q.meta.get("instance", q.group_id) for q in matched],
            "scored": np.ones(len(matched), dtype=bool),
            "n_positives": np.array([len(set(q.positives)) for q in matched], dtype=np.int64),
            "n_positives_ranked": found,
            "AP": ap,
        }
    )


def aggregate(per_query_df: pd.DataFrame, n_queries_total: int) -> dict:
    df = per_query_df
    by_instance = df.groupby("instance", sort=False)["AP"] if len(df) else None
    partial = int((df["n_positives_ranked"] < df["n_positives"]).sum()) if len(df) else 0
    if partial:
        warnings.warn(
            f"i-CIR: {partial} rankings leave some of their positives unranked; AP scores them as never "
            "found (the reference code ranks the whole instance database)",
            PartialRankingWarning,
            stacklevel=2,
        )
    out = {
        "mAP": plain_mean(df["AP"].to_numpy()),
        "mmAP": plain_mean(by_instance.mean().to_numpy()) if by_instance is not None else 0.0,
        "minmAP": plain_mean(by_instance.min().to_numpy()) if by_instance is not None else 0.0,
        "n_instances": int(df["instance"].nunique()) if len(df) else 0,
        **coverage_counts("i-CIR", len(df), n_queries_total),
        "n_partial_rankings": partial,
    }
    return out


def run_warnings(metrics: Mapping) -> list[str]:
    return count_warnings(
        metrics,
        {
            "n_partial_rankings": "rankings leave some positives unranked: AP scores them as "
            "never found (the reference code ranks each instance's whole database)"
        },
    )


evaluate = evaluator(per_query, aggregate)
