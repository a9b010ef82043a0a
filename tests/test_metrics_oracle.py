"""Our vectorised metrics against pytrec_eval (trec_eval) on random runs and judgments, ties included.

The run is a run dict `{query: {image: score}}` with many equal scores; we read
it with our results reader (which orders it as trec_eval does) and score it
with our metric modules; pytrec_eval scores the same dict. Where the official
benchmark definitions differ from trec_eval's (PinPoint's and CIRCO's AP@k
divide by min(positives, k), map_cut by the number of positives), the test
converts between the two and says so.
"""

from __future__ import annotations

import json
import random
import warnings

import pytest
import pytrec_eval

from cir_demo.benchmarks.schema import Benchmark, Judgments, Query
from cir_demo.metrics import circo, edir, pinpoint
from cir_demo.results import read_results

POOL = [f"img{i}" for i in range(40)] + ["a", "B", "b", "img1_", "Z"]  # mixed case: byte order matters


def random_case(seed: int, with_unjudged: bool = False):
    rng = random.Random(seed)
    queries, qrels, run = [], {}, {}
    for i in range(rng.randint(5, 25)):
        qid = f"q{i}"
        n_pos = 0 if with_unjudged and rng.random() < 0.2 else rng.randint(1, 8)
        pos = rng.sample(POOL, n_pos)
        neg = rng.sample([p for p in POOL if p not in pos], rng.randint(0, 5))
        queries.append(
            Query(qid, ("ref",), "text", qid, Judgments(tuple(pos), tuple(neg)), target_id=pos[0] if pos else None)
        )
        qrels[qid] = {p: 1 for p in pos} | {n: 0 for n in neg}
        if rng.random() < 0.9:
            levels = rng.choice([2, 3, 10, 1000])  # few levels: many ties
            ranked = rng.sample(POOL, rng.randint(1, len(POOL)))
            run[qid] = {d: float(rng.randrange(levels)) / 4 for d in ranked}
    return queries, qrels, run


def ours(tmp_path, queries, run, family: str):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    bench = Benchmark("t", family, queries, list(POOL))
    rf = read_results(path, bench)
    assert rf.format == "run-dict"
    return rf.run


def official(qrels, run, measures):
    judged = {q: r for q, r in qrels.items() if any(v > 0 for v in r.values())}
    return pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(run)


@pytest.mark.parametrize("seed", range(12))
def test_pinpoint_precision_recall_ap_equal_trec_eval(tmp_path, seed):
    queries, qrels, run = random_case(seed)
    ks = (1, 3, 5, 10, 50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = pinpoint.per_query(ours(tmp_path, queries, run, "pinpoint"), queries, ks=ks).set_index("query_id")
    ref = official(qrels, run, {"P.1,3,5,10,50", "recall.1,3,5,10,50", "map_cut.1,3,5,10,50"})
    assert set(ref) == set(df.index)
    for qid, m in ref.items():
        n_pos = len(qrels[qid]) and sum(v > 0 for v in qrels[qid].values())
        for k in ks:
            assert df.loc[qid, f"precision@{k}"] == pytest.approx(m[f"P_{k}"], abs=1e-12)
            assert df.loc[qid, f"recall@{k}"] == pytest.approx(m[f"recall_{k}"], abs=1e-12)
            # PinPoint divides by min(positives, k), trec_eval's map_cut by the number of positives
            assert df.loc[qid, f"AP@{k}"] * min(n_pos, k) / n_pos == pytest.approx(m[f"map_cut_{k}"], abs=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_circo_ap_and_target_recall_equal_trec_eval(tmp_path, seed):
    queries, qrels, run = random_case(100 + seed)
    ks = (5, 10, 25, 50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = circo.per_query(ours(tmp_path, queries, run, "circo"), queries, ks=ks).set_index("query_id")
    ref = official(qrels, run, {"map_cut.5,10,25,50"})
    # CIRCO's Recall@k looks at the single target only: trec_eval's success@k with the target as the only relevant
    target_ref = pytrec_eval.RelevanceEvaluator(
        {q.query_id: {q.target_id: 1} for q in queries}, {"success.5,10,25,50"}
    ).evaluate(run)
    for qid, m in ref.items():
        n_pos = sum(v > 0 for v in qrels[qid].values())
        for k in ks:
            assert df.loc[qid, f"AP@{k}"] * min(n_pos, k) / n_pos == pytest.approx(m[f"map_cut_{k}"], abs=1e-12)
            assert df.loc[qid, f"Recall@{k}"] == target_ref[qid][f"success_{k}"]


@pytest.mark.parametrize("seed", range(12))
def test_edir_recall_equals_pytrec_eval_including_unjudged_queries(tmp_path, seed):
    queries, qrels, run = random_case(200 + seed, with_unjudged=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agg, df = edir.evaluate(ours(tmp_path, queries, run, "edir"), queries)
    # the official code: qrels {qid: {pos: 1}} (positives only), recall_1 and recall_3
    official_qrels = {q.query_id: {p: 1 for p in q.positives} for q in queries}
    ref = pytrec_eval.RelevanceEvaluator(official_qrels, {"recall_1", "recall_3"}).evaluate(run)
    scored = df[df["scored"]].set_index("query_id")
    assert ref and set(scored.index) == set(ref)
    for k in (1, 3):
        for qid, m in ref.items():
            assert scored.loc[qid, f"Recall@{k}"] == pytest.approx(m[f"recall_{k}"], abs=1e-12)
        assert agg[f"Recall@{k}"] == pytest.approx(sum(m[f"recall_{k}"] for m in ref.values()) / len(ref), abs=1e-12)
    assert agg["n_queries_without_positives"] == sum(1 for q in queries if q.query_id in run and not q.positives)
