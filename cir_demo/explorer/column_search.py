"""`ColumnSearch`: the app's columns for one query, a benchmark's or an upload's: each retriever's top k
(optionally reranked) as tiles with their judgments and metrics, the paraphrase table and the
reranker's prompt. Retrieval goes through `RetrievalEngine`."""

from __future__ import annotations

import logging
import time
from typing import Mapping, Sequence

import pandas as pd

from cir_demo.benchmarks.registry import declared_defaults
from cir_demo.benchmarks.schema import Benchmark, Query
from cir_demo.explorer.config import REFERENCE_PX, SEARCH_K, ServiceError
from cir_demo.explorer.images import ThumbnailStore, encode_jpeg_data_uri
from cir_demo.explorer.ranking_metrics import metrics_many
from cir_demo.explorer.served_columns import ServedColumns
from cir_demo.explorer.uploads import ValidatedImage
from cir_demo.store.store import produce_run
from cir_demo.explorer.views import Column, Comparison, Tile, fill_metrics, protocol_scope, where_line
from cir_demo.utils.lru import LRU

log = logging.getLogger(__name__)


class ColumnSearch:
    """Searches the `columns` an app serves through `engine` and draws their tiles (`tiles`, `references`),
    scored by the benchmark's metric `family` and shown as its `views` say; `reranker_name` (with
    `reranker_kwargs`) reranks a column's top n when asked, `reranker_note` says why none is configured."""

    def __init__(
        self,
        benchmark: Benchmark,
        engine,
        columns: ServedColumns,
        family,
        views,
        tiles: ThumbnailStore,
        references: ThumbnailStore,
        reranker_name: str | None,
        reranker_note: str,
        reranker_kwargs,
    ):
        self.benchmark = benchmark
        self.engine = engine
        self.columns = columns
        self.family = family
        self.views = views
        self.tiles = tiles
        self.references = references
        self.reranker_name = reranker_name
        self.reranker_note = reranker_note
        self.reranker_kwargs = reranker_kwargs
        self._paraphrase_tables = LRU(256)  # (intent, retrievers) -> table
        self._metrics = LRU(4096)  # (query id, ranking) -> the column's metrics

    @property
    def upload_note(self) -> str:
        """What the benchmark's declaration says of searching it with one's own images ("" for nothing)."""
        spec = declared_defaults(self.benchmark.name)
        return spec.upload_note if spec else ""

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
        col = Column(name, self.columns.modality.get(name, "composed"))
        try:
            if isinstance(ranking, BaseException):
                raise ranking
            ids, scores = list(ranking.ids), list(ranking.scores)
            first_rank = None
            p_yes: dict[str, tuple[float | None, str | None, bool, float | None]] = {}
            if rerank:
                items = self.engine.rerank(
                    self.reranker_name, cq, ranking, top_n=top_n, reranker_kw=dict(self.reranker_kwargs)
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
            self.engine.prescore(self.reranker_name, cq, union, reranker_kw=dict(self.reranker_kwargs))
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
        q: Query,
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
        names = self.columns.check(retrievers)
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
        names = self.columns.check(retrievers)
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
        reranker = self.engine.reranker(self.reranker_name, **dict(self.reranker_kwargs))
        return str(reranker.spec.get("ranking") or "P(yes)")

    def paraphrase_table(self, q: Query, retrievers: Sequence[str] | None = None, shown: bool = False) -> pd.DataFrame:
        """The family's primary metric (AP@10 on PinPoint and the world) of every paraphrase of the
        query's intent under each retriever (first stage),
        plus a last row with the range (max - min) per retriever.
        `shown`: as the page shows it (no instruction column, rounded to 3 places), made once per
        intent and shared: the caller must not modify it."""
        names = self.columns.check(retrievers)
        key = (q.group_id, tuple(names))
        if shown:
            table = self._paraphrase_tables.get(("shown", *key))
            if table is None:
                table = self.paraphrase_table(q, names).drop(columns=["instruction"]).round(3)
                self._paraphrase_tables.put(("shown", *key), table)
            return table
        cached = self._paraphrase_tables.get(key)
        if cached is not None:
            return cached.copy()
        group = self.benchmark.paraphrases(q.query_id)
        forms = [
            str(p.meta.get("paraphrase_form") or f"phrasing {i + 1}").replace("_", " ") for i, p in enumerate(group)
        ]
        table = pd.DataFrame({"paraphrase": forms, "instruction": [p.instruction for p in group]})
        pairs, cells, served = [], {}, []  # cells: (retriever, paraphrase id) -> its index in pairs
        for name in names:
            try:  # the store's producer: the query text and depth of the run per_query.csv scores
                run, _ = produce_run(self.engine, name, group)
            except Exception:  # that column shows n/a; the rest of the table stands
                log.exception("paraphrase table: %s failed", name)
                table[name] = float("nan")
                continue
            for p in [p for p in group if p.query_id in run]:  # a results file may leave a paraphrase out
                cells[(name, p.query_id)] = len(pairs)
                pairs.append((run[p.query_id], p))
            served.append(name)
        values = metrics_many(pairs, self.family)
        for name in served:
            table[name] = [
                values[cells[(name, p.query_id)]][self.family.primary] if (name, p.query_id) in cells else float("nan")
                for p in group
            ]
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

        reranker = self.engine.reranker(self.reranker_name, **dict(self.reranker_kwargs))
        ids = tuple(f"ref{i + 1}" for i in range(n_references))
        return reranker.prompt_text(RerankRequest((None,) * n_references, ids, instruction))
