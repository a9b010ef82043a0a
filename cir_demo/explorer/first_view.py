"""The query a first visit opens: one that shows what the explorer is for. From the per-query rows the
failure sorts read (an eval run on disk, or results files), the query on which the runs disagree most
on the family's primary metric while one of them scores it; never a computation of its own (a first
page must not wait for a run over the benchmark). Before such rows exist (a first start whose
background run is computing), the eval outputs the repository ships for this benchmark content
(`index.prebuilt_run`) are read for the choice only, even when written by other code: the page's
numbers are always computed live. Without either, the benchmark's first query.
"""

from __future__ import annotations

import io
import logging
import lzma
import weakref
from typing import Sequence

import pandas as pd

log = logging.getLogger("cir_demo.explorer")

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
            rows = service.failure_stats()
        else:
            rows = shipped_rows(service.benchmark, service.fingerprint, service.family.primary)
        if rows is not None:
            chosen = telling_query(rows, service.family.primary, service.retriever_names, order)
    except Exception:  # noqa: BLE001 - no rows to choose from: the benchmark's first query
        log.debug("no per-query rows to choose the first query from", exc_info=True)
        chosen = None
    _chosen[service] = (state, chosen or order[0])
    return chosen or order[0]


def shipped_rows(benchmark, fingerprint: str, primary: str) -> pd.DataFrame | None:
    """run, query_id and `primary` of the shipped eval outputs of this benchmark content (None: none)."""
    from cir_demo.index.prebuilt_run import read_shipped_manifest, shipped_dir
    from cir_demo.index.manifest import MANIFEST_FILE

    directory = shipped_dir(benchmark)
    if not (directory / MANIFEST_FILE).is_file():
        return None
    manifest = read_shipped_manifest(directory)
    record = manifest["files"].get("per_query.csv")
    if manifest["key"].get("benchmark_fingerprint") != fingerprint or record is None:
        return None
    (stored,) = record["stored"]
    data = (directory / stored).read_bytes()
    data = lzma.decompress(data) if stored != "per_query.csv" else data
    return pd.read_csv(io.BytesIO(data), usecols=["run", "query_id", primary], dtype={"query_id": str, "run": str})
