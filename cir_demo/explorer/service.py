"""`ExplorerService`: answers the app's requests over one benchmark, its retrievers and an
optional reranker. Retrieval goes through `RetrievalEngine`."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import pandas as pd

from cir_demo.benchmarks.families import metric_family
from cir_demo.benchmarks.registry import declared_defaults
from cir_demo.benchmarks.schema import Benchmark, Query
from cir_demo.explorer.config import (
    MAX_COLUMNS,
    MAX_QUERY_ROWS,
    NO_VALUE,
    REFERENCE_PX,
    SEARCH_K,
    TILE_PX,
    ServiceConfig,
    ServiceError,
    filter_fields,
    retriever_modality,
)
from cir_demo.explorer.failures import (
    SortChoice,
    SortContext,
    compare_metrics as family_compare_metrics,
    sort_label,
    with_compared,
    sort_choices,
    sort_rows,
    with_empty_marked,
)
from cir_demo.explorer.per_query_rows import FailureRows, rows_read
from cir_demo.explorer.images import ThumbnailStore, encode_jpeg_data_uri, thumbnail_db_path
from cir_demo.explorer.queries import filter_choices, filter_queries, filter_value, query_table
from cir_demo.explorer.ranking_metrics import metrics_many
from cir_demo.explorer.runs import load_report, report_key
from cir_demo.store.folders import list_runs
from cir_demo.explorer.uploads import ValidatedImage
from cir_demo.explorer.views import (
    Column,
    Comparison,
    Paraphrase,
    QueryList,
    QueryView,
    Report,
    RunSummary,
    Tile,
    fill_metrics,
    protocol_scope,
    where_line,
)
from cir_demo.utils.lru import LRU

log = logging.getLogger(__name__)


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
        from cir_demo.retrievers.registry import get_config

        self.benchmark = benchmark
        self.engine = engine
        self.config = config or ServiceConfig(benchmark=benchmark.name)
        self.retriever_names = list(retriever_names)
        self.modality = {n: retriever_modality(get_config(n)) for n in self.retriever_names}
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
        from cir_demo.store.store import RunStore

        # every run the app reads (columns' per-query rows, sorts, Report numbers) comes from here
        self.store = RunStore(
            benchmark,
            engine,
            reranker,
            self.config.reranker_kwargs,
            self.config.default_top_n,
            self.config.run_folders,
        )
        self.failure_rows = FailureRows(self.store, self.retriever_names, rows_read(self.family, self.views))
        self._sorts: list[SortChoice] | None = None
        self._checked_sorts: list[SortChoice] = []  # `_sorts` with those keeping no query marked (sorts())
        self._sorts_checked_on: pd.DataFrame | None = None  # the per-query rows they were checked on
        self._sort_memo: dict = {}  # sort name -> its (keep, key, why) over the current failure_stats rows
        self._paraphrase_tables = LRU(256)  # (intent, retrievers) -> table
        self._metrics = LRU(4096)  # (query id, ranking) -> the column's metrics
        self._query_lists = LRU(256)  # (search text, filters, limit) -> QueryList in benchmark order
        self._reports = LRU(16)  # report_key(run) -> its Report
        self._scored_runs: dict[tuple, object] = {}  # (results-file columns, n_boot, seed) -> paired.RunsScored
        self._evaluations: dict[tuple, object] = {}  # (run, n_boot, seed) -> its RunEvaluation
        self._lock = threading.RLock()
        self.warnings: list[str] = []
        self.uploaded_runs: dict[str, str] = {}  # column name -> the uploaded file's name (add_file_run)
        self._upload_owners: dict[str, list[str]] = {}  # owner -> its columns, oldest first; last active owner last

    # ------------------------------------------------------------------ facts
    @property
    def upload_heading(self) -> str:
        """What uploading one's own images means on this benchmark, as its declaration says ("" for nothing)."""
        spec = declared_defaults(self.benchmark.name)
        return spec.upload_heading if spec else ""

    @property
    def upload_note(self) -> str:
        spec = declared_defaults(self.benchmark.name)
        return spec.upload_note if spec else ""

    @property
    def fingerprint(self) -> str:
        return self.engine.fingerprint

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
        """The requested columns (default: the first four), validated; every caller (links,
        checkboxes, uploads) goes through here, so a name asked for twice is one column."""
        names = list(dict.fromkeys(self.retriever_names[:MAX_COLUMNS] if names is None else names))
        unknown = [n for n in names if n not in self.retriever_names and n not in self.uploaded_runs]
        if unknown:
            raise ServiceError(
                f"unknown retriever(s) {', '.join(unknown)}; this app serves: "
                f"{', '.join(self.retriever_names) or 'none'}"
            )
        if len(names) > MAX_COLUMNS:
            raise ServiceError(f"at most {MAX_COLUMNS} columns side by side; {len(names)} retrievers selected")
        return names

    def query(self, query_id: str) -> Query:
        try:
            return self.benchmark.query(query_id)
        except KeyError:
            raise ServiceError(f"benchmark {self.benchmark.name!r} has no query {query_id!r}") from None

    # ------------------------------------------------------------------ finding queries
    def find_queries(
        self,
        text: str = "",
        filters: Mapping[str, str | None] | None = None,
        sort: str = "order",
        limit: int = MAX_QUERY_ROWS,
        progress: Callable[[str], None] | None = None,
    ) -> QueryList:
        # the benchmark order of a search and filters is fixed: remembered (the failure sorts
        # depend on statistics that may still be loading)
        key = (text, tuple(sorted((filters or {}).items())), limit) if sort == "order" else None
        if key is not None and (found := self._query_lists.get(key)) is not None:
            return found
        rows = filter_queries(self.table, text, filters)
        note = ""
        if sort != "order":
            per_query = self.failure_stats(progress, need_rerank=sort.startswith("rerank"))
            self.sorts()  # the menu leaves out a sort keeping no query; one picked before it knew lists nothing
            rows, note = sort_rows(rows, per_query, sort, self.sort_context(), self._sorts, self._memo_for(per_query))
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

    # ------------------------------------------------------------------ failure rows (from the store)
    def failure_stats(self, progress: Callable[[str], None] | None = None, need_rerank: bool = False) -> pd.DataFrame:
        """The per-query rows the failure sorts read (`failures.sort_rows`): run, query_id, group_id, the
        family's primary metric and its `FailureViews.measures`, for the app's retrievers, each run read
        from the store (`FailureRows.get`)."""
        return self.failure_rows.get(progress, need_rerank)

    def forget_failures(self) -> None:
        """Drop the rows read (a new eval run was published; the next sort reads it)."""
        self.failure_rows.forget()

    @property
    def failure_source(self) -> str:
        return self.failure_rows.source

    @property
    def max_rerank_scores(self) -> int:
        return self.failure_rows.max_rerank_scores

    def stored_sorts(self) -> set[str]:
        """The failure sorts whose data is on disk already (eval runs, or the store's cache for the first
        stage): they answer at once while the background run computes the rest."""
        first, reranked = self.failure_rows.stored()
        if not first:
            return set()
        out = {c.name for c in self.sorts() if c.available and c.name not in ("order", "rerank_helped", "rerank_hurt")}
        return out | ({"rerank_helped", "rerank_hurt"} if reranked else set())

    def sort_context(self) -> SortContext:
        return SortContext(self.family, self.table, self.retriever_names, self.modality, bool(self.reranker_name))

    def sorts(self) -> list[SortChoice]:
        """Every failure sort of the benchmark's family, `diff:A,B` for each ordered pair of columns, each
        with whether it can return something here and why not (cir_demo/benchmarks/failure_views.py)."""
        if self._sorts is None:  # the benchmark, columns and reranker of a service never change
            self._sorts = sort_choices(self.sort_context())
        if self.failure_rows.frame is None and self._all_ranking_only():
            self.failure_stats()  # results files only: their per-query rows are cheap, the menu can be exact
        rows = self.failure_rows.frame
        if rows is not None and self._sorts_checked_on is not rows:  # a sort keeping no query is not offered
            self._checked_sorts = with_empty_marked(self._sorts, rows, self.sort_context(), self._memo_for(rows))
            self._sorts_checked_on = rows
        return list(self._checked_sorts if self._sorts_checked_on is not None else self._sorts)

    def compare_metrics(self) -> list[str]:
        """What the app's A-vs-B sorts compare by (its "compare by" menu): the primary metric first, then the
        family's headline ones (`diff:A,B:Recall@5`, as `failures --sort diff:A,B --metric Recall@5`)."""
        return family_compare_metrics(self.family)

    def sort_label(self, name: str) -> str:
        """What the menu calls sort `name` (an A-vs-B one names the metric it compares)."""
        try:
            return sort_label(name, self.sort_context())
        except (KeyError, ServiceError):  # not a sort of this family: its name says what was asked
            return name

    def offered_sorts(self) -> list[str]:
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

    def sorted_queries(
        self,
        sort: str,
        text: str = "",
        filters: Mapping[str, str | None] | None = None,
        limit: int = MAX_QUERY_ROWS,
        progress: Callable[[str], None] | None = None,
    ) -> QueryList:
        """The query list in the order of sort `sort` (a `sorts()` name, e.g. "worst" or "diff:A,B")."""
        return self.find_queries(text, filters, sort, limit, progress)

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

    # ------------------------------------------------------------------ retrieval
    def _search_columns(
        self, cq, names: Sequence[str], k: int, rerank: bool, top_n: int, query: Query | None = None
    ) -> dict:
        """Each column's first-stage ranking, searched once: {name: (Ranking or the exception, seconds)}.
        A benchmark `query` is asked as `--eval` asks it (`engine.benchmark_query`: the retriever's
        query template applied to `cq`'s text); an upload (`query` None) as `cq` is."""
        out = {}
        for name in names:
            t0 = time.perf_counter()
            try:
                retriever = self.engine.retriever(name)
                if cq.query_id is not None and hasattr(retriever, "has") and not retriever.has(cq.query_id):
                    raise ServiceError(
                        f"{name} has no ranking for this query (its results file leaves it out, "
                        "and --eval leaves it out of the means)"
                    )
                asked = cq if query is None else self.engine.benchmark_query(name, query, cq.text)
                depth = max(self.engine.eval_depth(name), k, top_n if rerank else 0)  # the ranking --eval scores
                got = self.engine.search(name, [asked], k=depth)[0]
            except Exception as exc:  # reported in that column
                got = exc
            out[name] = (got, time.perf_counter() - t0)
        return out

    def _column(
        self, name: str, searched, cq, query: Query | None, k: int, rerank: bool, top_n: int, thumbnails: bool = True
    ) -> Column:
        """`thumbnails`: False leaves the tiles' thumbnails out (None); on the procedural world a thumbnail not
        rendered before costs a render, most of an uncached view's CPU, and an API answer sends ids only."""
        t0 = time.perf_counter()
        ranking, search_s = searched
        col = Column(name, self.modality.get(name, "composed"))
        try:
            if isinstance(ranking, BaseException):
                raise ranking
            ids, scores = list(ranking.ids), list(ranking.scores)
            first_rank = None
            p_yes: dict[str, tuple[float | None, str | None, bool, float | None]] = {}
            if rerank:
                items = self.engine.rerank(
                    self.reranker_name, cq, ranking, top_n=top_n, reranker_kw=dict(self.config.reranker_kwargs)
                )
                first_rank = {it.candidate_id: it.first_stage_rank + 1 for it in items}
                p_yes = {it.candidate_id: (it.p_yes, it.flag, it.reranked, it.p_near) for it in items}
                col.first_stage_ranking = ids
                ids = [it.candidate_id for it in items]
                scores = [it.first_stage_score for it in items]
                flagged = sum(1 for it in items if it.flag)
                if flagged:
                    col.note = f"{flagged} candidate(s) could not be scored and kept their first-stage place"
            col.ranking = ids
            pos, neg = (set(query.positives), set(query.negatives)) if query is not None else (set(), set())
            shown, marks, scope_note = protocol_scope(self.views.scope, query, ids)
            if scope_note:
                col.note = f"{col.note}; {scope_note}" if col.note else scope_note
            ids, scores = [ids[i] for i in shown], [scores[i] for i in shown]
            thumbs = self.tiles.get_many(ids[:k]) if thumbnails else {}
            for r, (image_id, score) in enumerate(zip(ids[:k], scores[:k]), 1):
                judged = "positive" if image_id in pos else "negative" if image_id in neg else None
                py, flag, was_reranked, p_near = p_yes.get(image_id, (None, None, False, None))
                col.tiles.append(
                    Tile(
                        image_id,
                        r,
                        score,
                        judged,
                        thumbs.get(image_id),
                        first_rank.get(image_id) if first_rank else None,
                        py,
                        flag,
                        was_reranked,
                        p_near,
                        marks.get(image_id, ()),
                    )
                )
        except ServiceError as exc:
            col.error = str(exc)
        except Exception as exc:  # one failing retriever must not blank the other columns
            log.error("retriever %s failed", name, exc_info=exc)
            col.error = f"{type(exc).__name__}: {exc}"
        col.seconds = search_s + time.perf_counter() - t0
        return col

    def _prescore(self, cq, searched: Mapping, top_n: int) -> None:
        """Score the union of the columns' top-n blocks in one reranker call (`engine.prescore`): each
        column's rerank then reads the score cache, so there is one pass over the reference images
        and no candidate is scored twice when retrievers agree. A failure here is left to the columns."""
        union = [
            i for ranking, _ in searched.values() if not isinstance(ranking, BaseException) for i in ranking.ids[:top_n]
        ]
        try:
            self.engine.prescore(self.reranker_name, cq, union, reranker_kw=dict(self.config.reranker_kwargs))
        except Exception:
            log.exception("scoring the union of the top-%d blocks failed", top_n)

    def _check_rerank(self, rerank: bool, top_n: int) -> None:
        if rerank and not self.reranker_name:
            raise ServiceError(self.reranker_note or "no reranker is configured")
        if rerank and (isinstance(top_n, bool) or not isinstance(top_n, int) or not 1 <= top_n <= 100):
            raise ServiceError(f"top n must be an integer from 1 to 100, got {top_n!r}")

    @staticmethod
    def _check_k(k: int) -> int:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= SEARCH_K:
            raise ServiceError(f"results per column must be an integer from 1 to {SEARCH_K}, got {k!r}")
        return k

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
        """Each retriever's top k for a benchmark query (optionally with another instruction),
        with per-column AP@10, precision@10 and NegRecall@10 against the intent's judgments.
        `thumbnails`: False leaves every thumbnail out (None), for answers that send image ids only."""
        q = self.query(query_id)
        names = self.check_retrievers(retrievers)
        k = self._check_k(k)
        self._check_rerank(rerank, top_n)
        if instruction is not None and not instruction.strip():
            raise ServiceError("the instruction is empty")
        cq = self._composed(q, names, instruction, rerank)
        searched = self._search_columns(cq, names, k, rerank, top_n, q)
        if rerank and len(names) > 1:
            self._prescore(cq, searched, top_n)
        columns = [self._column(n, searched[n], cq, q, k, rerank, top_n, thumbnails) for n in names]
        fill_metrics(columns, q, self.family, self._metrics)
        for col in columns:
            col.where = where_line(col, k, q, self.views)
        refs = self.references.get_many(list(q.reference_ids)) if thumbnails else {}
        labels = [
            f"Reference image {i + 1} ({r})" if len(q.reference_ids) > 1 else f"Reference image ({r})"
            for i, r in enumerate(q.reference_ids)
        ]
        return Comparison(
            cq.text,
            [refs.get(r) for r in q.reference_ids],
            labels,
            columns,
            k,
            True,
            q.query_id,
            self.reranker_name if rerank else None,
            top_n if rerank else None,
            len(q.positives),
            len(q.negatives),
            ranking=self._ranking_rule() if rerank else None,
            legend=dict(self.views.legend),
            words=(self.views.positive_word, self.views.negative_word),
        )

    def _depth(self, name: str, k: int) -> int:
        """How deep to rank: a results file's whole ranking (scored as --eval scores it: a metric after
        the protocol's deletions, e.g. CIRR's Recall@50, may need more than the top 50), else `k`."""
        rankings = getattr(self.engine.retriever(name), "rankings", None)
        return max(k, max(map(len, rankings.values()), default=0)) if rankings is not None else k

    def _composed(self, q: Query, names: Sequence[str], instruction: str | None = None, rerank: bool = False):
        """The query the columns are given: ids and text only when every column is a results file and
        nothing is reranked (no image is opened: the benchmark's images may be absent)."""
        from cir_demo.engine import QueryIds
        from cir_demo.retrievers.base import is_ranking_only

        if not rerank and all(is_ranking_only(self.engine.retriever(n)) for n in names):
            return QueryIds(q.query_id, q.instruction if instruction is None else instruction, tuple(q.reference_ids))
        return self.engine.composed(q, instruction)

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
        """Each retriever's top k in the loaded corpus for uploaded reference image(s) + an instruction;
        `thumbnails`: as `compare` takes it."""
        from cir_demo.retrievers.base import ComposedQuery

        if not 1 <= len(images) <= 2:
            raise ServiceError(f"upload one or two reference images (got {len(images)})")
        if not instruction or not instruction.strip():
            raise ServiceError("type an instruction (what should change in the reference image)")
        if len(images) == 1 and ("<img2>" in instruction):
            raise ServiceError("the instruction mentions <img2> but only one image was uploaded")
        names = self.check_retrievers(retrievers)
        k = self._check_k(k)
        self._check_rerank(rerank, top_n)
        cq = ComposedQuery(
            tuple(v.image for v in images), instruction.strip(), None, tuple(v.content_id for v in images)
        )
        searched = self._search_columns(cq, names, k, rerank, top_n)
        if rerank and len(names) > 1:
            self._prescore(cq, searched, top_n)
        columns = [self._column(n, searched[n], cq, None, k, rerank, top_n, thumbnails) for n in names]
        notes = [f"{v.name}: {n}" for v in images for n in v.notes]
        if self.upload_note:
            notes.insert(0, self.upload_note)
        labels = [
            f"Reference image {i + 1} ({v.name})" if len(images) > 1 else f"Reference image ({v.name})"
            for i, v in enumerate(images)
        ]
        return Comparison(
            cq.text,
            [encode_jpeg_data_uri(v.image, REFERENCE_PX, 90) if thumbnails else None for v in images],
            labels,
            columns,
            k,
            False,
            None,
            self.reranker_name if rerank else None,
            top_n if rerank else None,
            notes=notes,
            ranking=self._ranking_rule() if rerank else None,
        )

    def _ranking_rule(self) -> str:
        """How the served reranker orders its top n (its spec's "ranking"; P(yes) when it says none)."""
        reranker = self.engine.reranker(self.reranker_name, **dict(self.config.reranker_kwargs))
        return str(reranker.spec.get("ranking") or "P(yes)")

    def paraphrase_table(
        self, query_id: str, retrievers: Sequence[str] | None = None, shown: bool = False
    ) -> pd.DataFrame:
        """The family's primary metric (AP@10 on PinPoint and the world) of every paraphrase of the
        query's intent under each retriever (first stage),
        plus a last row with the range (max - min) per retriever.
        `shown`: as the page shows it (no instruction column, rounded to 3 places), made once per
        intent and shared: the caller must not modify it."""
        q = self.query(query_id)
        names = self.check_retrievers(retrievers)
        key = (q.group_id, tuple(names))
        if shown:
            table = self._paraphrase_tables.get(("shown", *key))
            if table is None:
                table = self.paraphrase_table(query_id, names).drop(columns=["instruction"]).round(3)
                self._paraphrase_tables.put(("shown", *key), table)
            return table
        cached = self._paraphrase_tables.get(key)
        if cached is not None:
            return cached.copy()
        group = self.benchmark.paraphrases(query_id)
        forms = [
            str(p.meta.get("paraphrase_form") or f"phrasing {i + 1}").replace("_", " ") for i, p in enumerate(group)
        ]
        table = pd.DataFrame({"paraphrase": forms, "instruction": [p.instruction for p in group]})
        pairs, owners = [], []
        for name in names:
            try:
                rankings = self.engine.search(
                    name, [self.engine.benchmark_query(name, p) for p in group], k=self._depth(name, SEARCH_K)
                )
            except Exception:  # that column shows n/a; the rest of the table stands
                log.exception("paraphrase table: %s failed", name)
                table[name] = float("nan")
                continue
            pairs += [(r.ids, p) for r, p in zip(rankings, group)]
            owners += [name] * len(group)
        values = metrics_many(pairs, self.family)
        for name in dict.fromkeys(owners):
            table[name] = [v[self.family.primary] for v, o in zip(values, owners) if o == name]
        spread = {"paraphrase": "range (max − min)", "instruction": ""}
        spread.update({n: float(table[n].max() - table[n].min()) for n in names})
        table = pd.concat([table, pd.DataFrame([spread])], ignore_index=True)
        table = table[["paraphrase", *names, "instruction"]]  # numbers first: the instruction is long
        self._paraphrase_tables.put(key, table)
        return table.copy()

    def reranker_prompt(self, instruction: str, n_references: int) -> str:
        """The exact prompt the reranker sends (images shown as markers)."""
        if not self.reranker_name:
            return self.reranker_note or "no reranker is configured"
        from cir_demo.rerank import RerankRequest

        reranker = self.engine.reranker(self.reranker_name, **dict(self.config.reranker_kwargs))
        ids = tuple(f"ref{i + 1}" for i in range(n_references))
        return reranker.prompt_text(RerankRequest((None,) * n_references, ids, instruction))

    # ------------------------------------------------------------------ report
    def runs(self) -> list[RunSummary]:
        return list_runs(self.benchmark.name, self.fingerprint, extra=self.config.run_folders)

    def report(self, label: str | None = None, runs: list[RunSummary] | None = None) -> Report | None:
        """The Report of run `label` (default: the latest), read again only when its files changed
        (`report_key`): every page load shows one. Its tables are shared between callers: read-only.
        `runs`: `runs()` as the caller just listed them (listing reads every run folder's JSON)."""
        runs = self.runs() if runs is None else runs
        if not runs:
            return None
        run = runs[0] if label is None else next((r for r in runs if r.label == label), None)
        if run is None:
            raise ServiceError(f"no eval run {label!r} for benchmark {self.benchmark.name!r}")
        key = report_key(run)
        report = self._reports.get(key)
        if report is None:
            report = load_report(run, self.family)
            self._reports.put(key, report)
        return report

    def file_runs(self) -> list[str]:
        """The columns served from `--runs` results files, in column order."""
        return [n for n in self.retriever_names if hasattr(self.engine.retriever(n), "rankings")]

    max_uploaded_runs = 16  # results files one visitor (or API client) keeps at once (its oldest is dropped)
    max_upload_owners = 64  # visitors whose uploads are kept at once (the longest idle one's are dropped)

    def add_file_run(self, path: str | Path, name: str, owner: str = "") -> tuple[str, list[str]]:
        """A results file uploaded in the page or the API, read onto the benchmark as `--eval` reads it, as a
        column of `owner` (a visitor's session; ServiceError: one line naming the file). Its column is named
        `<name>-<first 6 hex of its sha256>`, so visitors' files never collide; returns (that name, notes).
        Each owner keeps its own `max_uploaded_runs` newest files: another's uploads never evict them."""
        from cir_demo.explorer.own_runs import RunFile, column_stem, load_run, register_runs
        from cir_demo.utils.io import sha256_file

        try:
            digest = sha256_file(path)[:6]
        except OSError as exc:
            raise ServiceError(f"{Path(path).name}: cannot be read ({exc.strerror or exc})") from None
        column = f"{column_stem(name)}-{digest}"
        retriever, notes = load_run(self.benchmark, path, column)
        with self._lock:
            register_runs([RunFile(column, str(path))])
            self.engine.add_retriever(retriever)
            self.uploaded_runs[column] = Path(path).name
            self.modality[column] = "file"
            mine = [c for c in self._upload_owners.pop(owner, []) if c != column] + [column]
            self._upload_owners[owner] = mine[-self.max_uploaded_runs :]  # re-inserted: the last active owner
            dropped = mine[: -self.max_uploaded_runs]
            while len(self._upload_owners) > self.max_upload_owners:
                dropped += self._upload_owners.pop(next(iter(self._upload_owners)))
            kept = {c for columns in self._upload_owners.values() for c in columns}
            for old in dict.fromkeys(dropped):
                if old not in kept:  # the same file uploaded by another owner is the same column: kept for them
                    self.engine.drop_retriever(old)
                    self.uploaded_runs.pop(old, None)
                    self.modality.pop(old, None)
        return column, notes

    def uploads_of(self, owner: str = "") -> list[str]:
        """The columns `owner` uploaded that are still served, oldest first."""
        with self._lock:
            return list(self._upload_owners.get(owner, ()))

    def scored_file_runs(self, n_boot: int = 1000, seed: int = 0, extra: Sequence[str] = ()):
        """The results-file columns (`--runs`, and the `extra` uploaded ones a visitor added) scored as
        `--eval` scores them (whole rankings, `RunStore.evaluation`), with the paired comparison of every
        headline metric for every pair (`paired.score_runs`); None without such columns. Computed once per
        set of columns."""
        from cir_demo.explorer.paired import score_runs

        names = tuple(self.file_runs() + [n for n in extra if n in self.uploaded_runs])
        if not names:
            return None
        key = (names, n_boot, seed)
        with self._lock:
            if key not in self._scored_runs:
                evaluations = []
                for n in names:
                    if (n, n_boot, seed) not in self._evaluations:
                        self._evaluations[(n, n_boot, seed)] = self.store.evaluation(n, n_boot, seed)
                    evaluations.append(self._evaluations[(n, n_boot, seed)])
                self._scored_runs[key] = score_runs(self.benchmark, evaluations, n_boot, seed)
            return self._scored_runs[key]
