"""Per-query metrics, failure measures and failure sorts (cir_demo/explorer/failures.py,
ranking_metrics.py) against hand computation and loops; failure statistics read from an eval run."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from cir_demo.benchmarks.schema import Judgments, Query
from cir_demo.explorer import ServiceError, failure_scores, query_metrics, sort_queries
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


def test_failure_scores_against_loops():
    rng = np.random.default_rng(3)
    runs = {"m-fusion": "composed", "m-image": "image", "m-text": "text", "m-cir": "composed"}
    qids = [f"q{i}" for i in range(12)]
    groups = {q: f"g{i // 3}" for i, q in enumerate(qids)}
    n_neg = {q: int(rng.integers(0, 15)) for q in qids}
    rows, ap, negr = [], {}, {}
    for run in [*runs, "m-fusion+rerank", "m-cir+rerank"]:
        for q in qids:
            a = float(rng.choice([0.0, 0.25, 0.5, 1.0]))  # coarse values: ties on purpose
            denom = min(n_neg[q], 10)
            nr = (int(rng.integers(0, denom + 1)) / denom) if denom else 0.0
            ap[run, q], negr[run, q] = a, nr
            rows.append((run, q, groups[q], a, 0.0, nr, n_neg[q]))
    got = failure_scores(long_frame(rows), runs)
    for q in qids:
        negs = {r: round(negr[r, q] * min(n_neg[q], 10)) for r in runs}
        assert got.loc[q, "neg_top10"] == max(negs.values())
        assert negs[got.loc[q, "neg_who"]] == max(negs.values())
        members = [p for p in qids if groups[p] == groups[q]]
        spread = max(max(ap[r, p] for p in members) - min(ap[r, p] for p in members) for r in runs)
        assert got.loc[q, "spread"] == pytest.approx(spread)
        best_uni = max(ap["m-image", q], ap["m-text", q])
        best_comp = max(ap["m-fusion", q], ap["m-cir", q])
        assert got.loc[q, "shortcut"] == pytest.approx(best_uni - best_comp)
        deltas = [ap[f"{r}+rerank", q] - ap[r, q] for r in ("m-fusion", "m-cir")]
        assert got.loc[q, "rerank_gain"] == pytest.approx(max(deltas))
        assert got.loc[q, "rerank_loss"] == pytest.approx(min(deltas))
        assert got.loc[q, "mean_ap"] == pytest.approx(np.mean([ap[r, q] for r in runs]))


def test_failure_scores_without_unimodal_or_reranked_runs():
    rows = [("a", "q1", "g", 0.5, 0.1, 0.0, 3), ("b", "q1", "g", 0.2, 0.1, 0.0, 3)]
    got = failure_scores(long_frame(rows), {"a": "composed", "b": "composed"})
    assert "shortcut" not in got and "rerank_gain" not in got
    with pytest.raises(ServiceError, match="no per-query results"):
        failure_scores(long_frame(rows), {"zzz": "composed"})


def test_sort_queries_orders_and_keeps_failures_only():
    table = pd.DataFrame({"query_id": ["q1", "q2", "q3", "q4"], "instruction": ["a", "b", "c", "d"],
                          "n_refs": [1, 2, 2, 1], "group_id": ["g1", "g1", "g2", "g2"]})
    scores = pd.DataFrame({"neg_top10": [0, 3, 3, 5], "neg_who": ["m"] * 4, "spread": [0.5, 0.5, 0.0, 0.0],
                           "spread_who": ["m"] * 4, "mean_ap": [0.1, 0.4, 0.2, 0.0],
                           "shortcut": [-0.1, 0.2, 0.0, 0.3], "shortcut_who": ["i"] * 4, "shortcut_vs": ["c"] * 4,
                           "rerank_gain": [0.1, 0.0, -0.2, 0.3], "rerank_gain_who": ["m"] * 4,
                           "rerank_loss": [-0.4, 0.0, -0.2, 0.1], "rerank_loss_who": ["m"] * 4},
                          index=pd.Index(["q1", "q2", "q3", "q4"], name="query_id"))
    order = lambda key: list(sort_queries(table, scores, key)[0]["query_id"])  # noqa: E731
    assert order("order") == ["q1", "q2", "q3", "q4"]
    assert order("negatives") == ["q4", "q2", "q3"]  # ties (q2, q3) keep benchmark order; q1 has none
    assert order("spread") == ["q1", "q2"]
    assert order("two_image") == ["q3", "q2"]  # lowest mean AP@10 first
    assert order("shortcut") == ["q4", "q2"]
    assert order("rerank_helped") == ["q4", "q1"]
    assert order("rerank_hurt") == ["q1", "q3"]
    rows, _ = sort_queries(table, scores, "negatives")
    assert rows["why"].iloc[0] == "5 explicit negatives in the top 10 (m)"
    with pytest.raises(KeyError, match="(?i)did you mean"):
        sort_queries(table, scores, "negative")
    with pytest.raises(ServiceError, match="reranked results"):
        sort_queries(table, scores.drop(columns=["rerank_gain", "rerank_gain_who"]), "rerank_helped")



def test_failure_stats_reuse_a_matching_eval_run(tiny_setup, tmp_path, monkeypatch):
    """An eval run with the same benchmark content and retriever specs supplies the per-query
    results (its numbers are used as written); one with another spec is ignored. The sorts it
    supplies are offered at once (`stored_sorts`), before any background run."""
    from cir_demo.utils.io import write_json_atomic

    root, names = tiny_setup
    svc = build_tiny_service(names[:2], reranker="none")
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))  # no per-query cache of other tests
    assert svc.stored_sorts() == set()
    runs_root = root / "runs"
    good, stale = runs_root / "20990101-000000-world", runs_root / "20990101-000001-world"
    table = svc.table
    for folder, spec_tweak in ((good, {}), (stale, {"recipe": "changed"})):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.csv").write_text("model,mAP@10\nx,0.1\n")
        specs = {n: {**svc.engine.retriever(n).spec, **spec_tweak} for n in names[:2]}
        write_json_atomic(folder / "run_info.json", {"benchmark": "world", "benchmark_fingerprint": svc.fingerprint,
                                                     "retrievers": specs, "reranker": None})
        rows = []
        for n in names[:2]:
            for i, (q, g) in enumerate(zip(table["query_id"], table["group_id"])):
                neg = 1.0 if (folder == good and n == names[0] and i == 5) else 0.0
                rows.append((n, q, g, 0.0, 0.0, neg, 10))
        long_frame(rows).to_csv(folder / "per_query.csv", index=False)
    os.utime(stale, None)  # the stale run is the newest: it must still be skipped
    try:
        assert svc.stored_sorts() == {"negatives", "spread", "two_image", "shortcut"}  # no reranker: no rerank sorts
        stats = svc.failure_stats()
        assert svc.failure_source == good.name
        assert stats["neg_top10"].sum() == 10 and stats.loc[table["query_id"][5], "neg_top10"] == 10
        assert svc.find_queries("", {}, "negatives").rows["query"].tolist() == [table["query_id"][5]]
    finally:
        svc.engine.close()
        for folder in (good, stale):
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
