"""PinPoint metrics against a naive loop reference and hand-computed cases."""

from __future__ import annotations

import random
import statistics
import warnings

import numpy as np
import pytest

from cir_demo.benchmarks.schema import Judgments, Query
from cir_demo.metrics import CoverageWarning
from cir_demo.metrics import pinpoint


# --------------------------------------------------------------------------- naive reference
def naive_ap(ranking, positives, k):
    """AP@k by the definition: precision@i summed at hit ranks i <= k, over min(|positives|, k)."""
    if not positives:
        return 0.0
    total, seen = 0.0, 0
    for i, item in enumerate(ranking[:k], start=1):
        if item in positives:  # list membership, duplicates in the ranking count again
            seen += 1
            total += seen / i
    return total / min(len(positives), k)


def naive_query(ranking, positives, negatives, k):
    top = ranking[:k]
    hits = sum(1 for item in top if item in positives)
    precision = hits / k if positives else 0.0
    recall = hits / len(positives) if positives else 0.0
    neg_hits = sum(1 for item in top if item in negatives)
    neg_recall = neg_hits / min(len(negatives), k) if negatives else 0.0
    without_negatives = [item for item in ranking if item not in negatives]
    return {
        f"precision@{k}": precision,
        f"recall@{k}": recall,
        f"AP@{k}": naive_ap(ranking, positives, k),
        f"AP@{k}_noNeg": naive_ap(without_negatives, positives, k),
        f"NegRecall@{k}": neg_recall,
    }


def naive_sensitivity(pairs):
    """pairs: [(key, value)] in row order -> (mean range, mean population std, n groups >= 2)."""
    groups = {}
    for key, value in pairs:
        groups.setdefault(key, []).append(value)
    ranges = [max(v) - min(v) for v in groups.values() if len(v) > 1]
    stds = [statistics.pstdev(v) for v in groups.values() if len(v) > 1]
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    return mean(ranges), mean(stds), len(ranges)


def naive_evaluate(run, queries, ks):
    rows, matched = [], 0
    for q in queries:
        if q.query_id not in run:
            continue
        matched += 1
        ranking = list(run[q.query_id])
        if not ranking:
            continue
        row = {
            "query_id": q.query_id,
            "group_id": q.group_id,
            "key": (q.reference_ids[0], q.reference_ids[1] if len(q.reference_ids) > 1 else None),
        }
        for k in ks:
            row.update(naive_query(ranking, list(q.positives), list(q.negatives), k))
        row["P10"] = naive_query(ranking, list(q.positives), list(q.negatives), 10)["precision@10"]
        rows.append(row)
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    agg = {"total_queries": matched}
    for k in ks:
        for name in ("precision", "recall", "NegRecall"):
            agg[f"{name}@{k}"] = mean([r[f"{name}@{k}"] for r in rows])
        agg[f"mAP@{k}"] = mean([r[f"AP@{k}"] for r in rows])
        agg[f"mAP@{k}_noNeg"] = mean([r[f"AP@{k}_noNeg"] for r in rows])
    agg["delta_mAP@10_noNeg"] = agg["mAP@10_noNeg"] - agg["mAP@10"]
    agg["pct_increase_mAP@10_noNeg"] = agg["delta_mAP@10_noNeg"] / agg["mAP@10"] if agg["mAP@10"] > 0 else 0.0
    agg["ling_sens_range"], agg["ling_sens_std"], agg["n_ling_sens_groups"] = naive_sensitivity(
        [(r["key"], r["P10"]) for r in rows]
    )
    agg["ling_sens_paraphrase_range"], agg["ling_sens_paraphrase_std"], agg["n_paraphrase_groups"] = naive_sensitivity(
        [(r["group_id"], r["AP@10"]) for r in rows]
    )
    agg["n_scored"] = len(rows)
    return agg, {r["query_id"]: r for r in rows}


# --------------------------------------------------------------------------- random cases
def random_case(seed, n_queries=150):
    rng = random.Random(seed)
    pool = [f"img{i}" for i in range(45)]
    refs = [f"ref{i}" for i in range(6)]
    queries, run = [], {}
    judgments_by_group = {}
    for i in range(n_queries):
        group = f"g{rng.randrange(25)}"
        if group not in judgments_by_group:
            n_pos = rng.choice([0, 1, 2, 5, 12, 60])
            n_neg = rng.choice([0, 1, 3, 8, 20])
            positives = [rng.choice(pool) for _ in range(n_pos)]  # may repeat, like the real lists
            negatives = [rng.choice(pool) for _ in range(n_neg)]  # may overlap positives
            judgments_by_group[group] = Judgments(positives, negatives)
        ref_ids = [rng.choice(refs)] + ([rng.choice(refs[:2])] if rng.random() < 0.3 else [])
        q = Query(f"q{i}", ref_ids, "instr", group, judgments_by_group[group])
        queries.append(q)
        u = rng.random()
        if u < 0.08:
            continue  # missing from the run
        if u < 0.12:
            run[q.query_id] = []
            continue
        length = rng.choice([1, 3, 7, 10, 30, 50, 80])
        if rng.random() < 0.5:
            ranking = [rng.choice(pool) for _ in range(length)]  # with duplicates
        else:
            ranking = rng.sample(pool, min(length, len(pool)))
        run[q.query_id] = ranking
    return queries, run


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ks", [pinpoint.KS, (2, 3, 10)])
def test_matches_naive_reference(seed, ks):
    queries, run = random_case(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoverageWarning)
        agg, df = pinpoint.evaluate(run, queries, ks=ks)
    ref_agg, ref_rows = naive_evaluate(run, queries, ks)

    assert list(df["query_id"]) == [q.query_id for q in queries if q.query_id in run]
    scored = df[df["scored"]]
    assert set(scored["query_id"]) == set(ref_rows)
    for _, row in scored.iterrows():
        ref = ref_rows[row["query_id"]]
        for k in ks:
            for col in (f"precision@{k}", f"recall@{k}", f"AP@{k}", f"AP@{k}_noNeg", f"NegRecall@{k}"):
                assert row[col] == pytest.approx(ref[col], abs=1e-12), (row["query_id"], col)
    for key, value in ref_agg.items():
        assert agg[key] == pytest.approx(value, abs=1e-12), key
    # unscored rows carry no metric values
    assert df.loc[~df["scored"], f"AP@{ks[-1]}"].isna().all()


def test_random_metrics_are_fractions():
    queries, run = random_case(11, n_queries=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoverageWarning)
        agg, df = pinpoint.evaluate(run, queries)
    metric_cols = [c for c in df.columns if "@" in c]
    clean = df[df["scored"] & (df["n_duplicates"] == 0)]
    values = clean[metric_cols].to_numpy()
    assert len(clean) > 50 and np.all((values >= 0) & (values <= 1))
    # only a ranking that repeats ids can exceed 1 (hits double count, as in the official code)
    over = df[df["scored"]][(df.loc[df["scored"], metric_cols] > 1).any(axis=1)]
    assert len(over) > 0 and (over["n_duplicates"] > 0).all()


# --------------------------------------------------------------------------- hand-built cases
def q(qid, positives, negatives=(), refs=("r1",), group="g"):
    return Query(qid, refs, "instr", group, Judgments(positives, negatives))


def one(ranking, positives, negatives=(), ks=pinpoint.KS):
    df = pinpoint.per_query({"a": ranking}, [q("a", positives, negatives)], ks=ks)
    return df.iloc[0]


def test_hand_ap_fewer_positives_than_k():
    row = one(["p1", "x", "p2", "y"], ["p1", "p2"])
    assert row["precision@1"] == 1.0
    assert row["precision@5"] == pytest.approx(2 / 5)  # 2 hits / k, even though only 4 items were ranked
    assert row["recall@5"] == 1.0
    assert row["AP@5"] == pytest.approx((1 / 1 + 2 / 3) / 2)  # 0.8333: divided by min(2, 5) = 2
    assert row["AP@1"] == 1.0


def test_hand_ap_more_positives_than_k():
    positives = [f"p{i}" for i in range(12)]
    row = one(["p0", "x", "p1", "y", "z", "p2"], positives)
    assert row["AP@1"] == 1.0  # 1/1 over min(12, 1)
    assert row["AP@5"] == pytest.approx((1 + 2 / 3) / 5)  # 0.3333: hits at ranks 1 and 3, over min(12, 5) = 5
    assert row["AP@10"] == pytest.approx((1 + 2 / 3 + 3 / 6) / 10)  # 0.2167
    assert row["recall@10"] == pytest.approx(3 / 12)


def test_hand_short_ranking():
    row = one(["p1"], ["p1", "p2"])
    assert row["precision@5"] == pytest.approx(1 / 5)
    assert row["precision@50"] == pytest.approx(1 / 50)
    assert row["AP@5"] == pytest.approx(1 / 2)
    assert row["AP@50"] == pytest.approx(1 / 2)


def test_hand_neg_recall():
    row = one(["n1", "p", "n2"], ["p"], ["n1", "n2", "n3"])
    assert row["NegRecall@1"] == 1.0  # 1 negative over min(3, 1)
    assert row["NegRecall@5"] == pytest.approx(2 / 3)
    assert row["NegRecall@50"] == pytest.approx(2 / 3)
    assert one(["n1"], ["p"], [])["NegRecall@5"] == 0.0  # no negatives -> 0


def test_null_negatives_count_in_the_neg_recall_denominator():
    # The real PinPoint file ends most negative lists with a null; the adapter keeps
    # its count and the official evaluator's denominator min(len(list), k) includes it.
    query = Query("a", ("r1",), "instr", "g", Judgments(("p",), ("n1",), n_null_negatives=1))
    row = pinpoint.per_query({"a": ["n1", "p"]}, [query]).iloc[0]
    assert row["NegRecall@1"] == 1.0  # min(2, 1) = 1
    assert row["NegRecall@5"] == pytest.approx(1 / 2)  # min(2, 5) = 2, not 1


def test_hand_no_neg_variant():
    row = one(["n1", "p1", "x", "p2"], ["p1", "p2"], ["n1"])
    assert row["AP@1"] == 0.0
    assert row["AP@1_noNeg"] == 1.0  # filtered ranking starts with p1
    assert row["AP@5"] == pytest.approx((1 / 2 + 2 / 4) / 2)  # 0.5
    assert row["AP@5_noNeg"] == pytest.approx((1 / 1 + 2 / 3) / 2)  # 0.8333


def test_no_neg_pulls_items_from_beyond_the_cutoff():
    # width is max(ks) = 2: removing two negatives must bring p1 (rank 3) into the top 2
    row = one(["n1", "n2", "p1", "x", "p2"], ["p1"], ["n1", "n2"], ks=(1, 2))
    assert row["AP@2"] == 0.0
    assert row["AP@1_noNeg"] == 1.0
    assert row["AP@2_noNeg"] == 1.0


def test_item_both_positive_and_negative():
    row = one(["b", "p"], ["b", "p"], ["b"])
    assert row["precision@1"] == 1.0 and row["NegRecall@1"] == 1.0
    assert row["AP@1_noNeg"] == 1.0  # b removed, p moves to rank 1
    assert row["AP@5_noNeg"] == pytest.approx(1 / 2)  # one hit at rank 1, over min(2, 5)


def test_duplicates_in_ranking_count_twice():
    row = one(["p1", "p1", "x"], ["p1", "p2"])
    assert row["n_duplicates"] == 1
    assert row["precision@5"] == pytest.approx(2 / 5)
    assert row["recall@5"] == 1.0  # 2 "hits" over 2 positives: the official double count
    assert row["AP@5"] == pytest.approx((1 / 1 + 2 / 2) / 2)


def test_duplicates_in_judgment_lists_change_denominators():
    row = one(["p1", "n1"], ["p1", "p1"], ["n1", "n1"])
    assert row["recall@1"] == pytest.approx(1 / 2)
    assert row["AP@5"] == pytest.approx(1 / 2)  # over min(2, 5)
    assert row["NegRecall@5"] == pytest.approx(1 / 2)  # 1 over min(2, 5)


def test_no_positives_scores_zero_and_counts_in_the_mean():
    queries = [q("a", ["p"]), q("b", [])]
    agg, df = pinpoint.evaluate({"a": ["p"], "b": ["p", "x"]}, queries)
    assert df.set_index("query_id").loc["b", "precision@1"] == 0.0
    assert agg["precision@1"] == pytest.approx(0.5)
    assert agg["mAP@10"] == pytest.approx(0.5)


def test_empty_and_missing_rankings():
    queries = [q("a", ["p"]), q("b", ["p"]), q("c", ["p"])]
    run = {"a": ["p"], "b": []}  # c missing
    with pytest.warns(CoverageWarning, match="2 of 3"):
        agg, df = pinpoint.evaluate(run, queries)
    assert list(df["query_id"]) == ["a", "b"]
    assert list(df["scored"]) == [True, False]
    assert agg["total_queries"] == 2  # the empty ranking is matched ...
    assert agg["n_scored"] == 1  # ... but left out of every mean
    assert agg["precision@1"] == 1.0
    assert agg["coverage"] == pytest.approx(2 / 3)
    assert agg["n_empty_rankings"] == 1


def test_nothing_scored_gives_zeros():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoverageWarning)
        agg, _ = pinpoint.evaluate({}, [q("a", ["p"])])
    assert agg["total_queries"] == 0
    assert agg["mAP@10"] == 0.0 and agg["pct_increase_mAP@10_noNeg"] == 0.0 and agg["ling_sens_range"] == 0.0


def test_linguistic_sensitivity_by_hand():
    pos = [f"p{i}" for i in range(10)]
    queries = [
        q("a1", pos, refs=("A",), group="intent1"),
        q("a2", pos, refs=("A",), group="intent1"),
        q("a3", pos, refs=("A",), group="intent2"),  # another intent on the same image: same official group
        q("ab1", pos, refs=("A", "B"), group="intent3"),  # two-image key (A, B) differs from (A, None)
        q("ab2", pos, refs=("A", "B"), group="intent3"),
        q("c1", pos, refs=("C",), group="intent4"),  # alone: no range
    ]
    run = {
        "a1": pos[:3] + ["x"] * 7,  # precision@10 = 0.3
        "a2": pos[:1] + ["x"] * 9,  # 0.1
        "a3": pos[:2] + ["x"] * 8,  # 0.2
        "ab1": pos[:5] + ["x"] * 5,  # 0.5
        "ab2": pos[:5] + ["x"] * 5,  # 0.5
        "c1": ["x"],
    }
    agg, df = pinpoint.evaluate(run, queries)
    # official: groups (A,None) -> [0.3, 0.1, 0.2] range 0.2, std sqrt(2/300); (A,B) -> range 0, std 0
    assert agg["ling_sens_range"] == pytest.approx((0.2 + 0.0) / 2)
    assert agg["ling_sens_std"] == pytest.approx((np.sqrt(2 / 300) + 0.0) / 2)
    assert agg["n_ling_sens_groups"] == 2
    # paper variant on AP@10 per intent: intent1 -> AP 0.3 and 0.1 (hits at the top over min(10,10))
    assert agg["ling_sens_paraphrase_range"] == pytest.approx((0.2 + 0.0) / 2)  # intent1 and intent3
    assert agg["ling_sens_paraphrase_std"] == pytest.approx((0.1 + 0.0) / 2)
    assert agg["n_paraphrase_groups"] == 2


def test_official_columns_present_and_ordered():
    agg, _ = pinpoint.evaluate({"a": ["p"]}, [q("a", ["p"])])
    official = [c for c in pinpoint.OFFICIAL_COLUMNS if c != "model"]
    assert list(agg)[: len(official)] == official
    assert all(c in agg for c in pinpoint.EXTRA_COLUMNS)
    assert agg["delta_mAP@10_noNeg"] == agg["mAP@10_noNeg"] - agg["mAP@10"]


def test_results_key_and_bad_rankings():
    queries = [q("query_00001", ["p"])]
    df = pinpoint.per_query({"00001": ["p"]}, queries, results_key=lambda s: s.replace("query_", ""))
    assert df.iloc[0]["precision@1"] == 1.0
    with pytest.raises(TypeError, match="00001"):
        pinpoint.per_query({"00001": "p"}, queries, results_key=lambda s: s.replace("query_", ""))
    with pytest.raises(ValueError, match="ks"):
        pinpoint.per_query({}, queries, ks=(0, 5))


@pytest.mark.parametrize("seed", range(3))
def test_group_stds_are_numpys_bit_for_bit(seed):
    """The batched std of linguistic sensitivity against its oracle, np.std per group (as the official loop)."""
    from cir_demo.metrics.pinpoint import _stds

    rng = np.random.default_rng(seed)
    groups = []
    for i in range(3000):
        n = int(rng.integers(2, 14))
        kind = i % 4
        if kind == 0:
            g = rng.random(n)
        elif kind == 1:
            g = rng.integers(0, 11, n) / 10  # precision@10 values
        elif kind == 2:
            g = (rng.random(n) * 10.0 ** rng.integers(-8, 8)).round(int(rng.integers(0, 8)))
        else:
            g = rng.choice([0.0, -0.0, 1.0, 1 / 3, 2 / 3, 0.1, 0.2, 0.3], n)
        groups.append([np.float64(x) for x in g])
    want = np.array([np.std(g) for g in groups])
    assert np.array_equal(want.view(np.int64), _stds(groups).view(np.int64))
    assert _stds([]).shape == (0,)
