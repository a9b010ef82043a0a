"""Per-query metrics, failure measures and failure sorts (cir_demo/explorer/failures.py,
ranking_metrics.py) against hand computation and loops; failure statistics read from an eval run."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from cir_demo.benchmarks.schema import Judgments, Query
from cir_demo.benchmarks.families import metric_family
from cir_demo.explorer import ServiceError, SortContext, query_metrics, sort_rows
from cir_demo.testing.explorer import build_tiny_service


def make_query(qid, positives, negatives, refs=("r1",), group="g1", **meta):
    return Query(qid, tuple(refs), f"instruction {qid}", group, Judgments(tuple(positives), tuple(negatives)), meta)


def test_query_metrics_match_hand_computation():
    q = make_query("q1", positives=["a", "b", "c"], negatives=["n1", "n2"])
    ranking = ["a", "n1", "x", "b", "y", "z", "w", "v", "u", "t", "c"]  # c is 11th: outside the top 10
    m = query_metrics(ranking, q)
    # AP@10 = (1/1 + 2/4) / min(3, 10) ; P@10 = 2/10 ; NegRecall@10 = 1 / min(2, 10)
    assert m["AP@10"] == pytest.approx((1.0 + 0.5) / 3)
    assert m["precision@10"] == pytest.approx(0.2)
    assert m["NegRecall@10"] == pytest.approx(0.5)
    assert all(np.isnan(v) for v in query_metrics([], q).values())  # an empty ranking is not scored


def long_frame(rows):
    return pd.DataFrame(rows, columns=["run", "query_id", "group_id", "AP@10", "precision@10", "NegRecall@10", "n_neg"])


def pinpoint_context(qids, groups, n_refs, runs, n_neg, reranked=False) -> SortContext:
    table = pd.DataFrame(
        {
            "query_id": qids,
            "group_id": [groups[q] for q in qids],
            "instruction": "",
            "n_refs": [n_refs[q] for q in qids],
            "n_negatives": [n_neg[q] for q in qids],
            "n_subset": 0,
        }
    )
    return SortContext(metric_family("pinpoint"), table, list(runs), dict(runs), reranked)


def test_pinpoint_sorts_against_loops():
    """negatives, spread, two-image, shortcut and the reranker sorts on random per-query rows with ties,
    against loops over the same numbers (ties keep benchmark order)."""
    rng = np.random.default_rng(3)
    runs = {"m-fusion": "composed", "m-image": "image", "m-text": "text", "m-cir": "composed"}
    qids = [f"q{i}" for i in range(12)]
    groups = {q: f"g{i // 3}" for i, q in enumerate(qids)}
    n_refs = {q: 1 + (i % 2) for i, q in enumerate(qids)}
    n_neg = {q: int(rng.integers(0, 15)) for q in qids}
    rows, ap, negr = [], {}, {}
    for run in [*runs, "m-fusion+rerank", "m-cir+rerank"]:
        for q in qids:
            a = float(rng.choice([0.0, 0.25, 0.5, 1.0]))  # coarse values: ties on purpose
            denom = min(n_neg[q], 10)
            nr = (int(rng.integers(0, denom + 1)) / denom) if denom else 0.0
            ap[run, q], negr[run, q] = a, nr
            rows.append((run, q, groups[q], a, 0.0, nr, n_neg[q]))
    ctx = pinpoint_context(qids, groups, n_refs, runs, n_neg, reranked=True)
    pq = long_frame(rows)

    def got(sort):
        return list(sort_rows(ctx.table, pq, sort, ctx)[0]["query_id"])

    def expect(measure, keep):  # highest measure first, ties in benchmark order
        return sorted([q for q in qids if keep(measure(q))], key=lambda q: (-measure(q), qids.index(q)))

    negs = lambda q: max(round(negr[r, q] * min(n_neg[q], 10)) for r in runs)  # noqa: E731
    assert got("negatives") == expect(negs, lambda v: v > 0)
    members = lambda q: [p for p in qids if groups[p] == groups[q]]  # noqa: E731
    spread = lambda q: max(max(ap[r, p] for p in members(q)) - min(ap[r, p] for p in members(q)) for r in runs)  # noqa: E731
    assert got("spread") == expect(spread, lambda v: v > 0)
    shortcut = lambda q: max(ap["m-image", q], ap["m-text", q]) - max(ap["m-fusion", q], ap["m-cir", q])  # noqa: E731
    assert got("shortcut") == expect(shortcut, lambda v: v > 0)
    gain = lambda q: max(ap[f"{r}+rerank", q] - ap[r, q] for r in ("m-fusion", "m-cir"))  # noqa: E731
    loss = lambda q: min(ap[f"{r}+rerank", q] - ap[r, q] for r in ("m-fusion", "m-cir"))  # noqa: E731
    assert got("rerank_helped") == expect(gain, lambda v: v > 0)
    assert got("rerank_hurt") == expect(lambda q: -loss(q), lambda v: v > 0)
    mean = lambda q: -np.mean([ap[r, q] for r in runs])  # noqa: E731
    two = [q for q in expect(mean, lambda v: True) if n_refs[q] == 2]
    # two-image: lowest mean AP@10 first, ties by the mean precision@10 (all 0 here), then benchmark order
    assert got("two_image") == two
    assert got("worst") == expect(mean, lambda v: True)
    assert len(set(got("negatives"))) > 3 and len(got("rerank_helped")) > 2  # the orders compared are informative
    rows_, _ = sort_rows(ctx.table, pq, "negatives", ctx)
    top = rows_["query_id"].iloc[0]
    assert rows_["why"].iloc[0].startswith(f"{negs(top)} explicit negative")


def test_unknown_and_unavailable_sorts_are_one_clear_error():
    qids = ["q1", "q2"]
    ctx = pinpoint_context(qids, {q: "g" for q in qids}, {q: 1 for q in qids}, {"a": "composed"}, {q: 0 for q in qids})
    pq = long_frame([("a", "q1", "g", 0.5, 0.1, 0.0, 0), ("a", "q2", "g", 0.2, 0.1, 0.0, 0)])
    with pytest.raises(ServiceError, match="unknown sort 'negative'; this benchmark offers: benchmark, worst"):
        sort_rows(ctx.table, pq, "negative", ctx)
    with pytest.raises(ServiceError, match="returns nothing here: no query of this benchmark has explicit negatives"):
        sort_rows(ctx.table, pq, "negatives", ctx)
    with pytest.raises(ServiceError, match="no reranker ran"):
        sort_rows(ctx.table, pq, "rerank_helped", ctx)
    assert list(sort_rows(ctx.table, pq, "benchmark", ctx)[0]["query_id"]) == qids


def test_failure_stats_reuse_a_matching_eval_run(tiny_setup, tmp_path, monkeypatch):
    """An eval run recording the runs' keys (benchmark content, retriever specs, depths, code) supplies
    the per-query results (its numbers are used as written); one with another spec, or whose runs
    were ranked to another depth, is ignored. The sorts it supplies are offered at once
    (`stored_sorts`), before any background run."""
    from cir_demo.store.store import recorded_keys
    from cir_demo.utils.io import write_json_atomic

    root, names = tiny_setup
    svc = build_tiny_service(names[:2], reranker="none")
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))  # no per-query cache of other tests
    assert svc.stored_sorts() == set()
    runs_root = root / "runs"
    good, stale, shallow = (runs_root / f"20990101-00000{i}-world" for i in range(3))
    table = svc.table
    folders = ((good, {}, 0), (stale, {"recipe": "changed"}, 0), (shallow, {}, -30))
    for folder, spec_tweak, depth_change in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.csv").write_text("model,mAP@10\nx,0.1\n")
        specs = {n: {**svc.engine.retriever(n).spec, **spec_tweak} for n in names[:2]}
        depths = {n: svc.engine.eval_depth(n) + depth_change for n in names[:2]}
        write_json_atomic(
            folder / "run_info.json",
            {
                "benchmark": "world",
                "benchmark_fingerprint": svc.fingerprint,
                "retrievers": specs,
                "reranker": None,
                "run_keys": recorded_keys(svc.benchmark, specs, depths, None, 20),
            },
        )
        rows = []
        for n in names[:2]:
            for i, (q, g) in enumerate(zip(table["query_id"], table["group_id"])):
                neg = 1.0 if (folder == good and n == names[0] and i == 5) else 0.0
                rows.append((n, q, g, 0.0, 0.0, neg, 10))
        long_frame(rows).to_csv(folder / "per_query.csv", index=False)
    os.utime(stale, None)  # the stale runs are the newest: they must still be skipped
    os.utime(shallow, None)
    try:
        offered = svc.stored_sorts()
        assert {"negatives", "spread", "two_image", "shortcut", "worst", f"diff:{names[0]},{names[1]}"} <= offered
        assert not {"rerank_helped", "rerank_hurt", "order"} & offered  # no reranker: no rerank sorts
        stats = svc.failure_stats()
        assert svc.failure_source == good.name
        assert stats["NegRecall@10"].sum() == 1.0  # the run's numbers, as written
        assert svc.find_queries("", {}, "negatives").rows["query"].tolist() == [table["query_id"][5]]
    finally:
        svc.engine.close()
        for folder in (good, stale, shallow):
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
