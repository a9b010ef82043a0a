"""`FailureLists`: the app's query list, in the benchmark's order or a failure sort's, with the sort menu
(each sort with whether it can return something here) and the per-query rows the sorts read, each
column's run read from the store."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import pandas as pd

from cir_demo.explorer.config import MAX_QUERY_ROWS, NO_VALUE, ServiceError
from cir_demo.explorer.failures import (
    SortChoice,
    SortContext,
    compare_metrics as family_compare_metrics,
    sort_choices,
    sort_label,
    sort_rows,
    with_compared,
    with_empty_marked,
)
from cir_demo.explorer.per_query_rows import FailureRows, rows_read
from cir_demo.explorer.queries import filter_queries
from cir_demo.explorer.views import QueryList
from cir_demo.utils.lru import LRU


class FailureLists:
    """The query lists of one benchmark's `table` over the columns `retriever_names` (whose `modality`
    dict may grow as visitors upload files) and, when `reranked`, their reranked runs from `store`."""

    def __init__(
        self,
        family,
        views,
        table: pd.DataFrame,
        store,
        retriever_names: Sequence[str],
        modality: Mapping[str, str],
        reranked: bool,
    ):
        self.family = family
        self.table = table
        self.retriever_names = list(retriever_names)
        self.modality = modality
        self.reranked = reranked
        self.rows = FailureRows(store, self.retriever_names, rows_read(family, views))
        self._sorts: list[SortChoice] | None = None
        self._checked_sorts: list[SortChoice] = []  # `_sorts` with those keeping no query marked (sorts())
        self._sorts_checked_on: pd.DataFrame | None = None  # the per-query rows they were checked on
        self._sort_memo: dict = {}  # sort name -> its (keep, key, why) over the current rows
        self._query_lists = LRU(256)  # (search text, filters, limit) -> QueryList in benchmark order

    def find(
        self,
        text: str = "",
        filters: Mapping[str, str | None] | None = None,
        sort: str = "order",
        limit: int = MAX_QUERY_ROWS,
        progress: Callable[[str], None] | None = None,
    ) -> QueryList:
        """The queries matching `text` and `filters`, in the order of sort `sort` (a `sorts()` name)."""
        # the benchmark order of a search and filters is fixed: remembered (the failure sorts
        # depend on statistics that may still be loading)
        key = (text, tuple(sorted((filters or {}).items())), limit) if sort == "order" else None
        if key is not None and (found := self._query_lists.get(key)) is not None:
            return found
        rows = filter_queries(self.table, text, filters)
        note = ""
        if sort != "order":
            per_query = self.rows.get(progress, need_rerank=sort.startswith("rerank"))
            self.sorts()  # the menu leaves out a sort keeping no query; one picked before it knew lists nothing
            rows, note = sort_rows(rows, per_query, sort, self.context(), self._sorts, self._memo_for(per_query))
        total = len(rows)
        shown = rows.head(limit)
        kind = shown["intent_category"].where(shown["intent_category"] != NO_VALUE, "")
        display = pd.DataFrame(
            {
                "query": shown["query_id"].to_numpy(),
                "instruction": shown["instruction"].to_numpy(),
                "type": kind.to_numpy(),
                "refs": shown["n_refs"].to_numpy(),
                "why": shown["why"].to_numpy() if "why" in shown else "",
            }
        )
        found = QueryList(display, total, note)
        if key is not None:
            self._query_lists.put(key, found)
        return found

    def stored_sorts(self) -> set[str]:
        """The failure sorts whose data is on disk already (eval runs, or the store's cache for the first
        stage): they answer at once while the background run computes the rest."""
        first, reranked = self.rows.stored()
        if not first:
            return set()
        out = {c.name for c in self.sorts() if c.available and c.name not in ("order", "rerank_helped", "rerank_hurt")}
        return out | ({"rerank_helped", "rerank_hurt"} if reranked else set())

    def context(self) -> SortContext:
        return SortContext(self.family, self.table, self.retriever_names, self.modality, self.reranked)

    def sorts(self) -> list[SortChoice]:
        """Every failure sort of the benchmark's family, `diff:A,B` for each ordered pair of columns, each
        with whether it can return something here and why not (cir_demo/benchmarks/failure_views.py)."""
        if self._sorts is None:  # the benchmark, columns and reranker of an app never change
            self._sorts = sort_choices(self.context())
        if self.rows.frame is None and self._all_ranking_only():
            self.rows.get()  # results files only: their per-query rows are cheap, the menu can be exact
        rows = self.rows.frame
        if rows is not None and self._sorts_checked_on is not rows:  # a sort keeping no query is not offered
            self._checked_sorts = with_empty_marked(self._sorts, rows, self.context(), self._memo_for(rows))
            self._sorts_checked_on = rows
        return list(self._checked_sorts if self._sorts_checked_on is not None else self._sorts)

    def compare_metrics(self) -> list[str]:
        """What the app's A-vs-B sorts compare by (its "compare by" menu): the primary metric first, then the
        family's headline ones (`diff:A,B:Recall@5`, as `failures --sort diff:A,B --metric Recall@5`)."""
        return family_compare_metrics(self.family)

    def label(self, name: str) -> str:
        """What the menu calls sort `name` (an A-vs-B one names the metric it compares)."""
        try:
            return sort_label(name, self.context())
        except (KeyError, ServiceError):  # not a sort of this family: its name says what was asked
            return name

    def offered(self) -> list[str]:
        """The name of every sort offered here, each A-vs-B one under every metric of `compare_metrics`."""
        out = []
        for c in self.sorts():
            if c.available:
                out += [with_compared(c.name, m, self.family.primary) for m in self.compare_metrics()]
        return list(dict.fromkeys(out))

    def _memo_for(self, per_query: pd.DataFrame) -> dict:
        """The sorts' results over these per-query rows (new rows: earlier results are void)."""
        if self._sort_memo.get("__rows__") is not per_query:
            self._sort_memo = {"__rows__": per_query}
        return self._sort_memo

    def _all_ranking_only(self) -> bool:
        """Every column reads a results file (its family runs no model), asked of the configs: no model loads."""
        from cir_demo.retrievers.registry import family_module, get_config

        try:
            return bool(self.retriever_names) and all(
                not getattr(family_module(get_config(n)["family"]), "RUNS_MODEL", True) for n in self.retriever_names
            )
        except Exception:  # noqa: BLE001 - an unregistered column (an upload): the menu is checked when rows exist
            return False
