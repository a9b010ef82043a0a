"""The per-query rows the explorer's failure sorts read (`failures.sort_rows`), for the app's columns:
each column's run from the app's `RunStore` (a stored eval run under the run's key, else the cache,
else produced there), so they are the rows per_query.csv holds for the same run."""

from __future__ import annotations

import threading
from typing import Callable, Sequence

import pandas as pd

from cir_demo.benchmarks.registry import RERANK_SUFFIX
from cir_demo.explorer.config import ServiceError
from cir_demo.explorer.failures import diff_metrics, sort_columns


def rows_read(family, views) -> list[str]:
    """The per_query.csv columns the failure sorts of `family` read (A vs B: any metric `diff_metrics`
    names), in the order the rows keep them."""
    return [
        "run",
        "query_id",
        "group_id",
        *dict.fromkeys(
            [
                *sort_columns(family, diff_metrics(family)),
                *views.measures,
                *([views.finer] if views.finer else []),
            ]
        ),
    ]


class FailureRows:
    """The failure sorts' rows of columns `names` (and, reranked, `<name>+rerank`) from `store`,
    keeping `columns` of them; read once, until `forget`."""

    max_rerank_scores = 30_000  # candidate scores the app may compute for the reranker sorts

    def __init__(self, store, names: Sequence[str], columns: Sequence[str]):
        self.store = store
        self.names = list(names)
        self.columns = list(columns)
        self.frame: pd.DataFrame | None = None
        self.source = ""
        self._lock = threading.RLock()

    def get(self, progress: Callable[[str], None] | None = None, need_rerank: bool = False) -> pd.DataFrame:
        """run, query_id, group_id and the sort columns of every column; reranked rows when stored, or
        when `need_rerank` and the work is small (`max_rerank_scores`)."""
        with self._lock:
            if self.frame is not None and (
                not need_rerank or not self.store.reranker or self.frame["run"].str.endswith(RERANK_SUFFIX).any()
            ):
                return self.frame
            self.frame = self._gather(progress, need_rerank)
            return self.frame

    def forget(self) -> None:
        """Drop the rows read (a new eval run was published; the next sort reads it)."""
        with self._lock:
            self.frame = None
            self.store.forget()

    def stored(self) -> tuple[bool, bool]:
        """(every first stage is stored or cached, every reranked run is): read, never computed."""
        hashes = self.store.spec_hashes(self.names)
        if not hashes:
            return False, False
        first = all(self.store.stored_rows(n) is not None for n in hashes)
        reranked = bool(self.store.reranker_hash()) and all(
            self.store.stored_rows(f"{n}{RERANK_SUFFIX}") is not None for n in hashes
        )
        return first, reranked

    def _gather(self, progress, need_rerank: bool) -> pd.DataFrame:
        if not self.names:
            raise ServiceError("no retrievers are loaded, so there are no results to sort by")
        names = list(self.store.spec_hashes(self.names))
        parts, sources = [], []
        for name in names:
            rows, source = self.store.rows_and_source(name, progress)
            parts.append(rows)
            sources.append(source if source != "computed here" else f"{name} computed here")
        reranked = [f"{n}{RERANK_SUFFIX}" for n in names] if self.store.reranker_hash() else []
        stored = [r for r in reranked if self.store.stored_rows(r) is not None]
        if need_rerank and reranked and len(stored) < len(reranked):
            cost = len(self.store.benchmark.queries) * len(names) * self.store.top_n
            if cost > self.max_rerank_scores:
                raise ServiceError(
                    f"sorting by the reranker's effect needs reranked results for all "
                    f"{len(self.store.benchmark.queries):,} queries ({cost:,} candidate scores); the app computes "
                    f"them in the background when it starts (an eval run with {self.store.reranker}), and offers "
                    "this sort once they exist"
                )
            stored = reranked
            sources.append("reranker effect computed here")
        for run in stored:
            rows, source = self.store.rows_and_source(run, progress)
            parts.append(rows)
            if source not in sources and source != "computed here":
                sources.append(source)
        self.source = "; ".join(dict.fromkeys(sources))
        frame = pd.concat(parts, ignore_index=True)
        return frame[[c for c in self.columns if c in frame.columns]]
