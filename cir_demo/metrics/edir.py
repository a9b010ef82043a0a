"""EDIR metrics: Recall@1 and Recall@3, overall and per edit subcategory.

EDIR publishes no evaluation script; the paper (Song et al., 2026, Tables 3
and 5) reports Recall@k, where each query has one target image and three hard
negatives edited from the same source. We define, per query:

- Recall@k = 1 when the target is in the top k, else 0. The target is
  `Query.target_id`; when it is None, any image of `Judgments.positives`
  counts (an EDIR query has exactly one).
- hard_negative@1 = 1 when the top-ranked image is one of the query's hard
  negatives (`Judgments.negatives`), else 0: how often the model falls for
  the edit it should have told apart. Not in the paper; ours.

"Total" is the mean over queries (micro): the paper's Total column matches
the query-weighted mean of its 15 subcategory columns (300 queries each,
800 for Complex), not their plain average; we report the plain average of the
subcategories too (`Recall@k_macro`). An empty ranking scores 0; a query
missing from the run is left out (see `coverage`).
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from cir_demo.benchmarks.schema import BenchmarkError, Query, ValidationIssue
from cir_demo.metrics import check_ks, duplicate_count, plain_mean, ranking_or_none, warn_coverage

KS = (1, 3)

# Meta keys that name a query's subcategory, in order of preference.
SUBCATEGORY_KEYS = ("edit_subcategory", "edir_subcategory")

# The paper's metrics (Tables 3 and 5); per-subcategory columns `Recall@k/<subcategory>` follow.
OFFICIAL_COLUMNS = ["Recall@1", "Recall@3"]

HEADLINE_METRICS = ["Recall@1", "Recall@3", "hard_negative@1"]

EXTRA_COLUMNS = ["n_queries_total", "coverage", "total_queries", "n_queries_with_duplicates"]


def subcategory_column(metric: str, subcategory: str) -> str:
    return f"{metric}/{subcategory}"


def _subcategory(q: Query) -> str | None:
    for key in SUBCATEGORY_KEYS:
        value = q.meta.get(key)
        if value is not None:
            return str(value)
    return None


def _targets(q: Query) -> frozenset:
    return frozenset((q.target_id,)) if q.target_id is not None else frozenset(q.positives)


def per_query(
    run: Mapping[str, Sequence[str]],
    queries: Sequence[Query],
    ks: Sequence[int] = KS,
    results_key: Callable[[str], str] | None = None,
    source: str = "run",
) -> pd.DataFrame:
    """One row per query of `queries` that has an entry in `run` (in the order of `queries`).

    Columns: query_id, group_id, subcategory (None when the query has no
    subcategory meta), scored (always True), n_retrieved, n_duplicates,
    Recall@k for each k, hard_negative@1. Raises BenchmarkError naming every
    query that has neither a target nor a positive.
    """
    ks = check_ks(ks)
    width = ks[-1]
    matched, rankings = [], []
    for q in queries:
        ranking = ranking_or_none(run, q.query_id, results_key)
        if ranking is not None:
            matched.append(q)
            rankings.append(ranking)
    missing_target = [
        ValidationIssue("error", source, f"query {q.query_id}", "target_id", "no target image (Recall@k is undefined)")
        for q in matched
        if not _targets(q)
    ]
    if missing_target:
        raise BenchmarkError(missing_target)

    # first_hit_rank: 1-based rank of the first target in the top `width`, or width + 1.
    first_hit_rank = np.full(len(matched), width + 1, dtype=np.int64)
    top_is_negative = np.zeros(len(matched), dtype=float)
    for i, (q, ranking) in enumerate(zip(matched, rankings)):
        targets = _targets(q)
        for rank, item in enumerate(ranking[:width], start=1):
            if item in targets:
                first_hit_rank[i] = rank
                break
        if ranking and ranking[0] in q.negatives:
            top_is_negative[i] = 1.0

    columns: dict[str, object] = {
        "query_id": [q.query_id for q in matched],
        "group_id": [q.group_id for q in matched],
        "subcategory": [_subcategory(q) for q in matched],
        "scored": np.ones(len(matched), dtype=bool),
        "n_retrieved": np.array([len(r) for r in rankings], dtype=np.int64),
        "n_duplicates": np.array([duplicate_count(r) for r in rankings], dtype=np.int64),
    }
    for k in ks:
        columns[f"Recall@{k}"] = (first_hit_rank <= k).astype(float)
    columns["hard_negative@1"] = top_is_negative
    return pd.DataFrame(columns)


def aggregate(per_query_df: pd.DataFrame, n_queries_total: int) -> dict:
    """Recall@k (micro), Recall@k_macro, hard_negative@1, and each per subcategory."""
    df = per_query_df
    metrics = [c for c in df.columns if c.startswith("Recall@")] + ["hard_negative@1"]
    out: dict = {m: plain_mean(df[m].to_numpy()) for m in metrics}
    named = df[df["subcategory"].notna()]
    subcategories = list(dict.fromkeys(named["subcategory"]))
    for metric in metrics:
        per_sub = [plain_mean(named.loc[named["subcategory"] == s, metric].to_numpy()) for s in subcategories]
        if metric.startswith("Recall@"):
            out[f"{metric}_macro"] = plain_mean(np.array(per_sub)) if per_sub else np.nan
        for sub, value in zip(subcategories, per_sub):
            out[subcategory_column(metric, sub)] = value
    for sub in subcategories:
        out[f"n_queries/{sub}"] = int((named["subcategory"] == sub).sum())
    out["total_queries"] = len(df)
    out["n_queries_total"] = int(n_queries_total)
    out["coverage"] = warn_coverage("EDIR", len(df), n_queries_total)
    out["n_queries_with_duplicates"] = int((df["n_duplicates"] > 0).sum())
    return out


def evaluate(
    run: Mapping[str, Sequence[str]],
    queries: Sequence[Query],
    ks: Sequence[int] = KS,
    results_key: Callable[[str], str] | None = None,
    source: str = "run",
) -> tuple[dict, pd.DataFrame]:
    df = per_query(run, queries, ks=ks, results_key=results_key, source=source)
    return aggregate(df, len(queries)), df
