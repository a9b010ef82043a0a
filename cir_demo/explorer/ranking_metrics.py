"""Per-query metrics of the rankings the app shows."""
from __future__ import annotations

import dataclasses
from typing import Sequence

from cir_demo.benchmarks.schema import Query
from cir_demo.explorer.config import METRICS


def query_metrics(ranking: Sequence[str], query: Query) -> dict[str, float]:
    """AP@10, precision@10 and NegRecall@10 of one ranking (the official PinPoint definitions)."""
    return metrics_many([(ranking, query)])[0]


def metrics_many(pairs: Sequence[tuple[Sequence[str], Query]]) -> list[dict[str, float]]:
    """`query_metrics` for many (ranking, query) pairs in one call of the official per-query code
    (a call costs ~10 ms whatever its size, so the app makes one per view, not one per column)."""
    from cir_demo.metrics.pinpoint import per_query

    if not pairs:
        return []
    keyed = [dataclasses.replace(q, query_id=f"{i}\x1f{q.query_id}") for i, (_, q) in enumerate(pairs)]
    df = per_query({k.query_id: list(r) for k, (r, _) in zip(keyed, pairs)}, keyed, ks=(10,)).set_index("query_id")
    out = []
    for k in keyed:
        if k.query_id not in df.index or not bool(df.at[k.query_id, "scored"]):
            out.append({m: float("nan") for m in METRICS})
        else:
            out.append({m: float(df.at[k.query_id, m]) for m in METRICS})
    return out
