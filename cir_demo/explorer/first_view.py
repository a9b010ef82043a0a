"""The query a first visit opens: one that shows what the explorer is for. From the per-query rows the
failure sorts read (an eval run on disk, or results files), the query on which the runs disagree most
on the family's primary metric while one of them scores it; never a computation of its own (a first
page must not wait for a run over the benchmark), so without such rows it is the benchmark's first.
"""
from __future__ import annotations

import weakref
from typing import Sequence

import pandas as pd

_chosen: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # service -> (what it was decided on, query)


def telling_query(per_query: pd.DataFrame, primary: str, runs: Sequence[str], order: Sequence[str]) -> str | None:
    """Of the queries in `order` (the benchmark order), the one whose `runs` (first stage) differ most on
    `primary` while the best of them scores above 0 (a judged image ranked where the metric counts it);
    equal spreads: the earliest. With one run: its first query that scores. None: no such query."""
    rows = per_query[per_query["run"].isin(list(runs))]
    if rows.empty or primary not in rows:
        return None
    wide = rows.pivot_table(index="query_id", columns="run", values=primary, aggfunc="first")
    best, spread = wide.max(axis=1), wide.max(axis=1) - wide.min(axis=1)
    keep = (best > 0) & ((spread > 0) if wide.shape[1] > 1 else True)
    position = {q: i for i, q in enumerate(order)}
    candidates = [(-float(spread[q]), position[q], q) for q in wide.index[keep.to_numpy()] if q in position]
    return min(candidates)[2] if candidates else None


def first_query(service, pending=None) -> str | None:
    """The query a link without one opens (`telling_query` over the service's per-query rows when they
    are on disk or in memory; else, and on a benchmark where no query tells, its first query).
    `pending`: the background run's status; the choice is made again when its state changes."""
    order = list(service.table["query_id"])
    if not order:
        return None
    state = getattr(pending, "state", None)
    known = _chosen.get(service)
    if known is not None and known[0] == state:
        return known[1]
    ready = pending is not None and (state == "done" or "worst" in getattr(pending, "ready_sorts", ()))
    chosen = None
    try:
        if ready or service.stored_sorts():
            chosen = telling_query(service.failure_stats(), service.family.primary, service.retriever_names, order)
    except Exception:  # noqa: BLE001 - no rows to choose from: the benchmark's first query
        chosen = None
    _chosen[service] = (state, chosen or order[0])
    return chosen or order[0]
