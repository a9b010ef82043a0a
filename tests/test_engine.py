"""`RetrievalEngine`, the one path from a query to a (reranked) ranking, against oracles that do
not go through it: a brute-force ranking of the index's own vectors, and the reranker asked about
each candidate alone (no batching, no cache)."""

from __future__ import annotations

import numpy as np
import pytest


from cir_demo.rerank import RerankRequest
from cir_demo.testing.explorer import VERIFIER

GROUPS = 20


@pytest.fixture(scope="module")
def engine(tiny_setup, tmp_path_factory):
    from cir_demo.benchmarks.registry import load_benchmark
    from cir_demo.engine import RetrievalEngine

    _, names = tiny_setup
    bench = load_benchmark("world", size="tiny").limit(GROUPS)
    eng = RetrievalEngine(bench, names, progress=False)
    eng.use_score_cache(tmp_path_factory.mktemp("engine") / "scores.sqlite")
    yield eng
    eng.close()


def brute_force(engine, name, cq, k):
    """Every corpus vector stored in the index against the query's vector(s); a candidate's score
    is its best over the query's variants; stable order (ties keep corpus order)."""
    index = engine.index(name)
    xb = index.index.reconstruct_n(0, index.index.ntotal)
    variants = engine.retriever(name).encode_query_variants([cq])[0]
    scores = (xb @ np.asarray(variants).T).max(axis=1)
    order = np.argsort(-scores, kind="stable")[:k]
    return [index.ids[i] for i in order], scores[order]


def alone(engine, cq, candidate_id):
    """The verifier's margin (logit yes - logit no) for one candidate, asked on its own."""
    reranker = engine.reranker(VERIFIER)
    request = RerankRequest(cq.reference_images, cq.reference_ids, cq.text)
    (score,) = reranker.score(request, [candidate_id], [engine.open_image(candidate_id)])
    return score.margin()


def test_search_matches_brute_force(engine):
    for name in engine.retriever_names:
        queries = engine.benchmark.queries[:6]
        got = engine.search(name, [engine.composed(q) for q in queries], k=15)
        for q, ranking in zip(queries, got):
            ids, scores = brute_force(engine, name, engine.composed(q), 15)
            assert ranking.scores == pytest.approx(list(scores), abs=1e-5), name
            # the same ids at every rank, except between scores equal to float precision
            unique = [i for i, s in enumerate(scores) if np.sum(np.abs(scores - s) < 1e-5) == 1]
            assert len(unique) > 10 and [ranking.ids[i] for i in unique] == [ids[i] for i in unique], name


def test_run_benchmark_is_search_per_query(engine):
    name = engine.retriever_names[0]
    run, scores = engine.run_benchmark(name, k=20, batch_size=5)
    assert list(run) == [q.query_id for q in engine.benchmark.queries]
    for q in engine.benchmark.queries[::7]:
        one = engine.search(name, [engine.composed(q)], k=20)[0]
        assert run[q.query_id] == one.ids and scores[q.query_id] == pytest.approx(one.scores, abs=1e-6)


def test_rerank_equals_scoring_each_candidate_alone(engine):
    name, top_n = engine.retriever_names[0], 8
    q = next(q for q in engine.benchmark.queries if len(q.reference_ids) == 2)
    cq = engine.composed(q)
    first = engine.search(name, [cq], k=30)[0]
    items = engine.rerank(VERIFIER, cq, first, top_n=top_n)
    margins = [alone(engine, cq, c) for c in first.ids[:top_n]]
    expected = [first.ids[i] for i in sorted(range(top_n), key=lambda i: -margins[i])] + first.ids[top_n:]
    assert [it.candidate_id for it in items] == expected
    assert [it.first_stage_rank for it in items[top_n:]] == list(range(top_n, len(first.ids)))
    for it in items[:top_n]:
        assert it.reranked and it.p_yes == pytest.approx(1 / (1 + np.exp(-margins[first.ids.index(it.candidate_id)])))


def test_rerank_run_equals_reranking_each_query(engine, tmp_path):
    name, top_n = engine.retriever_names[1], 5
    queries = engine.benchmark.queries[:10]
    run, scores = engine.run_benchmark(name, queries=queries, k=20)
    whole = engine.rerank_run(VERIFIER, run, scores, queries=queries, top_n=top_n)
    assert set(whole.run) == {q.query_id for q in queries}
    for q in queries:
        cq = engine.composed(q)
        margins = [alone(engine, cq, c) for c in run[q.query_id][:top_n]]
        block = [run[q.query_id][i] for i in sorted(range(top_n), key=lambda i: -margins[i])]
        assert whole.run[q.query_id] == block + run[q.query_id][top_n:]


def test_prescore_fills_the_cache_the_rerank_reads(engine, tmp_path):
    engine.use_score_cache(tmp_path / "fresh.sqlite")
    q = engine.benchmark.queries[3]
    cq = engine.composed(q)
    rankings = [engine.search(n, [cq], k=20)[0] for n in engine.retriever_names[:2]]
    union = list(dict.fromkeys(rankings[0].ids[:6] + rankings[1].ids[:6]))
    engine.prescore(VERIFIER, cq, union)
    for ranking in rankings:
        items = engine.rerank(VERIFIER, cq, ranking, top_n=6)
        assert all(it.from_cache for it in items[:6])  # nothing left to compute
        margins = [alone(engine, cq, c) for c in ranking.ids[:6]]
        assert [it.candidate_id for it in items[:6]] == [
            ranking.ids[i] for i in sorted(range(6), key=lambda i: -margins[i])
        ]


def assert_brute_force(ranking, ids, scores, where=""):
    assert ranking.scores == pytest.approx(list(scores), abs=1e-5), where
    unique = [i for i, s in enumerate(scores) if np.sum(np.abs(scores - s) < 1e-5) == 1]
    assert len(unique) > len(ids) // 2 and [ranking.ids[i] for i in unique] == [ids[i] for i in unique], where


def test_one_query_cache_answers_the_brute_force_ranking(engine, monkeypatch):
    """One query at a time (the app) is searched once per (retriever, text, references, depth): the answer
    served from the cache is the brute-force ranking; a caller editing its copy changes no later answer;
    another depth or another instruction is searched, never answered from another key."""
    name = engine.retriever_names[0]
    q = engine.benchmark.queries[3]
    first = engine.search(name, [engine.composed(q)], k=12)[0]
    first.ids.reverse()
    first.scores.clear()
    index = engine.index(name)
    searched = []
    real = index.search
    monkeypatch.setattr(index, "search", lambda xq, k: searched.append(k) or real(xq, k))
    again = engine.search(name, [engine.composed(q)], k=12)[0]
    assert searched == []  # from the cache
    assert_brute_force(again, *brute_force(engine, name, engine.composed(q), 12), "cached")
    other = engine.composed(q, instruction=q.instruction + " in red")
    for cq, k in ((engine.composed(q), 7), (other, 12)):
        got = engine.search(name, [cq], k=k)[0]
        assert_brute_force(got, *brute_force(engine, name, cq, k), (cq.text, k))
    assert searched == [7, 12]


def test_images_opened_beside_are_those_the_store_opens(engine, quiet_machine):
    """A run's reference images opened in a forked child (`open_images_beside`) are cached as the very
    pixels the image store gives (the oracle: the store asked directly); one that cannot be opened is left
    to fail where it is needed, with the store's own error."""
    from cir_demo.engine import RetrievalEngine

    fresh = RetrievalEngine(engine.benchmark, engine.retriever_names, progress=False)
    ids = list(dict.fromkeys(r for q in engine.benchmark.queries[:12] for r in q.reference_ids))
    adopt = fresh.open_images_beside(ids + ["no-such-image"])
    adopt()
    adopt()  # a second call waits for nothing
    store = engine.benchmark.images
    for image_id in ids:
        cached = fresh._images.get(image_id)
        direct = store.open(image_id)
        assert cached is not None and cached.mode == direct.mode and cached.tobytes() == direct.tobytes()
        assert fresh.open_image(image_id) is cached  # served from the cache, not opened again
    assert fresh._images.get("no-such-image") is None
    with pytest.raises(KeyError) as direct_error:
        store.open("no-such-image")
    with pytest.raises(KeyError) as later_error:
        fresh.open_image("no-such-image")
    assert str(later_error.value) == str(direct_error.value)


def test_the_tiny_modules_tokenizer_is_built_once_and_tokenizes_as_a_fresh_one(engine, tiny_setup):
    """conftest.py's `each_tokenizer_built_once` (installed by `tiny_setup`) against open_clip's own
    `get_tokenizer`, which builds a new tokenizer on each call."""
    import open_clip
    import torch
    from open_clip import factory

    _, names = tiny_setup
    model = "cir-demo-tiny-clip"  # the tiny models' open_clip config (cir_demo/testing/tiny_retrievers.py)
    shared = open_clip.get_tokenizer(model)
    assert open_clip.get_tokenizer(model) is shared
    assert all(engine.retriever(name).encoder.tokenizer is shared for name in names)  # each recipe's load
    fresh = factory.get_tokenizer(model)
    assert fresh is not shared
    texts = ["make it red", "the bag of <img1> in the colour of <img2>", "", "red " * 100]
    for _ in range(2):  # the second time from the shared one's own memo of its encodings
        assert torch.equal(shared(texts), fresh(texts))
    shorter = open_clip.get_tokenizer(model, context_length=16)
    assert shorter is not shared and shorter(texts).shape == (4, 16)
    assert torch.equal(shorter(texts), factory.get_tokenizer(model, context_length=16)(texts))
