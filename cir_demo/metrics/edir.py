"""EDIR metrics: Recall@1 and Recall@3, overall and per edit subcategory.

Scored exactly as EDIR's official code (github.com/SighingSnow/edir,
`main.py`): it builds qrels `{qid: {pos: 1}}` from instances.jsonl and runs
pytrec_eval's `recall_1` and `recall_3` on the predictions dict. Per query:

- Recall@k = (positives in the top k) / (number of positives), trec_eval's
  `recall_k` (an EDIR query has one positive, so it is 0 or 1). Distinct ids
  count: a run dict cannot repeat an image; a list that does counts it once.
- A query without positives has no qrels entry to pytrec_eval, which leaves
  it out of its results: here it gets a row with `scored` False and NaN
  metrics, is left out of every mean, and is counted
  (`n_queries_without_positives`, with an `UnjudgedQueryWarning`).
- An empty ranking scores 0 and counts (pytrec_eval does the same); a query
  missing from the run is left out (see `coverage`).
- hard_negative@1 = 1 when the top-ranked image is one of the query's hard
  negatives (`Judgments.negatives`): how often the model falls for the edit
  it should have told apart. Not in the paper; ours.

"Total" is the mean over scored queries (micro), the paper's Total column
(the query-weighted mean of its 15 subcategory columns); we report the plain
average of the subcategories too (`Recall@k_macro`).
"""

from __future__ import annotations

import warnings
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from cir_demo.benchmarks.schema import Query
from cir_demo.metrics import check_ks, coverage_counts, duplicate_count, evaluator, matched_rankings, plain_mean

KS = (1, 3)

# Meta keys that name a query's subcategory, in order of preference.
SUBCATEGORY_KEYS = ("edit_subcategory", "edir_subcategory")

# The paper's metrics (Tables 3 and 5); per-subcategory columns `Recall@k/<subcategory>` follow.
OFFICIAL_COLUMNS = ["Recall@1", "Recall@3"]

HEADLINE_METRICS = ["Recall@1", "Recall@3", "hard_negative@1"]

EXTRA_COLUMNS = [
    "n_queries_total",
    "coverage",
    "total_queries",
    "n_scored",
    "n_queries_without_positives",
    "n_queries_with_duplicates",
]


def subcategory_column(metric: str, subcategory: str) -> str:
    return f"{metric}/{subcategory}"


def _subcategory(q: Query) -> str | None:
    for key in SUBCATEGORY_KEYS:
        value = q.meta.get(key)
        if value is not None:
            return str(value)
    return None


class UnjudgedQueryWarning(UserWarning):
    """Some queries have no positives; they are left out of the means, as pytrec_eval leaves them out."""


def per_query(
    run: Mapping[str, Sequence[str]],
    queries: Sequence[Query],
    ks: Sequence[int] = KS,
    results_key: Callable[[str], str] | None = None,
    source: str = "run",
) -> pd.DataFrame:
    """One row per query of `queries` that has an entry in `run` (in the order of `queries`).

    Columns: query_id, group_id, subcategory (None when the query has no
    subcategory meta), scored (False for a query without positives),
    n_retrieved, n_duplicates, Recall@k for each k, hard_negative@1 (NaN
    where not scored). `source` is kept for callers that name the run.
    """
    ks = check_ks(ks)
    matched, rankings = matched_rankings(run, queries, results_key)
    n = len(matched)
    scored = np.array([bool(q.positives) for q in matched], dtype=bool)
    recall = np.full((n, len(ks)), np.nan)
    top_is_negative = np.full(n, np.nan)
    for i, (q, ranking) in enumerate(zip(matched, rankings)):
        if not scored[i]:
            continue
        positives = set(q.positives)
        for j, k in enumerate(ks):
            recall[i, j] = len(positives.intersection(ranking[:k])) / len(positives)
        top_is_negative[i] = float(bool(ranking) and ranking[0] in q.negatives)

    columns: dict[str, object] = {
        "query_id": [q.query_id for q in matched],
        "group_id": [q.group_id for q in matched],
        "subcategory": [_subcategory(q) for q in matched],
        "scored": scored,
        "n_retrieved": np.array([len(r) for r in rankings], dtype=np.int64),
        "n_duplicates": np.array([duplicate_count(r) for r in rankings], dtype=np.int64),
    }
    for j, k in enumerate(ks):
        columns[f"Recall@{k}"] = recall[:, j]
    columns["hard_negative@1"] = top_is_negative
    return pd.DataFrame(columns)


def aggregate(per_query_df: pd.DataFrame, n_queries_total: int) -> dict:
    """Recall@k (micro), Recall@k_macro, hard_negative@1, and each per subcategory, over scored queries."""
    unjudged = int((~per_query_df["scored"]).sum()) if len(per_query_df) else 0
    df = per_query_df[per_query_df["scored"].to_numpy(dtype=bool)] if len(per_query_df) else per_query_df
    if unjudged:
        warnings.warn(
            f"EDIR: {unjudged} queries have no positives; they are left out of every mean "
            "(pytrec_eval, which the official code uses, leaves them out too)",
            UnjudgedQueryWarning,
            stacklevel=2,
        )
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
    out.update(
        coverage_counts(
            "EDIR", len(per_query_df), n_queries_total, n_scored=len(df), n_queries_without_positives=unjudged
        )
    )
    out["n_queries_with_duplicates"] = int((per_query_df["n_duplicates"] > 0).sum()) if len(per_query_df) else 0
    return out


evaluate = evaluator(per_query, aggregate)
