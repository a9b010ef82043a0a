"""Retrieval over one benchmark with several retrievers: the one place that turns
queries into rankings (and optionally reranked rankings).

The `--eval` harness and the UI's service layer both go through `RetrievalEngine`,
so a ranking in the app is the same ranking the report scored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from cir_demo.benchmarks.schema import Benchmark, Query
from cir_demo.utils.lru import LRU

DEFAULT_K = 50
SEARCH_BLOCK = 1024  # queries per index search in a whole run (`run_benchmark`)
_ASK = object()  # `benchmark_query`'s template not given: look it up


@dataclass
class Ranking:
    """One query's ranking under one retriever: ids best first, scores aligned."""

    ids: list[str]
    scores: list[float]


@dataclass(frozen=True)
class QueryIds:
    """A benchmark query as a ranking-only retriever needs it: its id (and text, reference ids for the
    page); no image is opened, so rankings from a file are shown where the benchmark's images are absent."""

    query_id: str
    text: str
    reference_ids: tuple[str, ...] = ()


def benchmark_fingerprint(benchmark: Benchmark) -> str:
    """Identifies a benchmark's content and query set (world ids repeat across sizes and seeds): stored runs,
    reranker scores and the app's per-query caches are keyed by it."""
    info = benchmark.info or {}
    key = info.get("corpus_fingerprint") or info.get("checksum")
    if not key:
        ids = list(benchmark.corpus_ids)  # each id and a newline, hashed in one call (PinPoint: 110k ids)
        key = hashlib.sha256(("\n".join(ids) + "\n").encode() if ids else b"").hexdigest()
    # another query set over the same content (the world's compositional split): its runs, score and
    # per-query caches are its own
    query_set = info.get("query_set")
    return f"{benchmark.name}-{str(key)[:16]}" + (f"-{query_set}" if query_set else "")


def results_depth(rankings: Mapping[str, Sequence[str]]) -> int:
    """How deep a run read from a results file ranks: the file's longest ranking (so it is scored whole),
    at least DEFAULT_K. Part of the run's key in the store, whoever reads the file."""
    return max(DEFAULT_K, max(map(len, rankings.values()), default=0))


class RetrievalEngine:
    """Loads retrievers and their indexes lazily and answers composed queries.

    `retriever_names` are registry names (`python -m cir_demo retrievers list`).
    Indexes are built on first use (`cir_demo.index.ensure_index`) and never
    served stale unless `allow_stale` (then `stale_reasons` says what is off).
    """

    def __init__(
        self,
        benchmark: Benchmark,
        retriever_names: Sequence[str],
        device: str | None = None,
        allow_stale: bool = False,
        progress: bool = True,
        trust_remote_code: bool = False,
        encode_reranker_corpus: bool = True,
        index_uri: str | None = None,
    ):
        from cir_demo.retrievers.registry import get_config

        for name in retriever_names:
            get_config(name)  # unknown names fail now, with "did you mean"
        self.benchmark = benchmark
        self.retriever_names = list(retriever_names)
        self.device = device
        self.allow_stale = allow_stale
        self.progress = progress
        self.trust_remote_code = trust_remote_code
        # False (the app): a reranker gets the corpus features already stored and computes the others
        # from pixels per candidate, so no first view waits for the whole corpus (adopt_stored_features)
        self.encode_reranker_corpus = encode_reranker_corpus
        # where the corpus indexes live: None, faiss files under indexes/; else a Milvus URI (index/milvus_build.py)
        self.index_uri = index_uri
        self.fingerprint = benchmark_fingerprint(benchmark)
        self._retrievers: dict[str, Any] = {}
        self._indexes: dict[str, Any] = {}
        self._rerankers: dict[str, Any] = {}
        self._score_cache = None
        self._query_vectors = LRU(4096)
        # one query's ranking per (retriever, text, reference ids, depth, index): the app asks the same
        # query again and again (each page load's first view, the other phrasing and back, rerank on/off,
        # the API's clients), and the index search is most of an uncached column's CPU
        self._rankings = LRU(4096)
        # every reference image of the default world's two test splits (806), so a pass of each retriever
        # over the queries opens them from here, not from the renderer again
        self._images = LRU(1024)
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ loading
    def retriever(self, name: str):
        with self._lock:
            if name not in self._retrievers:
                from cir_demo.retrievers.registry import load_retriever

                # progress=False: the engine encodes queries in small chunks, where per-chunk
                # bars would only be noise (index builds show their own bar)
                self._retrievers[name] = load_retriever(
                    name, device=self.device, trust_remote_code=self.trust_remote_code, progress=False
                )
            return self._retrievers[name]

    def adopt_retrievers(self, loaded: dict[str, Any]) -> None:
        """Retrievers of this engine loaded before it existed (the app loads them while the world is
        generated); `retriever(name)` then returns them instead of loading them again."""
        with self._lock:
            for name, retriever in loaded.items():
                if name in self.retriever_names:
                    self._retrievers.setdefault(name, retriever)

    def add_retriever(self, retriever) -> None:
        """Serve a retriever built here (a results file uploaded in the app) under its name."""
        with self._lock:
            if retriever.name not in self.retriever_names:
                self.retriever_names.append(retriever.name)
            self._retrievers[retriever.name] = retriever

    def drop_retriever(self, name: str) -> None:
        """Stop serving `name` (an uploaded results file replaced by newer ones)."""
        with self._lock:
            self._retrievers.pop(name, None)
            self._indexes.pop(name, None)
            if name in self.retriever_names:
                self.retriever_names.remove(name)

    def index(self, name: str):
        """The corpus index of retriever `name` (built on first use)."""
        from cir_demo.retrievers.base import is_ranking_only

        with self._lock:
            if name not in self._indexes:
                retriever = self.retriever(name)
                if is_ranking_only(retriever):
                    self._indexes[name] = None
                else:
                    from cir_demo.index import ensure_index

                    self._indexes[name] = ensure_index(
                        self.benchmark,
                        retriever,
                        allow_stale=self.allow_stale,
                        progress=self.progress,
                        index_uri=self.index_uri,
                    )
            return self._indexes[name]

    def stale_reasons(self, name: str) -> list[str]:
        idx = self.index(name)
        return list(getattr(idx, "stale_reasons", []) or [])

    def open_image(self, image_id: str):
        img = self._images.get(image_id)
        if img is None:
            if self.benchmark.images is None:
                raise FileNotFoundError(
                    f"benchmark {self.benchmark.name!r} has no image store; cannot open {image_id!r}"
                )
            img = self.benchmark.images.open(image_id)
            self._images.put(image_id, img)
        return img

    def open_images_beside(self, image_ids: Sequence[str]) -> Callable[[], None]:
        """Start opening `image_ids` (those not cached yet, as many as the image cache holds) in a forked
        child while the caller goes on, e.g. a run's reference images (the world renders each, ~5 ms)
        on the other core while the corpus features load; the returned function waits for them and
        caches them (once; it may be called again), so `open_image` serves the very images it would have
        opened."""
        if self.benchmark.images is None:
            return lambda: None
        ids = [i for i in dict.fromkeys(map(str, image_ids)) if self._images.get(i) is None][: self._images.maxsize]
        if not ids:
            return lambda: None
        from cir_demo.utils.beside import beside

        images = self.benchmark.images

        def open_or_none(image_id: str):  # one that fails fails later, where it is needed, as before
            try:
                return images.open(image_id)
            except Exception:
                return None

        opened = beside(lambda: [open_or_none(i) for i in ids], "opening images")

        done: list[bool] = []

        def adopt() -> None:  # the first call waits; later ones return at once
            if done:
                return
            done.append(True)
            for image_id, image in zip(ids, opened.result()):
                if image is not None and self._images.get(image_id) is None:
                    self._images.put(image_id, image)

        return adopt

    # ------------------------------------------------------------------ queries
    def composed(self, query: Query, instruction: str | None = None):
        from cir_demo.retrievers.base import ComposedQuery

        return ComposedQuery(
            reference_images=tuple(self.open_image(r) for r in query.reference_ids),
            text=query.instruction if instruction is None else instruction,
            query_id=query.query_id,
            reference_ids=query.reference_ids,
        )

    def query_of(self, name: str, query: Query, instruction: str | None = None):
        """What retriever `name` is given for a benchmark query: ids only for a ranking-only one (no image
        opened), else the composed query."""
        from cir_demo.retrievers.base import is_ranking_only

        if is_ranking_only(self.retriever(name)):
            return QueryIds(
                query.query_id, query.instruction if instruction is None else instruction, tuple(query.reference_ids)
            )
        return self.composed(query, instruction)

    def _query_key(self, name: str, cq) -> tuple | None:
        if not cq.reference_ids:  # uploaded images have no ids: do not cache
            return None
        return (name, cq.text, cq.reference_ids)

    def encode(self, name: str, queries: Sequence[Any], batch_size: int | None = None) -> np.ndarray:
        """(n, variants, dim) query vectors, cached per (retriever, text, reference ids)."""
        retriever = self.retriever(name)
        keys = [self._query_key(name, q) for q in queries]
        out: list[np.ndarray | None] = [self._query_vectors.get(k) if k else None for k in keys]
        todo = [i for i, v in enumerate(out) if v is None]
        if todo:
            vecs = retriever.encode_query_variants([queries[i] for i in todo], batch_size=batch_size)
            for i, v in zip(todo, vecs):
                out[i] = v
                if keys[i]:
                    self._query_vectors.put(keys[i], v)
        return np.stack(out) if out else np.zeros((0, 1, getattr(retriever, "dim", 0)), np.float32)

    def search(
        self, name: str, queries: Sequence[Any], k: int = DEFAULT_K, batch_size: int | None = None
    ) -> list[Ranking]:
        """Rank the corpus for composed queries (`ComposedQuery`), best first."""
        from cir_demo.retrievers.base import is_ranking_only
        from cir_demo.retrievers.recipes import postmerge_max

        retriever = self.retriever(name)
        if is_ranking_only(retriever):
            out = []
            for q in queries:
                if q.query_id is None:
                    raise ValueError(f"retriever {name!r} only has precomputed rankings; it cannot answer an upload")
                ids, scores = retriever.rank(q.query_id, k)
                out.append(Ranking(list(ids), [float(s) for s in scores]))
            return out
        index = self.index(name)
        # one query at a time (the app) is cached; a whole run's batches (`run_benchmark`) are not
        key = self._query_key(name, queries[0]) if len(queries) == 1 else None
        key = (*key, k, id(index)) if key else None
        cached = self._rankings.get(key) if key else None
        if cached is not None:
            return [Ranking(list(cached.ids), list(cached.scores))]  # a copy: callers may edit theirs
        vecs = self.encode(name, queries, batch_size=batch_size)
        n, variants, dim = vecs.shape
        hits = index.search(vecs.reshape(n * variants, dim), k)
        out = []
        for i in range(n):
            per_variant = [(ids, [float(s) for s in sc]) for ids, sc in hits[i * variants : (i + 1) * variants]]
            ids, scores = per_variant[0] if variants == 1 else postmerge_max(per_variant, k)
            out.append(Ranking(list(ids), list(scores)))
        if key:
            self._rankings.put(key, Ranking(list(out[0].ids), list(out[0].scores)))
        return out

    def eval_depth(self, name: str) -> int:
        """How deep `--eval` ranks with retriever `name`, and so the depth of every per-query row of it: a
        results file's whole ranking (its longest; as `--eval --results-json` scores the file), else
        DEFAULT_K. The app's columns and failure sorts rank this deep too."""
        rankings = getattr(self.retriever(name), "rankings", None)
        return results_depth(rankings) if rankings is not None else DEFAULT_K

    def run_benchmark(
        self,
        name: str,
        queries: Sequence[Query] | None = None,
        k: int = DEFAULT_K,
        batch_size: int = 64,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[dict[str, list[str]], dict[str, list[float]]]:
        """Rankings for every benchmark query: (run, scores)."""
        queries = list(self.benchmark.queries if queries is None else queries)
        run: dict[str, list[str]] = {}
        scores: dict[str, list[float]] = {}
        retriever = self.retriever(name)
        if hasattr(retriever, "has"):  # a results file: its queries only (the others are not scored), no image
            queries = [q for q in queries if retriever.has(q.query_id)]
        template = self.query_template(name)  # once per run, not once per query
        # encoded `batch_size` at a time, searched a block at a time: one exact search of many queries
        # costs less than several of a batch each (faiss's top-k selection per call)
        block = batch_size * max(1, SEARCH_BLOCK // batch_size)
        for start in range(0, len(queries), block):
            chunk = queries[start : start + block]
            composed = [self.benchmark_query(name, q, template=template) for q in chunk]
            for q, r in zip(chunk, self.search(name, composed, k=k, batch_size=batch_size)):
                run[q.query_id], scores[q.query_id] = r.ids, r.scores
            if progress:
                progress(min(start + block, len(queries)), len(queries))
        return run, scores

    def benchmark_query(self, name: str, query: Query, instruction: str | None = None, template: Any = _ASK):
        """The composed query retriever `name` answers for a benchmark query: its query template applied
        to the query (with `instruction` in place of the query's own, when given). `--eval`, the app's
        columns and its paraphrase table all ask through here, so they rank the same text. `template`:
        `query_template(name)` when the caller has it already."""
        from cir_demo.retrievers.query_templates import render

        if instruction is not None:
            query = dataclasses.replace(query, instruction=instruction)
        if template is _ASK:
            template = self.query_template(name)
        return self.query_of(name, query, None if template is None else render(template["template"], query))

    def run_spec(self, name: str) -> dict:
        """What a run of retriever `name` on this benchmark records (run_info.json, results files): its spec
        plus the query template it used. Stored runs are reused when this matches, hash for hash."""
        spec = dict(self.retriever(name).spec)
        template = self.query_template(name)
        if template is not None:
            spec["query_template"] = template
        return spec

    def query_template(self, name: str) -> dict[str, str] | None:
        """{"template", "source"} that turns this benchmark's queries into retriever `name`'s text; None: the
        instruction as loaded (retrievers/query_templates.py)."""
        from cir_demo.retrievers.query_templates import resolve
        from cir_demo.retrievers.registry import get_config

        return resolve(get_config(name), self.benchmark.name)

    # ------------------------------------------------------------------ reranking
    def reranker(self, backend: str, **kw):
        with self._lock:
            key = (backend, tuple(sorted(kw.items())))
            if key not in self._rerankers:
                from cir_demo.rerank import load_reranker

                reranker = load_reranker(backend, **kw)
                self._share_corpus_embeddings(reranker)
                self._rerankers[key] = reranker
            return self._rerankers[key]

    def prefetch_corpus_embeddings(self, names: Sequence[str], reranker_backend: str | None = None) -> None:
        """On a first run, encode the corpus for these retrievers' image towers and the reranker's
        image features in one pass (each image rendered or decoded once) into the shared caches."""
        if self.benchmark.images is None:
            return
        from cir_demo.index.corpus_encode import corpus_ids_of
        from cir_demo.index.embedding_cache import prefetch_corpus_embeddings
        from cir_demo.rerank import load_reranker

        encoders = [r for r in (self.retriever(n) for n in names) if getattr(r, "image_spec", None)]
        if reranker_backend:
            with self._lock:
                cached = [r for (b, _), r in self._rerankers.items() if b == reranker_backend]
            reranker = cached[0] if cached else load_reranker(reranker_backend)
            if getattr(reranker, "image_spec", None) and hasattr(reranker, "encode_images"):
                encoders.append(reranker)
        prefetch_corpus_embeddings(self.benchmark, corpus_ids_of(self.benchmark), encoders, progress=self.progress)

    def _share_corpus_embeddings(self, reranker, first: bool = True) -> bool:
        """A reranker that reads precomputed image features (the world judge) gets the corpus's from
        the shared embedding cache, encoded once; True when it got them. With `encode_reranker_corpus`
        off, only features already stored are given (else it scores candidates from their pixels), and
        on the first call only those that need no decoding (the app's loader adopts the rest later)."""
        if not (hasattr(reranker, "use_image_embeddings") and getattr(reranker, "image_spec", None)):
            return False
        if self.benchmark.images is None:
            return False
        from cir_demo.index.corpus_encode import corpus_ids_of
        from cir_demo.index.embedding_cache import cached_encode_corpus, stored_corpus_embeddings

        ids = corpus_ids_of(self.benchmark)
        if self.encode_reranker_corpus:
            xb = cached_encode_corpus(self.benchmark, ids, reranker, progress=self.progress)
        else:
            xb = stored_corpus_embeddings(self.benchmark, ids, reranker, decode=not first)
            if xb is None and not first:
                return False
            if xb is None:  # none stored yet: references are still computed once and kept
                ids, xb = [], np.zeros((0, int(reranker.dim)), np.float32)
        refs = {r for q in self.benchmark.queries for r in q.reference_ids}
        reranker.use_image_embeddings(ids, xb, remember_ids=refs)
        return bool(ids)

    def adopt_stored_features(self, backend: str, **kw) -> bool:
        """Give the loaded reranker `backend` the corpus features once they are stored (by an `--eval`
        run, e.g. the app's background run); True when it has them. See `encode_reranker_corpus`."""
        with self._lock:
            reranker = self._rerankers.get((backend, tuple(sorted(kw.items()))))
        return reranker is not None and self._share_corpus_embeddings(reranker, first=False)

    @property
    def score_cache(self):
        """Reranker scores on disk, one file per benchmark content (ids repeat across worlds)."""
        with self._lock:
            if self._score_cache is None:
                from cir_demo.paths import cache_dir
                from cir_demo.rerank import ScoreCache

                self._score_cache = ScoreCache(cache_dir() / "rerank" / f"{self.fingerprint}.sqlite")
            return self._score_cache

    def use_score_cache(self, path) -> None:
        """Keep reranker scores in `path` from now on (benchmarks: start from an empty cache)."""
        from cir_demo.rerank import ScoreCache

        with self._lock:
            if self._score_cache is not None:
                self._score_cache.close()
            self._score_cache = ScoreCache(path)

    def rerank(self, backend: str, query, ranking: Ranking, top_n: int = 20, reranker_kw: dict | None = None):
        """Rerank one ranking; `query` is a ComposedQuery. Returns `RerankedItem`s in the new order."""
        from cir_demo.rerank import RerankRequest, rerank

        reranker = self.reranker(backend, **(reranker_kw or {}))
        request = RerankRequest(tuple(query.reference_images), tuple(query.reference_ids), query.text)
        cache = self.score_cache if query.reference_ids else None  # uploads: nothing stable to key on
        return rerank(request, ranking.ids, ranking.scores, self.open_image, reranker, top_n=top_n, cache=cache)

    def rerank_run(
        self,
        backend: str,
        run: dict[str, list[str]],
        scores: dict[str, list[float]] | None = None,
        queries: Sequence[Query] | None = None,
        top_n: int = 20,
        reranker_kw: dict | None = None,
        progress: bool = False,
        lanes: int = 1,
    ):
        """Rerank the top `top_n` of every query's ranking in `run` (the benchmark's queries by default),
        the queries' candidates scored in batches through the score cache, `lanes` batches at once where
        the backend allows it (`parallel_batches`). Returns a `RunRerank`."""
        from cir_demo.rerank import rerank_run

        reranker = self.reranker(backend, **(reranker_kw or {}))
        queries = list(self.benchmark.queries if queries is None else queries)
        if hasattr(reranker, "remember"):  # a benchmark query's references are fixed by their ids
            reranker.remember([r for q in queries for r in q.reference_ids])
        return rerank_run(
            queries,
            run,
            self.open_image,
            reranker,
            top_n=top_n,
            cache=self.score_cache,
            run_scores=scores,
            progress=progress,
            lanes=lanes if reranker.parallel_batches else 1,
        )

    def prescore(self, backend: str, query, candidate_ids: Sequence[str], reranker_kw: dict | None = None) -> None:
        """Score `candidate_ids` for one composed query in one batched reranker call, into the score
        cache, so that reranking several rankings of that query afterwards (`rerank`) reads each
        candidate's score instead of computing it once per ranking. Uploads (no reference ids, so
        nothing stable to key the cache on) are left alone."""
        if not query.reference_ids:
            return
        from cir_demo.rerank import RerankRequest
        from cir_demo.rerank.rerank import score_candidates

        reranker = self.reranker(backend, **(reranker_kw or {}))
        request = RerankRequest(tuple(query.reference_images), tuple(query.reference_ids), query.text)
        score_candidates(request, list(dict.fromkeys(candidate_ids)), self.open_image, reranker, cache=self.score_cache)

    @staticmethod
    def set_threads(n: int) -> None:
        """CPU threads the models use (torch's setting is process-wide; torch is imported here so
        that callers such as the explorer need not import it)."""
        import torch

        torch.set_num_threads(n)

    def close(self) -> None:
        if self._score_cache is not None:
            self._score_cache.close()
            self._score_cache = None
