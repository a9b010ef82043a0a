"""Rerank the top n of a first-stage ranking with a pointwise reranker.

Ordering policy (`order_top_block`):
- Only the first `top_n` candidates are scored and reordered; the rest keep
  their first-stage order after the reranked block.
- Inside the block, scored candidates are sorted by P(yes), highest first.
  The sort key is the log-odds (logit_yes - logit_no), which orders exactly
  like P(yes) but does not saturate at 1.0 in floating point; equal keys keep
  their first-stage order (stable).
- A candidate without a score (flag "tokens_missing" or "error: ...") stays
  in its first-stage slot: if it was 3rd it is still 3rd, and scored
  candidates are sorted around it. It is never pushed to the end (the
  official script does that, turning a server hiccup into a demotion).
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

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
    reranked: bool = False  # inside the top-n block the reranker was asked about
    from_cache: bool = False

    @property
    def rank_change(self) -> int:
        """Positive: moved up (towards rank 0)."""
        return self.first_stage_rank - self.new_rank

    def to_dict(self) -> dict:
        return asdict(self)


def order_top_block(scores: Sequence[CandidateScore]) -> list[int]:
    """New order of a block given in first-stage order, as indices into `scores` (see module doc)."""
    keys = [s.margin() for s in scores]
    movable = [i for i, k in enumerate(keys) if k is not None]
    ranked = iter(sorted(movable, key=lambda i: -keys[i]))  # sorted() is stable: ties keep first-stage order
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
    spec_hash = spec_hash or reranker.spec_hash()
    cached: dict[str, CandidateScore] = {}
    if cache is not None and candidate_ids:
        cached = cache.get_many(spec_hash, request.instruction, request.reference_ids, candidate_ids)
    scores = dict(cached)
    todo_ids, todo_images = [], []
    for cid in candidate_ids:
        if cid in scores:
            continue
        try:
            image = load_image(cid)
        except Exception as exc:  # one unreadable image must not sink the whole query
            scores[cid] = CandidateScore(cid, None, None, None, f"{FLAG_ERROR_PREFIX}image load failed: {exc}")
            continue
        todo_ids.append(cid)
        todo_images.append(image)
    if todo_ids:
        fresh = reranker.score(request, todo_ids, todo_images)
        if [s.candidate_id for s in fresh] != todo_ids:
            raise RuntimeError(
                f"reranker {reranker.spec.get('backend')!r} returned scores for "
                f"{[s.candidate_id for s in fresh]}, asked for {todo_ids}"
            )
        scores.update((s.candidate_id, s) for s in fresh)
        if cache is not None:
            cache.put_many(spec_hash, request.instruction, request.reference_ids, fresh)
    return scores, set(cached)


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
    ids = [str(c) for c in candidate_ids]
    if len(set(ids)) != len(ids):
        dupes = sorted(c for c, n in Counter(ids).items() if n > 1)
        raise ValueError(f"candidate ids repeat in the first-stage ranking: {dupes[:5]}")
    if first_stage_scores is not None and len(first_stage_scores) != len(ids):
        raise ValueError(f"{len(first_stage_scores)} first-stage scores for {len(ids)} candidates")
    if not isinstance(top_n, int) or top_n < 0:
        raise ValueError(f"top_n must be a non-negative integer, got {top_n!r}")

    block = ids[:top_n]
    spec_hash = reranker.spec_hash()
    if cache is not None and block:
        cache.register_spec(spec_hash, reranker.spec)
    scores, from_cache = score_candidates(request, block, load_image, reranker, cache, spec_hash)
    order = order_top_block([scores[c] for c in block])
    new_order = [block[i] for i in order] + ids[len(block) :]
    first_rank = {c: r for r, c in enumerate(ids)}

    items = []
    for new_rank, cid in enumerate(new_order):
        r0 = first_rank[cid]
        s = scores.get(cid)
        items.append(
            RerankedItem(
                candidate_id=cid,
                first_stage_rank=r0,
                first_stage_score=None if first_stage_scores is None else float(first_stage_scores[r0]),
                p_yes=s.p_yes if s else None,
                new_rank=new_rank,
                flag=s.flag if s else None,
                logit_yes=s.logit_yes if s else None,
                logit_no=s.logit_no if s else None,
                reranked=s is not None,
                from_cache=cid in from_cache,
            )
        )
    return items


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
) -> RunRerank:
    """Rerank every query of `run`. `queries` are objects with query_id, reference_ids
    and instruction (e.g. `cir_demo.benchmarks.schema.Query`); queries without a
    ranking in `run` are skipped."""
    from tqdm import tqdm

    todo = [q for q in queries if q.query_id in run]
    new_run: dict[str, list[str]] = {}
    items: dict[str, list[RerankedItem]] = {}
    t0 = time.perf_counter()
    for q in tqdm(todo, desc=f"rerank top {top_n}", unit="query", disable=not progress):
        try:
            refs = [load_image(r) for r in q.reference_ids]
        except Exception as exc:
            raise RuntimeError(f"query {q.query_id}: cannot load reference image(s) {list(q.reference_ids)}: {exc}") from exc
        request = RerankRequest(refs, q.reference_ids, q.instruction)
        scores = None if run_scores is None else run_scores.get(q.query_id)
        its = rerank(request, run[q.query_id], scores, load_image, reranker, top_n=top_n, cache=cache)
        items[q.query_id] = its
        new_run[q.query_id] = [it.candidate_id for it in its]
    flat = [it for its in items.values() for it in its if it.reranked]
    stats = {
        "queries": len(items),
        "candidates_scored": len(flat),
        "from_cache": sum(it.from_cache for it in flat),
        "tokens_missing": sum(it.flag is not None and not it.flag.startswith(FLAG_ERROR_PREFIX) for it in flat),
        "errors": sum(it.flag is not None and it.flag.startswith(FLAG_ERROR_PREFIX) for it in flat),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return RunRerank(new_run, items, reranker.spec, reranker.spec_hash(), top_n, stats)
