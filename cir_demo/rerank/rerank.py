"""Rerank the top n of a first-stage ranking with a pointwise reranker.

Ordering policy (`order_top_block`):
- Only the first `top_n` candidates are scored and reordered; the rest keep
  their first-stage order after the reranked block.
- Inside the block, scored candidates are sorted by P(yes), highest first.
  The sort key is the log-odds (logit_yes - logit_no), which orders exactly
  like P(yes) but does not saturate at 1.0 in floating point; equal keys keep
  their first-stage order (stable). A backend that also answers P(near miss)
  and declares a `near_miss_penalty` (the world judge) is sorted by
  P(yes) - penalty * P(near), the log-odds breaking ties; one that declares a
  `first_stage_rank_weight` w also subtracts w * (its 0-based first-stage rank),
  so a candidate the first stage put high keeps part of its lead.
- A candidate without a score (flag "tokens_missing" or "error: ...") stays
  in its first-stage slot: if it was 3rd it is still 3rd, and scored
  candidates are sorted around it. It is never pushed to the end (the
  official script does that, turning a server hiccup into a demotion).
"""

from __future__ import annotations

import logging
import time
from collections import ChainMap, Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from itertools import repeat
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from cir_demo.rerank.base import FLAG_ERROR_PREFIX, CandidateScore, RerankRequest, Reranker

log = logging.getLogger(__name__)


@dataclass
class RerankedItem:
    candidate_id: str
    first_stage_rank: int  # 0-based
    first_stage_score: float | None
    p_yes: float | None
    new_rank: int  # 0-based
    flag: str | None
    logit_yes: float | None = None
    logit_no: float | None = None
    p_near: float | None = None  # P(near miss), from backends that answer it
    reranked: bool = False  # inside the top-n block the reranker was asked about
    from_cache: bool = False

    @property
    def rank_change(self) -> int:
        """Positive: moved up (towards rank 0)."""
        return self.first_stage_rank - self.new_rank

    def to_dict(self) -> dict:
        return asdict(self)


def order_top_block(
    scores: Sequence[CandidateScore], near_miss_penalty: float = 0.0, rank_weight: float = 0.0
) -> list[int]:
    """New order of a block given in first-stage order, as indices into `scores` (see module doc)."""
    keys = [s.sort_key(near_miss_penalty, rank_weight, rank) for rank, s in enumerate(scores)]
    movable = [i for i, k in enumerate(keys) if k is not None]
    ranked = iter(
        sorted(movable, key=lambda i: (-keys[i][0], -keys[i][1]))
    )  # sorted() is stable: ties keep first-stage order
    return [i if keys[i] is None else next(ranked) for i in range(len(scores))]


def score_candidates(
    request: RerankRequest,
    candidate_ids: Sequence[str],
    load_image: Callable[[str], Any],
    reranker: Reranker,
    cache=None,
    spec_hash: str | None = None,
) -> tuple[dict[str, CandidateScore], set[str]]:
    """Scores for `candidate_ids` (cache first, then the reranker for the misses).

    Returns ({candidate_id: CandidateScore}, ids served from the cache). An image
    that fails to load gives that candidate an error flag instead of failing the query.
    """
    return score_candidates_batch([(request, candidate_ids)], load_image, reranker, cache, spec_hash)[0]


def score_candidates_batch(
    items: Sequence[tuple[RerankRequest, Sequence[str]]],
    load_image: Callable[[str], Any],
    reranker: Reranker,
    cache=None,
    spec_hash: str | None = None,
) -> list[tuple[dict[str, CandidateScore], set[str]]]:
    """`score_candidates` for several queries, with the misses of all of them scored in one
    `reranker.score_batch` call (a backend that batches across queries is then much faster)."""
    spec_hash = spec_hash or reranker.spec_hash()
    batch = _look_up(items, load_image, reranker, cache, spec_hash)
    return _settle(batch, _score_misses(reranker, batch), reranker, cache, spec_hash)


@dataclass
class _Batch:
    """One call's queries after the cache: what was found, what is still to score, and what an earlier
    batch still in flight will score (`pending`: index in `results` -> {candidate id: the pair's key})."""

    items: Sequence[tuple[RerankRequest, Sequence[str]]]
    results: list[tuple[dict[str, CandidateScore], set[str]]]
    work: list[tuple[int, list[str], list[Any]]]  # (item index, ids to score, their images)
    pending: dict[int, dict[str, tuple]] = field(default_factory=dict)


def _pair_key(request: RerankRequest, cid: str) -> tuple:
    """What the score cache keys a pair by (its backend aside)."""
    return request.instruction, tuple(request.reference_ids), cid


def _look_up(items, load_image, reranker: Reranker, cache, spec_hash: str, in_flight: Mapping | None = None) -> _Batch:
    """Each query's cached scores and the misses to score (their images loaded). `in_flight`: pairs an
    earlier batch is scoring now, counted as found in the cache, as they would be once it is stored."""
    results: list[tuple[dict[str, CandidateScore], set[str]]] = []
    work: list[tuple[int, list[str], list[Any]]] = []
    pending: dict[int, dict[str, tuple]] = {}
    for i, (request, candidate_ids) in enumerate(items):
        cached: dict[str, CandidateScore] = {}
        if cache is not None and candidate_ids:
            cached = cache.get_many(spec_hash, request.instruction, request.reference_ids, candidate_ids)
        scores = dict(cached)
        todo_ids, todo_images = [], []
        for cid in candidate_ids:
            if cid in scores:
                continue
            if in_flight and (key := _pair_key(request, cid)) in in_flight:
                pending.setdefault(i, {})[cid] = key
                continue
            try:
                image = load_image(cid) if reranker.needs_image(cid) else None
            except Exception as exc:  # one unreadable image must not sink the whole query
                scores[cid] = CandidateScore(cid, None, None, None, f"{FLAG_ERROR_PREFIX}image load failed: {exc}")
                continue
            todo_ids.append(cid)
            todo_images.append(image)
        results.append((scores, set(cached)))
        if todo_ids:
            work.append((i, todo_ids, todo_images))
    return _Batch(items, results, work, pending)


def _misses(batch: _Batch) -> list:
    """What the reranker is asked about a batch: (request, ids to score, their images) of each query."""
    return [(batch.items[i][0], ids, images) for i, ids, images in batch.work]


def _score_misses(reranker: Reranker, batch: _Batch) -> list:
    """The reranker's score lists of the batch's misses (no cache, no shared state of the caller)."""
    if not batch.work:
        return []
    return reranker.score_batch(_misses(batch))


def _settle(
    batch: _Batch,
    fresh_lists,
    reranker: Reranker,
    cache,
    spec_hash: str,
    scored: Mapping | None = None,
    load_image=None,
):
    """The batch's results with its fresh scores (stored in the cache) and its pending pairs' scores
    (from `scored`, served as cache hits)."""
    results, work = batch.results, batch.work
    if work:
        if len(fresh_lists) != len(work):
            raise RuntimeError(
                f"reranker {reranker.spec.get('backend')!r} returned {len(fresh_lists)} score lists "
                f"for {len(work)} queries"
            )
        for (i, todo_ids, _), fresh in zip(work, fresh_lists):
            if [s.candidate_id for s in fresh] != todo_ids:
                raise RuntimeError(
                    f"reranker {reranker.spec.get('backend')!r} returned scores for "
                    f"{[s.candidate_id for s in fresh]}, asked for {todo_ids}"
                )
            results[i][0].update((s.candidate_id, s) for s in fresh)
        if cache is not None:  # one transaction for the whole batch: a kill leaves all of it or none
            cache.put_queries(
                spec_hash,
                [
                    (batch.items[i][0].instruction, batch.items[i][0].reference_ids, fresh)
                    for (i, _, _), fresh in zip(work, fresh_lists)
                ],
            )
    for i, keys in batch.pending.items():
        again = []
        for cid, key in keys.items():
            if scored[key].is_error:  # never stored, so scored again here, as after the earlier batch
                again.append(cid)
                continue
            results[i][0][cid] = scored[key]
            results[i][1].add(cid)
        if again:
            request = batch.items[i][0]
            found, hits = score_candidates_batch([(request, again)], load_image, reranker, cache, spec_hash)[0]
            results[i][0].update(found)
            results[i][1].update(hits)
    return results


def rerank(
    request: RerankRequest,
    candidate_ids: Sequence[str],
    first_stage_scores: Sequence[float] | None,
    load_image: Callable[[str], Any],
    reranker: Reranker,
    top_n: int = 20,
    cache=None,
) -> list[RerankedItem]:
    """Rerank one query's first-stage ranking; returns every candidate in its new order."""
    ids = _check_ranking(candidate_ids, first_stage_scores, top_n)

    block = ids[:top_n]
    spec_hash = reranker.spec_hash()
    if cache is not None and block:
        cache.register_spec(spec_hash, reranker.spec)
    scores, from_cache = score_candidates(request, block, load_image, reranker, cache, spec_hash)
    return assemble(
        ids, first_stage_scores, block, scores, from_cache, reranker.near_miss_penalty, reranker.first_stage_rank_weight
    )


def _check_ranking(candidate_ids: Sequence[str], first_stage_scores: Sequence[float] | None, top_n: int) -> list[str]:
    ids = [str(c) for c in candidate_ids]
    if len(set(ids)) != len(ids):
        dupes = sorted(c for c, n in Counter(ids).items() if n > 1)
        raise ValueError(f"candidate ids repeat in the first-stage ranking: {dupes[:5]}")
    if first_stage_scores is not None and len(first_stage_scores) != len(ids):
        raise ValueError(f"{len(first_stage_scores)} first-stage scores for {len(ids)} candidates")
    if not isinstance(top_n, int) or top_n < 0:
        raise ValueError(f"top_n must be a non-negative integer, got {top_n!r}")
    return ids


def assemble(
    ids: Sequence[str],
    first_stage_scores: Sequence[float] | None,
    block: Sequence[str],
    scores: dict[str, CandidateScore],
    from_cache: set[str],
    near_miss_penalty: float = 0.0,
    rank_weight: float = 0.0,
) -> list[RerankedItem]:
    """Every candidate in its new order: the scored block reordered, the rest as it was."""
    order = order_top_block([scores[c] for c in block], near_miss_penalty, rank_weight)
    n = len(block)
    head = list(ids[:n])
    first_rank = {c: r for r, c in enumerate(head if head == list(block) else ids)}
    items = [
        _item(cid, first_rank[cid], first_stage_scores, new_rank, scores.get(cid), cid in from_cache)
        for new_rank, cid in enumerate(block[i] for i in order)
    ]
    tail = list(ids[n:])
    if any(c in scores or c in from_cache for c in tail):  # scores beyond the block: item by item
        items += [
            _item(cid, r, first_stage_scores, r, scores.get(cid), cid in from_cache) for r, cid in enumerate(tail, n)
        ]
    else:  # the unscored rest keeps its first-stage slots: the bulk of a deep ranking, built in one pass
        first = [None] * len(tail) if first_stage_scores is None else _floats(first_stage_scores[n:])
        ranks = range(n, len(ids))
        items += map(RerankedItem, tail, ranks, first, repeat(None), ranks, repeat(None))
    return items


def _item(cid: str, r0: int, first_stage_scores, new_rank: int, s: CandidateScore | None, cached: bool):
    return RerankedItem(
        candidate_id=cid,
        first_stage_rank=r0,
        first_stage_score=None if first_stage_scores is None else float(first_stage_scores[r0]),
        p_yes=s.p_yes if s else None,
        new_rank=new_rank,
        flag=s.flag if s else None,
        logit_yes=s.logit_yes if s else None,
        logit_no=s.logit_no if s else None,
        p_near=s.p_near if s else None,
        reranked=s is not None,
        from_cache=cached,
    )


def _floats(values) -> list[float]:
    """Python floats equal to `float(v)` of each value (an array's in one conversion)."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float64).tolist()
    return [float(v) for v in values]


def _prepare(q, run, run_scores, load_image, reranker: Reranker, top_n: int):
    """(query, its request, its ranked ids, their first-stage scores) for one query of a run."""
    try:
        refs = [load_image(r) if reranker.needs_image(r) else None for r in q.reference_ids]
    except Exception as exc:
        raise RuntimeError(
            f"query {q.query_id}: cannot load reference image(s) {list(q.reference_ids)}: {exc}"
        ) from exc
    scores = None if run_scores is None else run_scores.get(q.query_id)
    return (
        q,
        RerankRequest(refs, q.reference_ids, q.instruction),
        _check_ranking(run[q.query_id], scores, top_n),
        scores,
    )


@dataclass
class RunRerank:
    """A reranked run: the new ranking, each query's items, and the spec that made them."""

    run: dict[str, list[str]]
    items: dict[str, list[RerankedItem]]
    spec: dict
    spec_hash: str
    top_n: int
    stats: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-able; the spec (with the exact prompt template) travels with the results."""
        return {
            "reranker": {"spec": self.spec, "spec_hash": self.spec_hash, "top_n": self.top_n},
            "stats": self.stats,
            "run": self.run,
            "items": {q: [it.to_dict() for it in its] for q, its in self.items.items()},
        }


def rerank_run(
    queries: Iterable[Any],
    run: Mapping[str, Sequence[str]],
    load_image: Callable[[str], Any],
    reranker: Reranker,
    top_n: int = 20,
    cache=None,
    run_scores: Mapping[str, Sequence[float]] | None = None,
    progress: bool = True,
    chunk_size: int = 32,
    lanes: int = 1,
) -> RunRerank:
    """Rerank every query of `run`. `queries` are objects with query_id, reference_ids
    and instruction (e.g. `cir_demo.benchmarks.schema.Query`); queries without a
    ranking in `run` are skipped. `lanes`: chunks of queries scored at once, on as many threads, for a
    backend whose `score_batch` may run on several threads at once (see `parallel_batches`)."""
    from tqdm import tqdm

    todo = [q for q in queries if q.query_id in run]
    new_run: dict[str, list[str]] = {}
    items: dict[str, list[RerankedItem]] = {}
    t0 = time.perf_counter()
    spec_hash = reranker.spec_hash()
    if cache is not None and todo and top_n:
        cache.register_spec(spec_hash, reranker.spec)
    bar = tqdm(total=len(todo), desc=f"rerank top {top_n}", unit="query", disable=not progress)

    def finish(prepared, batch: _Batch, fresh) -> None:
        fresh = fresh.result() if isinstance(fresh, Future) else fresh
        scored = _settle(batch, fresh, reranker, cache, spec_hash, ChainMap(*recent), load_image)
        if pool is not None and cache is not None:  # what the chunks after it may have counted as found
            recent.append(
                {
                    _pair_key(batch.items[i][0], sc.candidate_id): sc
                    for (i, _, _), f in zip(batch.work, fresh)
                    for sc in f
                }
            )
            in_flight.difference_update(recent[-1])
        for (q, _, ids, scores), (cand_scores, from_cache) in zip(prepared, scored):
            its = assemble(
                ids,
                scores,
                ids[:top_n],
                cand_scores,
                from_cache,
                reranker.near_miss_penalty,
                reranker.first_stage_rank_weight,
            )
            items[q.query_id] = its
            new_run[q.query_id] = [it.candidate_id for it in its]
        bar.update(len(prepared))

    # Queries go to the reranker in chunks, so a backend that batches across queries can. With `lanes`
    # > 1, that many chunks are scored at once on worker threads: each chunk is looked up in the cache
    # in order, a pair that a chunk still in flight scores counting as found (as it would be once
    # stored), so every chunk sends the reranker the very batch it sends without lanes; and each chunk is
    # prepared (`Reranker.prepare_batch`) on this thread, in order, before a lane scores it.
    lanes = max(1, int(lanes))
    pool = ThreadPoolExecutor(lanes, thread_name_prefix="rerank-lane") if lanes > 1 else None
    flight: deque = deque()  # (prepared, batch, fresh score lists or their future), oldest first
    recent: deque = deque(maxlen=lanes)  # {pair key: score} of the chunks settled last
    in_flight: set = set()  # pair keys the chunks in flight score
    try:
        for start in range(0, len(todo), chunk_size):
            prepared = [
                _prepare(q, run, run_scores, load_image, reranker, top_n) for q in todo[start : start + chunk_size]
            ]
            asked = [(request, ids[:top_n]) for _, request, ids, _ in prepared]
            batch = _look_up(asked, load_image, reranker, cache, spec_hash, in_flight if cache is not None else None)
            if batch.work:
                reranker.prepare_batch(_misses(batch))  # here, in chunk order, whatever the lanes' timing
            if pool is None:
                finish(prepared, batch, _score_misses(reranker, batch))
                continue
            if cache is not None:
                in_flight.update(_pair_key(batch.items[i][0], cid) for i, ids, _ in batch.work for cid in ids)
            flight.append((prepared, batch, pool.submit(_score_misses, reranker, batch)))
            if len(flight) >= lanes:
                finish(*flight.popleft())
        while flight:
            finish(*flight.popleft())
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    bar.close()
    flat = [it for its in items.values() for it in its[:top_n] if it.reranked]  # only the block is scored
    stats = {
        "queries": len(items),
        "candidates_scored": len(flat),
        "from_cache": sum(it.from_cache for it in flat),
        "tokens_missing": sum(it.flag is not None and not it.flag.startswith(FLAG_ERROR_PREFIX) for it in flat),
        "errors": sum(it.flag is not None and it.flag.startswith(FLAG_ERROR_PREFIX) for it in flat),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return RunRerank(new_run, items, reranker.spec, reranker.spec_hash(), top_n, stats)
