"""`ExplorerService`: answers the app's requests over one benchmark, its retrievers and an optional
reranker. It holds the run store and one collaborator per kind of request, each handed what it reads:
`columns` (served_columns.py: the retrievers and visitors' uploaded results files), `lists`
(failure_lists.py: the query list and its failure sorts, rows read from the store), `search`
(column_search.py: a query's columns as the page draws them, through `RetrievalEngine`) and `reports`
(run_reports.py: the eval runs and the results files scored as `--eval` scores them)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Sequence

import pandas as pd

from cir_demo.benchmarks.families import metric_family
from cir_demo.benchmarks.registry import declared_defaults
from cir_demo.benchmarks.schema import Benchmark, Query
from cir_demo.explorer.column_search import ColumnSearch
from cir_demo.explorer.config import (
    MAX_QUERY_ROWS,
    REFERENCE_PX,
    TILE_PX,
    ServiceConfig,
    ServiceError,
    filter_fields,
)
from cir_demo.explorer.failure_lists import FailureLists
from cir_demo.explorer.failures import SortChoice
from cir_demo.explorer.images import ThumbnailStore, thumbnail_db_path
from cir_demo.explorer.queries import filter_choices, filter_value, query_table
from cir_demo.explorer.run_reports import RunReports
from cir_demo.explorer.served_columns import ServedColumns
from cir_demo.explorer.uploads import ValidatedImage
from cir_demo.explorer.views import Comparison, Paraphrase, QueryList, QueryView, Report, RunSummary
from cir_demo.store.store import RunStore


class ExplorerService:
    """Answers the app's requests over one benchmark, its retrievers and an optional reranker."""

    def __init__(
        self,
        benchmark: Benchmark,
        engine,
        retriever_names: Sequence[str],
        reranker: str | None = None,
        reranker_note: str = "",
        config: ServiceConfig | None = None,
        thumbnails_on_disk: bool = True,
    ):
        self.benchmark = benchmark
        self.engine = engine
        self.config = config or ServiceConfig(benchmark=benchmark.name)
        self.retriever_names = list(retriever_names)
        self.reranker_name = reranker
        self.reranker_note = reranker_note
        self.family = metric_family(benchmark.metric_family)  # per-column metrics: its `shown` columns
        self.views = self.family.views()  # its sorts, tile scope and wording
        self.filter_fields = filter_fields(self.views)  # the common filters, then the family's
        self.table = query_table(benchmark, self.filter_fields)
        self._filter_choices = filter_choices(self.table, self.filter_fields)
        # what every page load checks a link against, read off the table once (it never changes)
        self.query_ids = frozenset(self.table["query_id"])
        sizes = self.table.groupby("group_id")["query_id"].transform("count")
        self.group_sizes = dict(zip(self.table["query_id"].tolist(), sizes.tolist()))
        self.n_intents = len({q.group_id for q in benchmark.queries})  # the status line says it on every poll
        fp = engine.fingerprint
        self.tiles = ThumbnailStore(
            engine.open_image, thumbnail_db_path(fp, TILE_PX) if thumbnails_on_disk else None, TILE_PX
        )
        self.references = ThumbnailStore(
            engine.open_image,
            thumbnail_db_path(fp, REFERENCE_PX) if thumbnails_on_disk else None,
            REFERENCE_PX,
            quality=90,
        )
        # every run the app reads (columns' per-query rows, sorts, Report numbers) comes from here
        self.store = RunStore(
            benchmark,
            engine,
            reranker,
            self.config.reranker_kwargs,
            self.config.default_top_n,
            self.config.run_folders,
        )
        self.columns = ServedColumns(benchmark, engine, self.retriever_names)
        self.lists = FailureLists(
            self.family, self.views, self.table, self.store, self.retriever_names, self.columns.modality, bool(reranker)
        )
        self.search = ColumnSearch(
            benchmark,
            engine,
            self.columns,
            self.family,
            self.views,
            self.tiles,
            self.references,
            reranker,
            reranker_note,
            self.config.reranker_kwargs,
        )
        self.reports = RunReports(
            benchmark, engine.fingerprint, self.config.run_folders, self.family, self.store, self.columns
        )
        self.warnings: list[str] = []

    # ------------------------------------------------------------------ facts
    @property
    def upload_heading(self) -> str:
        """What uploading one's own images means on this benchmark, as its declaration says ("" for nothing)."""
        spec = declared_defaults(self.benchmark.name)
        return spec.upload_heading if spec else ""

    @property
    def upload_note(self) -> str:
        return self.search.upload_note

    @property
    def fingerprint(self) -> str:
        return self.engine.fingerprint

    @property
    def modality(self) -> dict[str, str]:
        """Each served column's modality (image, text, composed, file)."""
        return self.columns.modality

    @property
    def uploaded_runs(self) -> dict[str, str]:
        """Column name -> the uploaded results file's name, for every upload still served."""
        return self.columns.uploaded

    def summary(self) -> str:
        b = self.benchmark
        size = (b.info or {}).get("size")
        name = f"{b.name} ({size})" if size else b.name
        return (
            f"{name}: {len(b.queries):,} queries in {self.n_intents:,} intents, {len(b.corpus_ids):,} corpus images; "
            f"retrievers: {', '.join(self.retriever_names) or 'none'}; reranker: {self.reranker_name or 'off'}"
        )

    def filter_choices(self) -> dict[str, list[str]]:
        return dict(self._filter_choices)

    def check_retrievers(self, names: Sequence[str] | None) -> list[str]:
        return self.columns.check(names)

    def query(self, query_id: str) -> Query:
        try:
            return self.benchmark.query(query_id)
        except KeyError:
            raise ServiceError(f"benchmark {self.benchmark.name!r} has no query {query_id!r}") from None

    def query_view(self, query_id: str, thumbnails: bool = True) -> QueryView:
        """`thumbnails`: False leaves the reference thumbnails out (None): an API answer sends ids, not pictures."""
        q = self.query(query_id)
        paraphrases = []
        for i, p in enumerate(self.benchmark.paraphrases(query_id)):
            form = str(p.meta.get("paraphrase_form") or f"phrasing {i + 1}").replace("_", " ")
            paraphrases.append(Paraphrase(p.query_id, form, p.instruction))
        thumbs = self.references.get_many(list(q.reference_ids)) if thumbnails else {}
        meta = q.meta
        facts = [("query", q.query_id), ("intent", q.group_id)]
        for key, label in self.filter_fields.items():
            value = meta.get(key)
            if value is not None:
                facts.append((label, filter_value(key, value)))
        facts.append(("judgments", self.views.judgments_line(q)))
        return QueryView(q, paraphrases, [thumbs.get(r) for r in q.reference_ids], facts)

    # ------------------------------------------------------------------ the query list and its sorts
    def find_queries(
        self,
        text: str = "",
        filters: Mapping[str, str | None] | None = None,
        sort: str = "order",
        limit: int = MAX_QUERY_ROWS,
        progress: Callable[[str], None] | None = None,
    ) -> QueryList:
        return self.lists.find(text, filters, sort, limit, progress)

    def sorted_queries(
        self,
        sort: str,
        text: str = "",
        filters: Mapping[str, str | None] | None = None,
        limit: int = MAX_QUERY_ROWS,
        progress: Callable[[str], None] | None = None,
    ) -> QueryList:
        """The query list in the order of sort `sort` (a `sorts()` name, e.g. "worst" or "diff:A,B")."""
        return self.lists.find(text, filters, sort, limit, progress)

    def failure_stats(self, progress: Callable[[str], None] | None = None, need_rerank: bool = False) -> pd.DataFrame:
        """The per-query rows the failure sorts read (`failures.sort_rows`): run, query_id, group_id, the
        family's primary metric and its `FailureViews.measures`, for the app's retrievers, each run read
        from the store (`FailureRows.get`)."""
        return self.lists.rows.get(progress, need_rerank)

    def forget_failures(self) -> None:
        """Drop the rows read (a new eval run was published; the next sort reads it)."""
        self.lists.rows.forget()

    @property
    def failure_source(self) -> str:
        return self.lists.rows.source

    def stored_sorts(self) -> set[str]:
        return self.lists.stored_sorts()

    def sorts(self) -> list[SortChoice]:
        return self.lists.sorts()

    def compare_metrics(self) -> list[str]:
        return self.lists.compare_metrics()

    def sort_label(self, name: str) -> str:
        return self.lists.label(name)

    def offered_sorts(self) -> list[str]:
        return self.lists.offered()

    # ------------------------------------------------------------------ a query's columns
    def compare(
        self,
        query_id: str,
        retrievers: Sequence[str] | None = None,
        k: int = 10,
        rerank: bool = False,
        top_n: int = 20,
        instruction: str | None = None,
        thumbnails: bool = True,
    ) -> Comparison:
        return self.search.compare(self.query(query_id), retrievers, k, rerank, top_n, instruction, thumbnails)

    def search_uploads(
        self,
        images: Sequence[ValidatedImage],
        instruction: str,
        retrievers: Sequence[str] | None = None,
        k: int = 10,
        rerank: bool = False,
        top_n: int = 20,
        thumbnails: bool = True,
    ) -> Comparison:
        return self.search.search_uploads(images, instruction, retrievers, k, rerank, top_n, thumbnails)

    def paraphrase_table(
        self, query_id: str, retrievers: Sequence[str] | None = None, shown: bool = False
    ) -> pd.DataFrame:
        return self.search.paraphrase_table(self.query(query_id), retrievers, shown)

    def reranker_prompt(self, instruction: str, n_references: int) -> str:
        return self.search.reranker_prompt(instruction, n_references)

    # ------------------------------------------------------------------ report and results files
    def runs(self) -> list[RunSummary]:
        return self.reports.runs()

    def report(self, label: str | None = None, runs: list[RunSummary] | None = None) -> Report | None:
        return self.reports.report(label, runs)

    def scored_file_runs(self, n_boot: int = 1000, seed: int = 0, extra: Sequence[str] = ()):
        return self.reports.scored_file_runs(n_boot, seed, extra)

    def file_runs(self) -> list[str]:
        return self.columns.file_runs()

    def add_file_run(self, path: str | Path, name: str, owner: str = "") -> tuple[str, list[str]]:
        return self.columns.add_file_run(path, name, owner)

    def uploads_of(self, owner: str = "") -> list[str]:
        return self.columns.uploads_of(owner)
