"""Group bootstrap, paired bootstrap and breakdowns against loops and hand-built cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cir_demo.benchmarks.schema import Judgments, Query
from cir_demo.metrics import bootstrap
from cir_demo.metrics.bootstrap import bootstrap_ci, compare_runs, metric_cis, paired_bootstrap
from cir_demo.metrics.breakdown import MISSING, breakdown, query_meta_frame
from cir_demo.utils.names import UnknownNameError


def correlated_values(n_groups=300, size=6, seed=0):
    """Paraphrase-like data: every row of a group has the same value."""
    rng = np.random.default_rng(seed)
    group_values = rng.random(n_groups)
    return np.repeat(group_values, size), np.repeat(np.arange(n_groups), size)


def test_replicates_match_a_naive_loop_over_the_same_draws():
    rng = np.random.default_rng(5)
    values = rng.random(40)
    groups = rng.integers(0, 9, 40)
    codes, _ = pd.factorize(groups)
    sums = np.bincount(codes, weights=values)
    sizes = np.bincount(codes)
    got = bootstrap.group_bootstrap_means(sums, sizes, n_boot=25, seed=3)
    # the same draws, replayed: each replicate takes len(sizes) groups with replacement
    draws = np.random.default_rng(3).integers(0, len(sizes), size=(25, len(sizes)))
    for b in range(25):
        rows = np.concatenate([values[codes == g] for g in draws[b]])
        assert got[b] == pytest.approx(rows.mean(), abs=1e-12)


def test_kept_draws_give_the_replicates_of_fresh_draws(monkeypatch):
    """Bootstraps with one seed over one number of groups reuse the draws (`_draw_counts`): each call equals,
    bit for bit, the same call on an emptied memo (several chunks of replicates; other sums, other columns),
    and the memo stays within its byte budget, the oldest draws dropped first."""
    rng = np.random.default_rng(7)
    monkeypatch.setattr(bootstrap, "_DRAW_MEMO", type(bootstrap._DRAW_MEMO)())
    monkeypatch.setattr(bootstrap, "_DRAW_MEMO_BYTES", 700 * 300 * 8 * 2)  # room for two (n_boot 700, 300 groups)
    cases = [
        (rng.random((n, m)), rng.integers(1, 6, n).astype(float), seed)
        for n, m, seed in [(300, 1, 0), (300, 3, 0), (300, 2, 1), (120, 1, 0), (300, 1, 0)]
    ]
    for sums, sizes, seed in cases:
        kept = bootstrap.group_bootstrap_means(sums, sizes, 700, seed)
        saved = bootstrap._DRAW_MEMO.copy()
        bootstrap._DRAW_MEMO.clear()
        fresh = bootstrap.group_bootstrap_means(sums, sizes, 700, seed)
        bootstrap._DRAW_MEMO.clear()
        bootstrap._DRAW_MEMO.update(saved)
        assert kept.tobytes() == fresh.tobytes()
        assert sum(c.nbytes for v in bootstrap._DRAW_MEMO.values() for c in v) <= bootstrap._DRAW_MEMO_BYTES
    assert list(bootstrap._DRAW_MEMO) == [
        (120, 700, 0),
        (300, 700, 0),
    ]  # (300, 700, 1) dropped, (300, 700, 0) used last


def test_ci_contains_the_mean_and_is_seeded():
    values, groups = correlated_values()
    mean, lo, hi = bootstrap_ci(values, groups, n_boot=500, seed=1)
    assert mean == pytest.approx(values.mean())
    assert lo < mean < hi
    assert bootstrap_ci(values, groups, n_boot=500, seed=1) == (mean, lo, hi)
    assert bootstrap_ci(values, groups, n_boot=500, seed=2) != (mean, lo, hi)


def test_group_resampling_is_wider_than_row_resampling_for_correlated_groups():
    values, groups = correlated_values(size=6)
    _, lo_g, hi_g = bootstrap_ci(values, groups, n_boot=1000, seed=0)
    _, lo_r, hi_r = bootstrap_ci(values, np.arange(values.size), n_boot=1000, seed=0)
    # six identical copies per group: rows overstate the sample size by 6x, the interval shrinks by ~sqrt(6)
    ratio = (hi_g - lo_g) / (hi_r - lo_r)
    assert 1.9 < ratio < 3.1


def test_row_ci_width_matches_the_normal_approximation():
    rng = np.random.default_rng(4)
    values = rng.random(2000)
    _, lo, hi = bootstrap_ci(values, np.arange(values.size), n_boot=2000, seed=0)
    expected = 2 * 1.96 * values.std() / np.sqrt(values.size)
    assert (hi - lo) == pytest.approx(expected, rel=0.12)


def test_degenerate_inputs():
    assert np.isnan(bootstrap_ci(np.array([]), np.array([]))[0])
    assert bootstrap_ci(np.array([0.5, 0.5]), np.array(["a", "b"])) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="row 1"):
        bootstrap_ci(np.array([0.1, np.nan]), np.array([0, 1]))
    with pytest.raises(ValueError, match="groups"):
        bootstrap_ci(np.array([0.1, 0.2]), np.array([0]))
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_ci(np.array([0.1]), np.array([0]), n_boot=0)


def test_paired_bootstrap_against_itself_is_zero():
    values, groups = correlated_values()
    result = paired_bootstrap(values, values, groups, n_boot=200)
    assert result["diff"] == 0.0 and result["lo"] == 0.0 and result["hi"] == 0.0
    assert result["p_value"] == 1.0


def test_paired_bootstrap_shift_and_pairing():
    values, groups = correlated_values(seed=2)
    shifted = paired_bootstrap(values, values + 0.1, groups, n_boot=300)
    assert shifted["diff"] == pytest.approx(0.1)
    assert shifted["lo"] == pytest.approx(0.1) and shifted["hi"] == pytest.approx(0.1)
    assert shifted["p_value"] == 0.0
    # b = a plus small noise: pairing removes the between-group spread, so the paired interval is
    # much narrower than the two separate intervals would suggest
    rng = np.random.default_rng(0)
    b = values + rng.normal(0.01, 0.02, values.size)
    paired = paired_bootstrap(values, b, groups, n_boot=500)
    _, lo_a, hi_a = bootstrap_ci(values, groups, n_boot=500)
    assert paired["diff"] == pytest.approx(b.mean() - values.mean())
    assert paired["lo"] <= paired["diff"] <= paired["hi"]
    assert (paired["hi"] - paired["lo"]) < 0.3 * (hi_a - lo_a)
    assert paired["p_value"] < 0.05


def test_paired_bootstrap_p_value_for_no_effect_is_large():
    rng = np.random.default_rng(7)
    a = rng.random(600)
    b = rng.permutation(a)  # same distribution, no systematic difference
    result = paired_bootstrap(a, b, np.arange(600) // 3, n_boot=1000, seed=0)
    assert result["diff"] == pytest.approx(0.0, abs=1e-12)
    assert result["p_value"] > 0.5


# --------------------------------------------------------------------------- breakdowns
def per_query_frame():
    return pd.DataFrame(
        {
            "query_id": ["q1", "q2", "q3", "q4", "q5", "q6"],
            "group_id": ["g1", "g1", "g2", "g3", "g3", "g4"],
            "scored": [True, True, True, True, True, False],
            "AP@10": [0.2, 0.4, 1.0, 0.0, 0.5, np.nan],
        }
    )


def meta_frame():
    queries = [
        Query(
            "q1",
            ("a",),
            "i",
            "g1",
            Judgments(["p"]),
            meta={"skin_tone_bucket": "DARKEST", "semantic_aspects": ["x", "y"]},
        ),
        Query(
            "q2", ("a",), "i", "g1", Judgments(["p"]), meta={"skin_tone_bucket": "DARKEST", "semantic_aspects": ["y"]}
        ),
        Query(
            "q3", ("a", "b"), "i", "g2", Judgments(["p"]), meta={"skin_tone_bucket": "LIGHTEST", "semantic_aspects": []}
        ),
        Query("q4", ("c",), "i", "g3", Judgments(["p"]), meta={"skin_tone_bucket": "UNKNOWN"}),
        Query("q5", ("c",), "i", "g3", Judgments(["p"]), meta={"skin_tone_bucket": None}),
        Query("q6", ("d",), "i", "g4", Judgments(["p"]), meta={"skin_tone_bucket": "DARKEST"}),
    ]
    return query_meta_frame(queries)


def test_query_meta_frame_columns():
    meta = meta_frame()
    assert list(meta.columns[:2]) == ["query_id", "group_id"]
    assert {"skin_tone_bucket", "semantic_aspects", "is_single"} <= set(meta.columns)
    assert meta.set_index("query_id").loc["q3", "is_single"] == False  # noqa: E712
    assert meta.set_index("query_id").loc["q4", "semantic_aspects"] is None


def test_breakdown_means_counts_and_order():
    table = breakdown(per_query_frame(), meta_frame(), "skin_tone_bucket", ["AP@10"], n_boot=200)
    # known order: LIGHTEST ... DARKEST, then UNKNOWN, then missing; q6 is unscored and left out
    assert list(table["value"]) == ["LIGHTEST", "DARKEST", "UNKNOWN", MISSING]
    by_value = table.set_index("value")
    assert by_value.loc["DARKEST", "AP@10"] == pytest.approx(0.3)
    assert by_value.loc["DARKEST", "n_queries"] == 2 and by_value.loc["DARKEST", "n_groups"] == 1
    assert by_value.loc[MISSING, "AP@10"] == pytest.approx(0.5)
    # one group only: the interval collapses onto the mean
    assert by_value.loc["DARKEST", "AP@10_lo"] == pytest.approx(0.3)
    assert by_value.loc["DARKEST", "AP@10_hi"] == pytest.approx(0.3)


def test_breakdown_explodes_list_fields():
    table = breakdown(per_query_frame(), meta_frame(), "semantic_aspects", ["AP@10"], n_boot=50).set_index("value")
    assert table.loc["x", "n_queries"] == 1 and table.loc["x", "AP@10"] == pytest.approx(0.2)
    assert table.loc["y", "n_queries"] == 2 and table.loc["y", "AP@10"] == pytest.approx(0.3)
    assert table.loc[MISSING, "n_queries"] == 3  # q3 (empty list), q4, q5 (absent)


def test_breakdown_matches_groupby_oracle_on_random_data():
    rng = np.random.default_rng(0)
    n = 300
    df = pd.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(n)],
            "group_id": [f"g{i // 5}" for i in range(n)],
            "scored": True,
            "AP@10": rng.random(n),
            "domain": rng.choice(["art", "food", "travel"], n),
        }
    )
    table = breakdown(df, None, "domain", ["AP@10"], n_boot=100).set_index("value")
    oracle = df.groupby("domain")["AP@10"].agg(["mean", "size"])
    for value, row in oracle.iterrows():
        assert table.loc[value, "AP@10"] == pytest.approx(row["mean"], abs=1e-12)
        assert table.loc[value, "n_queries"] == row["size"]
        assert table.loc[value, "AP@10_lo"] <= row["mean"] <= table.loc[value, "AP@10_hi"]


def test_breakdown_of_scalar_cells_equals_the_per_cell_path():
    # scalar cells take a one-pass path; one list cell sends the same values down the per-cell loop
    rng = np.random.default_rng(4)
    n = 400
    choices = np.array(["a", "b", True, False, 3, 2.5, None, float("nan"), pd.NA, np.str_("a")], dtype=object)
    cells = rng.choice(choices, n)
    df = pd.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(n)],
            "group_id": [f"g{i // 4}" for i in range(n)],
            "scored": True,
            "AP@10": rng.random(n),
            "field": pd.Series(cells, dtype=object),
        }
    )
    with_list = df.copy()
    with_list.loc[n, ["query_id", "group_id", "scored", "AP@10"]] = ["q_list", "g_list", True, 0.5]
    with_list.at[n, "field"] = ["zz"]
    fast = breakdown(df, None, "field", ["AP@10"], n_boot=50)
    slow = breakdown(with_list, None, "field", ["AP@10"], n_boot=50)
    slow = slow[slow["value"] != "zz"].reset_index(drop=True)
    assert MISSING in set(fast["value"])
    assert fast["n_queries"].sum() == n
    pd.testing.assert_frame_equal(fast, slow)


def test_a_runs_breakdown_parts_equal_a_groupby_of_its_scored_rows_for_every_field():
    """`harness.report.breakdown_parts` reads the metrics and groups once for all fields: each field's table
    has the run's name, the scored rows' counts and means of a pandas groupby, and intervals around them."""
    from types import SimpleNamespace

    from cir_demo.benchmarks.schema import Benchmark
    from cir_demo.harness.report import breakdown_parts

    rng = np.random.default_rng(7)
    n = 240
    domains, tones = rng.choice(["art", "food", "travel"], n), rng.choice(["LIGHTEST", "DARKEST", None], n)
    singles = rng.random(n) < 0.5
    queries = [
        Query(
            f"q{i}",
            ("a",),
            "i",
            f"g{i // 4}",
            Judgments(["p"]),
            meta={"domain": str(domains[i]), "skin_tone_bucket": tones[i], "is_single": bool(singles[i])},
        )
        for i in range(n)
    ]
    bench = Benchmark("toy", "pinpoint", queries, ["p"])
    metrics = ["AP@10", "precision@10"]
    per_query = query_meta_frame(queries).assign(scored=rng.random(n) > 0.1, **{m: rng.random(n) for m in metrics})
    parts = breakdown_parts(bench, SimpleNamespace(name="run-a", per_query=per_query), n_boot=200)
    assert set(parts) == {"domain", "skin_tone_bucket", "is_single"}
    scored = per_query[per_query["scored"]].fillna({"skin_tone_bucket": MISSING})
    for field, table in parts.items():
        assert list(table.columns[:3]) == ["run", "field", "value"] and set(table["run"]) == {"run-a"}
        oracle = scored.groupby(field)
        got = table.set_index("value")
        assert sorted(map(str, got.index)) == sorted(map(str, oracle.size().index))
        for value, rows in oracle:
            value = value[0] if isinstance(value, tuple) else value
            assert got.loc[value, "n_queries"] == len(rows)
            assert got.loc[value, "n_groups"] == rows["group_id"].nunique()
            for m in metrics:
                assert got.loc[value, m] == pytest.approx(rows[m].mean(), abs=1e-12)
                assert got.loc[value, f"{m}_lo"] <= rows[m].mean() <= got.loc[value, f"{m}_hi"]
    # a run without a scored row: each field's table is empty, with its columns
    none_scored = SimpleNamespace(name="run-b", per_query=per_query.assign(scored=False))
    empty = breakdown_parts(bench, none_scored, n_boot=200)
    assert set(empty) == set(parts)
    for field, table in empty.items():
        assert table.empty and list(table.columns) == list(parts[field].columns), field


def test_breakdown_unknown_field_and_metric():
    with pytest.raises(UnknownNameError, match="skin_tone_bucket"):
        breakdown(per_query_frame(), meta_frame(), "skin_tone", ["AP@10"])
    with pytest.raises(UnknownNameError, match="AP@10"):
        breakdown(per_query_frame(), meta_frame(), "skin_tone_bucket", ["AP@5"])


def test_metric_cis_and_compare_runs():
    a = per_query_frame()
    b = a.assign(**{"AP@10": a["AP@10"] + 0.1})
    cis = metric_cis(a, ["AP@10"], n_boot=100)
    assert cis.iloc[0]["mean"] == pytest.approx(np.mean([0.2, 0.4, 1.0, 0.0, 0.5]))
    assert cis.iloc[0]["n_queries"] == 5 and cis.iloc[0]["n_groups"] == 3
    cmp = compare_runs(a, b, ["AP@10"], n_boot=100)
    assert cmp.iloc[0]["diff"] == pytest.approx(0.1) and cmp.iloc[0]["n_queries"] == 5


def test_bootstrap_cis_equals_per_column_bootstrap_ci():
    from cir_demo.metrics.bootstrap import bootstrap_cis

    rng = np.random.default_rng(3)
    groups = rng.integers(0, 40, size=300)
    values = rng.random((300, 3))
    joint = bootstrap_cis(values, groups, n_boot=300, seed=5)
    for j in range(3):
        assert joint[j] == pytest.approx(bootstrap_ci(values[:, j], groups, n_boot=300, seed=5), abs=1e-12)
