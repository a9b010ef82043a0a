"""The query a first visit opens: one that shows what the explorer is for. From the per-query rows the
failure sorts read (an eval run on disk, or results files), the query on which the runs disagree most
on the family's primary metric while one of them scores it; never a computation of its own (a first
page must not wait for a run over the benchmark). Before such rows exist (a first start whose
background run is computing), the eval outputs the repository ships for this benchmark content
(`index.prebuilt_run`) are read for the choice only, even when written by other code: the page's
numbers are always computed live. First of all, the choice those shipped outputs record for the
served columns (`index.first_query`, made when they were written): a cold start's first page then
waits neither for the failure rows nor for the shipped rows' decompression. Without any of these,
the benchmark's first query.
"""

from __future__ import annotations

import io
import logging
import lzma
import weakref

import pandas as pd

from cir_demo.index.first_query import telling_query

__all__ = ["first_query", "shipped_choice", "shipped_rows", "telling_query"]

log = logging.getLogger("cir_demo.explorer")

_chosen: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # service -> (what it was decided on, query)


def first_query(service, pending=None) -> str | None:
    """The query a link without one opens: the one the shipped outputs chose for the served columns
    (`shipped_choice`), else `telling_query` over the service's per-query rows when they are on disk or
    in memory, else over the shipped rows; on a benchmark where no query tells, its first query.
    `pending`: the background run's status; the choice is made again when its state changes."""
    state = getattr(pending, "state", None)
    known = _chosen.get(service)
    if known is not None and known[0] == state:  # every page load asks: the order is not listed again
        return known[1]
    order = service.table["query_id"].tolist()
    if not order:
        return None
    ready = pending is not None and (state == "done" or "worst" in getattr(pending, "ready_sorts", ()))
    chosen = shipped_choice(service, order) or computed_choice(service, ready, order)
    _chosen[service] = (state, chosen or order[0])
    return chosen or order[0]


def computed_choice(service, ready: bool, order: list[str]) -> str | None:
    """`telling_query` over the failure rows (a run ready or stored), else over the shipped rows."""
    try:
        if ready or service.stored_sorts():
            rows = service.failure_stats()
        else:
            rows = shipped_rows(service.benchmark, service.fingerprint, service.family.primary)
        return None if rows is None else telling_query(rows, service.family.primary, service.retriever_names, order)
    except Exception:  # noqa: BLE001 - no rows to choose from: the benchmark's first query
        log.debug("no per-query rows to choose the first query from", exc_info=True)
        return None


def shipped_choice(service, order) -> str | None:
    """The first query the shipped eval outputs of this benchmark content chose for the served columns
    when they were written (None: they hold no such choice, or none are shipped)."""
    from cir_demo.index.first_query import shipped_first_query
    from cir_demo.index.manifest import MANIFEST_FILE
    from cir_demo.index.prebuilt_run import read_shipped_manifest, shipped_dir

    try:
        directory = shipped_dir(service.benchmark)
        if not (directory / MANIFEST_FILE).is_file():
            return None
        manifest = read_shipped_manifest(directory)
        return shipped_first_query(
            manifest, service.fingerprint, service.family.primary, service.retriever_names, order
        )
    except Exception:  # noqa: BLE001 - an unreadable manifest: the choice is computed
        log.debug("no first query recorded in the shipped outputs", exc_info=True)
        return None


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
