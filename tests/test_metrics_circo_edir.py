"""CIRCO and EDIR metrics against naive loops and hand-computed cases."""

from __future__ import annotations

import random
import warnings

import pytest

from cir_demo.benchmarks.schema import BenchmarkError, Judgments, Query
from cir_demo.metrics import CoverageWarning, circo, edir


def cq(qid, gt, target, aspects=(), group=None):
    return Query(
        qid, ("ref",), "instr", group or qid, Judgments(gt), meta={"semantic_aspects": list(aspects)}, target_id=target
    )


# --------------------------------------------------------------------------- CIRCO
def naive_circo(run, queries, ks):
    aps = {k: [] for k in ks}
    recalls = {k: [] for k in ks}
    aspects = {}
    for q in queries:
        if q.query_id not in run:
            continue
        ranking = run[q.query_id]
        gt = list(q.positives)
        for k in ks:
            total, seen = 0.0, 0
            for i, item in enumerate(ranking[:k], start=1):
                if item in gt:
                    seen += 1
                    total += seen / i
            aps[k].append(total / min(len(gt), k))
            recalls[k].append(1.0 if q.target_id in ranking[:k] else 0.0)
        for aspect in q.meta["semantic_aspects"]:
            aspects.setdefault(aspect, []).append(aps[10][-1])
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    out = {f"mAP@{k}": mean(aps[k]) for k in ks}
    out.update({f"Recall@{k}": mean(recalls[k]) for k in ks})
    out.update({circo.aspect_column(a): mean(v) for a, v in aspects.items()})
    return out


@pytest.mark.parametrize("seed", range(5))
def test_circo_matches_naive_reference(seed):
    rng = random.Random(seed)
    pool = [str(i) for i in range(80)]
    queries, run = [], {}
    for i in range(120):
        gt = rng.sample(pool, rng.choice([1, 2, 4, 12, 23]))
        target = gt[0]
        aspects = rng.sample(circo.SEMANTIC_ASPECTS, rng.choice([0, 1, 2]))
        queries.append(cq(str(i), gt, target, aspects))
        if rng.random() < 0.1:
            continue
        run[str(i)] = rng.sample(pool, rng.choice([0, 3, 10, 30, 50, 70]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoverageWarning)
        agg, df = circo.evaluate(run, queries)
    ref = naive_circo(run, queries, circo.KS)
    for key, value in ref.items():
        assert agg[key] == pytest.approx(value, abs=1e-12), key
    assert agg["total_queries"] == len(run)
    assert all(c in agg for c in circo.OFFICIAL_COLUMNS)


def test_circo_hand_ap_and_target_only_recall():
    gt = ["t", "g2", "g3"]
    ranking = ["g2", "x", "t", "y", "z", "w", "g3"]
    agg, df = circo.evaluate({"q": ranking}, [cq("q", gt, "t")])
    row = df.iloc[0]
    assert row["AP@5"] == pytest.approx((1 / 1 + 2 / 3) / 3)  # 0.5556: hits at 1 and 3, over min(3, 5)
    assert row["AP@10"] == pytest.approx((1 + 2 / 3 + 3 / 7) / 3)
    # Recall counts only the target (rank 3), not g2 at rank 1
    agg2, df2 = circo.evaluate({"q": ["g2", "x", "y", "z", "w", "t"]}, [cq("q", gt, "t")])
    assert df2.iloc[0]["Recall@5"] == 0.0 and df2.iloc[0]["Recall@10"] == 1.0


def test_circo_ap_with_more_gt_than_k():
    gt = [f"g{i}" for i in range(8)]
    row = circo.per_query({"q": gt[:3] + ["x"]}, [cq("q", gt, "g0")]).iloc[0]
    assert row["AP@5"] == pytest.approx(3 / 5)  # three perfect hits over min(8, 5)


def test_circo_duplicates_raise_naming_the_query():
    queries = [cq("7", ["a"], "a"), cq("8", ["a"], "a")]
    with pytest.raises(BenchmarkError, match="query 8.*duplicate"):
        circo.per_query({"7": ["a", "b"], "8": ["b", "a", "b"]}, queries)


def test_circo_missing_gt_or_target_raise():
    with pytest.raises(BenchmarkError, match="query 1.*gt_img_ids"):
        circo.per_query({"1": ["a"]}, [cq("1", [], "a")])
    with pytest.raises(BenchmarkError, match="query 2.*target_img_id"):
        circo.per_query({"2": ["a"]}, [cq("2", ["a"], None)])


def test_circo_semantic_aspects_by_hand():
    queries = [cq("1", ["a"], "a", ["addition", "negation"]), cq("2", ["b"], "b", ["negation"]), cq("3", ["c"], "c")]
    run = {"1": ["a"], "2": ["x", "b"], "3": []}  # AP@10: 1.0, 0.5, 0.0 (empty ranking scores 0)
    agg, _ = circo.evaluate(run, queries)
    assert agg[circo.aspect_column("addition")] == pytest.approx(1.0)
    assert agg[circo.aspect_column("negation")] == pytest.approx(0.75)
    assert agg["mAP@10"] == pytest.approx(0.5)
    assert circo.aspect_column("viewpoint") not in agg  # only aspects present


# --------------------------------------------------------------------------- EDIR
def eq(qid, target, negatives=(), sub="color", use_target_id=True):
    return Query(
        qid,
        ("src",),
        "instr",
        qid,
        Judgments([target], negatives),
        meta={"edit_subcategory": sub},
        target_id=target if use_target_id else None,
    )


def test_edir_recall_by_hand():
    queries = [
        eq("1", "t1", ["n1"], "color"),
        eq("2", "t2", ["n2"], "color"),
        eq("3", "t3", ["n3"], "count"),
        eq("4", "t4", ["n4"], "count", use_target_id=False),  # falls back to the positives
    ]
    run = {"1": ["t1", "n1"], "2": ["n2", "x", "t2"], "3": ["x", "y", "z", "t3"], "4": ["n4", "t4"]}
    agg, df = edir.evaluate(run, queries)
    assert list(df["Recall@1"]) == [1.0, 0.0, 0.0, 0.0]
    assert list(df["Recall@3"]) == [1.0, 1.0, 0.0, 1.0]
    assert list(df["hard_negative@1"]) == [0.0, 1.0, 0.0, 1.0]
    assert agg["Recall@1"] == pytest.approx(0.25)
    assert agg["Recall@3"] == pytest.approx(0.75)
    assert agg["Recall@3/color"] == 1.0 and agg["Recall@3/count"] == 0.5
    assert agg["n_queries/color"] == 2
    assert all(c in agg for c in edir.OFFICIAL_COLUMNS)


def test_edir_total_is_micro_not_macro():
    queries = [eq("1", "t", sub="a")] + [eq(str(i), "t", sub="b") for i in range(2, 5)]
    run = {"1": ["t"], "2": ["t"], "3": ["x"], "4": ["x"]}
    agg, _ = edir.evaluate(run, queries)
    assert agg["Recall@1"] == pytest.approx(2 / 4)  # query-weighted, like the paper's Total
    assert agg["Recall@1_macro"] == pytest.approx((1.0 + 1 / 3) / 2)


def test_edir_naive_reference_random():
    rng = random.Random(3)
    pool = [f"i{i}" for i in range(30)]
    queries, run = [], {}
    for i in range(200):
        target = rng.choice(pool)
        queries.append(eq(str(i), target, rng.sample(pool, 3), rng.choice(["a", "b", "c"])))
        if rng.random() < 0.9:
            run[str(i)] = rng.sample(pool, rng.choice([0, 1, 2, 5]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoverageWarning)
        agg, _ = edir.evaluate(run, queries)
    scored = [q for q in queries if q.query_id in run]
    for k in (1, 3):
        ref = sum(q.target_id in run[q.query_id][:k] for q in scored) / len(scored)
        assert agg[f"Recall@{k}"] == pytest.approx(ref, abs=1e-12)
    ref_neg = sum(bool(run[q.query_id]) and run[q.query_id][0] in q.negatives for q in scored) / len(scored)
    assert agg["hard_negative@1"] == pytest.approx(ref_neg, abs=1e-12)


def test_edir_query_without_positives_is_left_out_and_counted_and_coverage_warns():
    bad = Query("9", ("src",), "instr", "9", Judgments([]), target_id=None)
    with pytest.warns(edir.UnjudgedQueryWarning, match="1 queries have no positives"):
        agg, df = edir.evaluate({"9": ["a"], "1": ["t"]}, [bad, eq("1", "t")])
    assert list(df["scored"]) == [False, True]
    assert agg["Recall@1"] == 1.0 and agg["n_scored"] == 1 and agg["n_queries_without_positives"] == 1
    assert agg["total_queries"] == 2
    with pytest.warns(CoverageWarning, match="1 of 2"):
        agg, _ = edir.evaluate({"1": ["t"]}, [eq("1", "t"), eq("2", "t")])
    assert agg["coverage"] == 0.5


def test_edir_recall_is_the_share_of_positives_like_trec_eval():
    q = Query("1", ("src",), "instr", "1", Judgments(["a", "b"]))
    _, df = edir.evaluate({"1": ["a", "a", "x", "b"]}, [q])  # a repeat counts once
    assert df.loc[0, "Recall@1"] == 0.5 and df.loc[0, "Recall@3"] == 0.5
