"""`ExplorerService` on the tiny world with tiny real models (cir_demo/explorer/service.py), against
independent oracles: brute-force retrieval over the index vectors, the reranker called directly,
per-paraphrase comparisons, loops over rankings for the failure statistics."""

from __future__ import annotations

import numpy as np
import pytest


from cir_demo.benchmarks.registry import get_spec
from cir_demo.explorer import ServiceError, filter_queries, filter_value, query_metrics, validate_upload
from cir_demo.explorer.config import NO_VALUE
from cir_demo.testing.explorer import VERIFIER, build_tiny_service


def test_filter_queries_against_brute_force(service):
    table = service.table
    rng = np.random.default_rng(0)
    choices = service.filter_choices()
    for _ in range(25):
        filters = {k: (rng.choice(v) if rng.random() < 0.5 else None) for k, v in choices.items()}
        word = rng.choice(["", "bag", "THE", "w0001", "not pink"])
        got = list(filter_queries(table, word, filters)["query_id"])
        expected = []
        for q in service.benchmark.queries:
            if any(v is not None and filter_value(k, q.meta.get(k)) != v for k, v in filters.items()):
                continue
            hay = f"{q.instruction} {q.query_id} {q.group_id}".lower()
            if all(w in hay for w in word.lower().split()):
                expected.append(q.query_id)
        assert got == expected
    assert set(choices["is_single"]) == {"single image", "two images"}
    assert choices["skin_tone_bucket"][-1] == NO_VALUE
    # skin tones read as PinPoint's buckets with their Monk ranges, lightest first
    buckets = [v for v in choices["skin_tone_bucket"] if v != NO_VALUE]
    monk = {
        "lightest (Monk 1-3)": 0,
        "second lightest (Monk 4-5)": 1,
        "second darkest (Monk 6-7)": 2,
        "darkest (Monk 8-10)": 3,
    }
    assert set(buckets) <= set(monk) and buckets == sorted(buckets, key=monk.get) and len(buckets) >= 2
    assert filter_value("skin_tone_bucket", "SECOND_DARKEST") == "second darkest (Monk 6-7)"
    with pytest.raises(ServiceError, match="unknown filter"):
        filter_queries(table, "", {"colour": "red"})


def brute_force_top(service, name, cq, k):
    """Oracle: the query vector against every corpus vector stored in the index, exact scores."""
    index = service.engine.index(name)
    xb = index.index.reconstruct_n(0, index.index.ntotal)
    q = service.engine.retriever(name).encode_queries([cq])[0]
    scores = xb @ q
    order = np.argsort(-scores, kind="stable")[:k]
    return [index.ids[i] for i in order], scores[order]


def test_compare_matches_brute_force_and_judgments(service):
    names = service.retriever_names
    query = next(q for q in service.benchmark.queries if len(q.reference_ids) == 2)
    cmp = service.compare(query.query_id, names, k=10)
    assert [c.retriever for c in cmp.columns] == names and cmp.judged
    assert [c.modality for c in cmp.columns] == ["composed", "image", "text", "composed"]
    cq = service.engine.composed(query)
    for col in cmp.columns:
        assert col.error is None and len(col.tiles) == 10
        ids, scores = brute_force_top(service, col.retriever, cq, 10)
        assert [t.image_id for t in col.tiles] == ids
        assert [t.score for t in col.tiles] == pytest.approx(list(scores), abs=1e-5)
        assert [t.rank for t in col.tiles] == list(range(1, 11))
        for t in col.tiles:
            expected = (
                "positive" if t.image_id in query.positives else "negative" if t.image_id in query.negatives else None
            )
            assert t.judgment == expected and t.thumb.startswith("data:image/jpeg;base64,")
        full = service.engine.search(col.retriever, [cq], k=50)[0].ids
        assert col.metrics == pytest.approx(query_metrics(full, query))
    assert cmp.n_positives == len(query.positives) and len(cmp.reference_thumbs) == 2


def test_compare_k_and_input_checks(service):
    q = service.benchmark.queries[0].query_id
    assert all(len(c.tiles) == 5 for c in service.compare(q, service.retriever_names[:2], k=5).columns)
    with pytest.raises(ServiceError, match="no query"):
        service.compare("nope", None)
    with pytest.raises(ServiceError, match="unknown retriever"):
        service.compare(q, ["world-cir-typo"])
    twice = service.compare(q, service.retriever_names + service.retriever_names[:1])  # a name twice: one column
    assert [c.retriever for c in twice.columns] == list(service.retriever_names)
    with pytest.raises(ServiceError, match="results per column"):
        service.compare(q, None, k=0)
    with pytest.raises(ServiceError, match="top n"):
        service.compare(q, None, rerank=True, top_n=0)


def test_compare_with_reranker_matches_rerank_and_reports_movement(service):
    from cir_demo.rerank import RerankRequest, rerank

    name = service.retriever_names[0]
    query = service.benchmark.queries[7]
    cmp = service.compare(query.query_id, [name], k=10, rerank=True, top_n=15)
    col = cmp.columns[0]
    cq = service.engine.composed(query)
    first = service.engine.search(name, [cq], k=50)[0]
    reranker = service.engine.reranker(VERIFIER)
    oracle = rerank(
        RerankRequest(cq.reference_images, cq.reference_ids, cq.text),
        first.ids,
        first.scores,
        service.engine.open_image,
        reranker,
        top_n=15,
    )  # no cache: scores recomputed
    assert [t.image_id for t in col.tiles] == [it.candidate_id for it in oracle[:10]]
    for t, it in zip(col.tiles, oracle):
        assert t.first_stage_rank == it.first_stage_rank + 1
        assert t.moved == it.rank_change
        assert t.p_yes == pytest.approx(it.p_yes)
        assert t.p_near == it.p_near  # a near-miss answer would reach the tile (this verifier has none)
    assert cmp.ranking == "P(yes)"  # the rule of a reranker whose spec names none
    assert set(first.ids[:15]) >= {t.image_id for t in col.tiles}  # only the top 15 can reach the top 10
    assert col.first_stage_metrics == pytest.approx(query_metrics(first.ids, query))
    assert col.metrics == pytest.approx(query_metrics([it.candidate_id for it in oracle], query))
    assert cmp.reranker == VERIFIER and cmp.top_n == 15


def test_paraphrase_table_matches_per_paraphrase_compare(service):
    names = service.retriever_names[:2]
    qid = service.benchmark.queries[12].query_id
    table = service.paraphrase_table(qid, names)
    group = service.benchmark.paraphrases(qid)
    assert len(table) == len(group) + 1 and list(table.columns) == ["paraphrase", *names, "instruction"]
    for i, p in enumerate(group):
        cmp = service.compare(p.query_id, names, k=10)
        for col in cmp.columns:
            assert table.loc[i, col.retriever] == pytest.approx(col.metrics["AP@10"])
    for n in names:
        assert table.iloc[-1][n] == pytest.approx(table[n].iloc[:-1].max() - table[n].iloc[:-1].min())


def test_remembered_work_gives_the_same_answers(service):
    """Per-view work is remembered (metrics by ranking, the shown paraphrase table, the query
    list in benchmark order): a second answer equals the first and a freshly computed one."""
    names = service.retriever_names[:2]
    qid = service.benchmark.queries[7].query_id
    for rerank in (False, True):
        first = service.compare(qid, names, k=10, rerank=rerank, top_n=15)
        again = service.compare(qid, names, k=10, rerank=rerank, top_n=15)
        for a, b in zip(first.columns, again.columns):
            assert a.metrics == b.metrics and a.first_stage_metrics == b.first_stage_metrics
            assert a.metrics == pytest.approx(query_metrics(a.ranking, service.query(qid)))
            a.metrics["AP@10"] = -1.0  # a caller changing its copy leaves the remembered metrics alone
        assert service.compare(qid, names, k=10, rerank=rerank, top_n=15).columns[0].metrics == again.columns[0].metrics
    shown = service.paraphrase_table(qid, names, shown=True)
    full = service.paraphrase_table(qid, names)
    assert shown.equals(full.drop(columns=["instruction"]).round(3))
    assert service.paraphrase_table(qid, names, shown=True) is shown  # made once per intent
    filters = {"domain": service.filter_choices()["domain"][0]}
    listed = service.find_queries("bag", filters)
    assert service.find_queries("bag", filters) is listed
    assert list(listed.rows["query"]) == list(filter_queries(service.table, "bag", filters)["query_id"])
    assert len(service.find_queries("bag").rows) >= len(listed.rows)  # other filters: another list


def test_uploaded_world_image_ranks_like_the_benchmark_query(service, tmp_path):
    query = service.benchmark.queries[3]
    path = tmp_path / "ref.png"
    service.engine.open_image(query.reference_ids[0]).save(path)  # PNG: the same pixels
    upload = validate_upload(path)
    got = service.search_uploads([upload], query.instruction, service.retriever_names, k=10)
    expected = service.compare(query.query_id, service.retriever_names, k=10)
    for a, b in zip(got.columns, expected.columns):
        assert [t.image_id for t in a.tiles] == [t.image_id for t in b.tiles]
        assert all(t.judgment is None for t in a.tiles) and a.metrics == {}
    assert not got.judged and get_spec("world").upload_note in got.notes
    reranked = service.search_uploads(
        [upload], query.instruction, service.retriever_names[:1], k=10, rerank=True, top_n=10
    )
    assert all(t.p_yes is not None for t in reranked.columns[0].tiles)
    with pytest.raises(ServiceError, match="instruction"):
        service.search_uploads([upload], "  ", None)
    with pytest.raises(ServiceError, match="<img2>"):
        service.search_uploads([upload], "<img1> in the colour of <img2>", None)


def test_failure_stats_computed_match_rankings(service):
    """The per-query rows computed here are the rankings' metrics; the sorts read them (negatives, shortcut)."""
    stats = service.failure_stats()
    assert "computed here" in service.failure_source
    queries = service.benchmark.queries[:30]
    runs = {n: service.engine.run_benchmark(n, queries=queries, k=50)[0] for n in service.retriever_names}
    rows = stats.set_index(["run", "query_id"])
    negs, margin = {}, {}
    for q in queries:
        counts = {n: sum(i in set(q.negatives) for i in runs[n][q.query_id][:10]) for n in runs}
        negs[q.query_id] = max(counts.values())
        aps = {n: query_metrics(runs[n][q.query_id], q)["AP@10"] for n in runs}
        for n in runs:
            assert rows.loc[(n, q.query_id), "AP@10"] == pytest.approx(aps[n], abs=1e-6)  # per_query.csv's 6 places
        uni = max(aps["tiny-ui-image"], aps["tiny-ui-text"])
        margin[q.query_id] = uni - max(aps["tiny-ui-fusion"], aps["tiny-ui-slerp"])
    listed = service.find_queries("", {}, sort="negatives", limit=10_000)
    firsts = [k for k in listed.rows["query"] if k in negs]
    assert sorted(firsts) == sorted(k for k, v in negs.items() if v > 0)
    assert [negs[k] for k in firsts] == sorted((negs[k] for k in firsts), reverse=True)
    shortcut = [k for k in service.find_queries("", {}, sort="shortcut", limit=10_000).rows["query"] if k in margin]
    assert sorted(shortcut) == sorted(k for k, v in margin.items() if v > 0)


def test_reranker_unavailable_is_explained(tiny_setup):
    _, names = tiny_setup
    svc = build_tiny_service(names[:1], reranker="none")
    try:
        with pytest.raises(ServiceError, match="disabled"):
            svc.compare(svc.benchmark.queries[0].query_id, None, rerank=True)
        assert "disabled" in svc.reranker_prompt("x", 1)
    finally:
        svc.engine.close()


def test_query_view_and_listing(service):
    q = next(q for q in service.benchmark.queries if len(q.reference_ids) == 2)
    view = service.query_view(q.query_id)
    assert [p.query_id for p in view.paraphrases] == [p.query_id for p in service.benchmark.paraphrases(q.query_id)]
    assert view.paraphrases[view.paraphrase_index].query_id == q.query_id
    assert len(view.reference_thumbs) == 2 and all(t.startswith("data:image/jpeg") for t in view.reference_thumbs)
    assert ("Reference images", "two images") in view.facts
    listed = service.find_queries("", {"is_single": "two images"}, "two_image")
    assert set(listed.rows["refs"]) == {2}
    assert listed.total == sum(len(x.reference_ids) == 2 for x in service.benchmark.queries)


def test_columns_and_paraphrase_table_rank_the_templated_text_as_eval_does(tiny_setup):
    """A retriever with a query template for the benchmark: the column and the paraphrase table rank the
    template's text (`engine.benchmark_query`), the ranking `--eval`'s `run_benchmark` scores."""
    from cir_demo.retrievers import registry

    _, names = tiny_setup
    cfg = registry.get_config(names[0])
    cfg.update(name="tiny-ui-templated", query_templates={"world": "a picture, then: {instruction}"})
    registry.register_config(cfg, replace=True)
    svc = build_tiny_service(["tiny-ui-templated"], reranker="none", limit_groups=4)
    try:
        name, engine = "tiny-ui-templated", svc.engine
        queries = svc.benchmark.queries[:12]
        assert engine.benchmark_query(name, queries[0]).text == f"a picture, then: {queries[0].instruction}"
        run, _ = engine.run_benchmark(name, queries=queries, k=50)
        plain = [engine.search(name, [engine.composed(q)], k=50)[0].ids for q in queries]
        assert any(p != run[q.query_id] for p, q in zip(plain, queries))  # the template changes rankings here
        for q in queries:
            assert svc.compare(q.query_id, [name], k=10).columns[0].ranking == run[q.query_id]
        group = svc.benchmark.paraphrases(queries[0].query_id)
        table = svc.paraphrase_table(queries[0].query_id, [name])
        group_run, _ = engine.run_benchmark(name, queries=group, k=50)
        want = [query_metrics(group_run[p.query_id], p)["AP@10"] for p in group]
        assert table[name].tolist()[:-1] == pytest.approx(want)
    finally:
        svc.engine.close()
        registry.unregister("tiny-ui-templated")


@pytest.mark.parametrize("rerank", [False, True])
def test_views_without_thumbnails_rank_alike_and_open_no_image(service, monkeypatch, rerank):
    """The API's answers leave thumbnails out (`thumbnails=False`): the same columns, rankings, metrics and
    reranker answers as the page's view with thumbnails (the oracle), and no tile or reference image opened
    for them (on the world each costs a render)."""
    names = service.retriever_names[:2]
    query = service.benchmark.queries[17]
    opened = []
    for store in (service.tiles, service.references):
        get_many = store.get_many
        monkeypatch.setattr(store, "get_many", lambda ids, _g=get_many: opened.append(list(ids)) or _g(ids))
    bare = service.compare(query.query_id, names, k=10, rerank=rerank, top_n=15, thumbnails=False)
    view = service.query_view(query.query_id, thumbnails=False)
    assert opened == []
    assert bare.reference_thumbs == [None] * len(query.reference_ids) and view.reference_thumbs == bare.reference_thumbs
    shown = service.compare(query.query_id, names, k=10, rerank=rerank, top_n=15)
    assert opened  # the page's view does open them
    for a, b in zip(bare.columns, shown.columns):
        assert a.ranking == b.ranking and a.metrics == b.metrics and a.first_stage_metrics == b.first_stage_metrics
        assert [(t.image_id, t.rank, t.p_yes, t.first_stage_rank) for t in a.tiles] == [
            (t.image_id, t.rank, t.p_yes, t.first_stage_rank) for t in b.tiles
        ]
        assert all(t.thumb is None for t in a.tiles) and all(t.thumb.startswith("data:image") for t in b.tiles)
