"""Per-query metrics of the rankings the app shows: the metric family's `shown` columns, computed
by the family's official per-query code (so they are the numbers `--eval` reports)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from cir_demo.benchmarks.schema import Query
from cir_demo.benchmarks.families import MetricFamily, metric_family


def query_metrics(ranking: Sequence[str], query: Query, family: MetricFamily | str = "pinpoint") -> dict[str, float]:
    """The family's shown metrics of one ranking (PinPoint: AP@10, precision@10 and NegRecall@10)."""
    return metrics_many([(ranking, query)], family)[0]


def metrics_many(
    pairs: Sequence[tuple[Sequence[str], Query]], family: MetricFamily | str = "pinpoint", extra: Sequence[str] = ()
) -> list[dict[str, float]]:
    """`query_metrics` for many (ranking, query) pairs in one call of the official per-query code
    (a call has a fixed cost whatever its size, so the app makes one per view, not one per column).
    `extra`: more per-query columns of that code to return (e.g. CIRR's target_rank, subset_rank)."""
    fam = metric_family(family) if isinstance(family, str) else family
    if not pairs:
        return []
    wanted = list(dict.fromkeys([*fam.shown, *extra]))
    keyed = [dataclasses.replace(q, query_id=f"{i}\x1f{q.query_id}") for i, (_, q) in enumerate(pairs)]
    run = {k.query_id: list(r) for k, (r, _) in zip(keyed, pairs)}
    df = fam.metrics_module().per_query(run, keyed, **dict(fam.shown_kwargs)).set_index("query_id")
    out = []
    for k in keyed:
        if k.query_id not in df.index or not bool(df.at[k.query_id, "scored"]):
            out.append({m: float("nan") for m in wanted})
        else:
            out.append({m: float(df.at[k.query_id, m]) for m in wanted})
    return out
