"""FashionIQ: the adapter on the official val layout, CLIP4Cir's caption joining, and parity of `--eval`
with `compute_fiq_val_metrics` (re-implemented below: per category, a full ranking of that category's
gallery; Recall@10/50 per category, then their plain mean) on the world exported to FashionIQ."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cir_demo.benchmarks.fashioniq import CATEGORIES, export_fashioniq, join_captions, load_fashioniq
from cir_demo.benchmarks.schema import BenchmarkError
from cir_demo.cli import main
from cir_demo.metrics import fashioniq


def fiq_folder(root: Path, captions: dict, galleries: dict) -> Path:
    (root / "captions").mkdir(parents=True, exist_ok=True)
    (root / "image_splits").mkdir(parents=True, exist_ok=True)
    for c in CATEGORIES:
        (root / "captions" / f"cap.{c}.val.json").write_text(json.dumps(captions.get(c, [])))
        (root / "image_splits" / f"split.{c}.val.json").write_text(json.dumps(galleries.get(c, [])))
    return root


DRESS = [
    {
        "target": "B008BHCT58",
        "candidate": "B003FGW7MK",
        "captions": ["is solid black with no sleeves", "is black with straps"],
    },
    {"target": "B003FGW7MK", "candidate": "B008BHCT58", "captions": ["Is Longer.", "has a belt?"]},
]
SHIRT = [{"target": "S2", "candidate": "S1", "captions": ["is blue", "has a collar"]}]
TOPTEE = [{"target": "T1", "candidate": "T2", "captions": ["is red", "shorter sleeves"]}]
GALLERIES = {"dress": ["B003FGW7MK", "B008BHCT58", "D3"], "shirt": ["S1", "S2", "D3"], "toptee": ["T1", "T2"]}


def test_joins_the_two_captions_as_clip4cir_validation_does():
    assert (
        join_captions("is solid black with no sleeves", "is black with straps")
        == "Is solid black with no sleeves and is black with straps"
    )
    # strip('.?, ') at both ends; capitalize() lowercases the rest of the first caption
    assert join_captions(" Is Longer.", "has a belt?") == "Is longer and has a belt"
    assert join_captions("", "is grey") == " and is grey"  # an empty first caption, as in the real shirt file


def test_reads_the_official_layout_with_one_gallery_per_category(tmp_path):
    bench = load_fashioniq(fiq_folder(tmp_path, {"dress": DRESS, "shirt": SHIRT, "toptee": TOPTEE}, GALLERIES))
    assert [q.query_id for q in bench.queries] == ["dress-0", "dress-1", "shirt-0", "toptee-0"]
    q = bench.query("dress-1")
    assert q.instruction == "Is longer and has a belt" and q.meta["captions"] == ("Is Longer.", "has a belt?")
    assert q.meta["category"] == "dress" and q.target_id == "B003FGW7MK" and q.reference_ids == ("B008BHCT58",)
    assert q.judgments.gallery == frozenset(GALLERIES["dress"])
    assert bench.query("dress-0").judgments.gallery is q.judgments.gallery  # shared, not copied
    assert bench.corpus_ids == ["B003FGW7MK", "B008BHCT58", "D3", "S1", "S2", "T1", "T2"]  # union, file order
    assert load_fashioniq(tmp_path, categories="shirt").corpus_ids == GALLERIES["shirt"]


def test_errors_name_file_entry_and_field(tmp_path):
    bad = [
        dict(DRESS[0], target="S1"),
        dict(DRESS[1], captions=["only one"]),
        {"candidate": "D3"},
        dict(DRESS[0], captions=["", "is red"]),
    ]  # the real shirt and toptee files have empty captions
    with pytest.raises(BenchmarkError) as exc:
        load_fashioniq(fiq_folder(tmp_path, {"dress": bad, "shirt": SHIRT, "toptee": TOPTEE}, GALLERIES))
    text = str(exc.value)
    assert "cap.dress.val.json, entry 0, field 'target': target 'S1' is not in split.dress.val.json" in text
    assert "cap.dress.val.json, entry 1, field 'captions': expected a list of two relative captions" in text
    assert "cap.dress.val.json, entry 3, field 'captions': an empty caption (kept" in text
    assert "cap.dress.val.json, entry 2, field 'target': missing target image name" in text
    with pytest.raises(BenchmarkError, match="choose among dress, shirt, toptee"):
        load_fashioniq(tmp_path, categories="skirt")


def test_a_run_over_the_union_is_cut_to_the_query_s_gallery(tmp_path):
    bench = load_fashioniq(fiq_folder(tmp_path, {"dress": DRESS, "shirt": SHIRT, "toptee": TOPTEE}, GALLERIES))
    q = bench.query("shirt-0")  # gallery S1, S2, D3: T1, T2, B... are not ranked for it
    ranking = ["T1", "B003FGW7MK", "S1", "T2", "D3", "S2"]
    _, df = fashioniq.evaluate({"shirt-0": ranking}, [q], ks=(1, 2, 3))
    assert df.iloc[0]["target_rank"] == 3 and tuple(df.iloc[0][["Recall@1", "Recall@2", "Recall@3"]]) == (0, 0, 1)
    # the reference is not deleted (unlike CIRR): S1 ranked first costs a rank
    with pytest.raises(BenchmarkError, match="query shirt-0, field 'ranking': the ranking repeats an image"):
        fashioniq.evaluate({"shirt-0": ["S2", "S2"]}, [q])


# --------------------------------------------------------------------------- parity through --eval
def clip4cir_fiq_hits(bench, scores) -> dict:
    """Per category: rank that category's gallery by score (ties by name descending, as a run dict is
    read), label the target; returns {category: (queries, hits in the top 10, hits in the top 50)}."""
    out = {}
    corpus = np.array(bench.corpus_ids)
    for c in CATEGORIES:
        rows = [i for i, q in enumerate(bench.queries) if q.meta["category"] == c]
        if not rows:
            continue
        gallery = json.loads((bench_root(bench) / "image_splits" / f"split.{c}.val.json").read_text())
        cols = np.array([bench.corpus_ids.index(g) for g in gallery])
        names = corpus[cols]
        name_rank = np.argsort(np.argsort([n.encode() for n in names]))
        sub = scores[np.ix_(rows, cols)]
        order = np.lexsort((np.broadcast_to(-name_rank, sub.shape), -sub), axis=1)
        labels = names[order] == np.array([bench.queries[i].target_id for i in rows])[:, None]
        assert (labels.sum(1) == 1).all()
        out[c] = (len(rows), int(labels[:, :10].sum()), int(labels[:, :50].sum()))
    return out


def fiq_metrics(hits: dict) -> dict:
    """CLIP4Cir's numbers from per-category hits: Recall@k per category, their plain mean, average_recall."""
    out = {}
    for c, (n, h10, h50) in hits.items():
        out[f"Recall@10/{c}"], out[f"Recall@50/{c}"] = h10 / n, h50 / n
    for k in (10, 50):
        out[f"Recall@{k}"] = float(np.mean([out[f"Recall@{k}/{c}"] for c in CATEGORIES]))
    out["average_recall"] = (out["Recall@10"] + out["Recall@50"]) / 2
    return out


def bench_root(bench) -> Path:
    return Path(bench.info["source"])


@pytest.fixture(scope="module")
def world_fiq(tmp_path_factory):
    from cir_demo.world import load_world

    root = tmp_path_factory.mktemp("world_fiq")
    export_fashioniq(load_world(size="tiny", progress=False).limit(40), root, skip_two_image=True)  # unequal categories
    return root


def test_eval_matches_clip4cir_per_category_and_average(world_fiq, tmp_path):
    bench = load_fashioniq(world_fiq)
    counts = {c: sum(q.meta["category"] == c for q in bench.queries) for c in CATEGORIES}
    assert min(counts.values()) > 10 and len(set(counts.values())) > 1  # the average is not the pooled mean
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 11, size=(len(bench.queries), len(bench.corpus_ids))).astype(float) / 10
    for i, q in enumerate(bench.queries):
        # Hit rates differ by category, so the per-category average differs from the pooled mean.
        if i % 3 == 0 or (q.meta["category"] == CATEGORIES[0] and i % 3 == 1):
            scores[i, bench.corpus_ids.index(q.target_id)] = 1.1
    run = {q.query_id: dict(zip(bench.corpus_ids, map(float, row))) for q, row in zip(bench.queries, scores)}
    (tmp_path / "run.json").write_text(json.dumps(run))
    assert (
        main(
            [
                "eval",
                "--benchmark",
                "fashioniq",
                "--root",
                str(world_fiq),
                "--results-json",
                str(tmp_path / "run.json"),
                "--out",
                str(tmp_path / "out"),
                "--n-boot",
                "0",
                "--no-plots",
            ]
        )
        == 0
    )
    got = json.loads((tmp_path / "out" / "metrics.json").read_text())["runs"][0]["metrics"]
    ref = fiq_metrics(clip4cir_fiq_hits(bench, scores))
    for name, value in ref.items():
        assert abs(got[name] - value) <= 1e-9, name
    assert 0 < ref["Recall@10"] < ref["Recall@50"] < 1
    assert got["Recall@10_pooled"] != pytest.approx(got["Recall@10"], abs=1e-12)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "### By `category`" in report


def test_eval_writes_the_official_table_with_intervals_and_paired_rows(world_fiq, tmp_path):
    """metrics.csv: per-category Recall@10/50, their average and average_recall with 95% intervals, pooled
    named as such; paired.csv: a row for each, the average's difference the mean of the categories' ones."""
    from cir_demo.metrics.bootstrap import bootstrap_ci

    bench = load_fashioniq(world_fiq)
    runs = {}
    for name, every in (("good", 1), ("poor", 4)):  # good puts the target first everywhere, poor on every 4th
        runs[name] = {
            q.query_id: ([q.target_id] if i % every == 0 else [])
            + [c for c in bench.corpus_ids if c != q.target_id][:60]
            for i, q in enumerate(bench.queries)
        }
        (tmp_path / f"{name}.json").write_text(json.dumps(runs[name]))
    out = tmp_path / "out"
    assert (
        main(
            [
                "eval",
                "--benchmark",
                "fashioniq",
                "--root",
                str(world_fiq),
                "--results-json",
                str(tmp_path / "poor.json"),
                str(tmp_path / "good.json"),
                "--out",
                str(out),
                "--n-boot",
                "300",
                "--no-plots",
            ]
        )
        == 0
    )
    m = pd.read_csv(out / "metrics.csv").set_index("model")
    pq = pd.read_csv(out / "per_query.csv", dtype={"query_id": str, "group_id": str})
    cats = [c for c in CATEGORIES if c in set(pq["category"])]
    for run in ("good", "poor"):
        rows = pq[pq["run"] == run]
        for k in (10, 50):
            per_cat = [rows[rows["category"] == c][f"Recall@{k}"].mean() for c in cats]
            assert m.loc[run, f"Recall@{k}"] == pytest.approx(np.mean(per_cat), abs=1e-4)
            for i, c in enumerate(cats):  # each category's interval: a bootstrap over that category's groups
                part = rows[rows["category"] == c]
                _, lo, hi = bootstrap_ci(part[f"Recall@{k}"].to_numpy(), part["group_id"].to_numpy(), 300, seed=1 + i)
                assert (m.loc[run, f"Recall@{k}/{c}_ci_lo"], m.loc[run, f"Recall@{k}/{c}_ci_hi"]) == pytest.approx(
                    (lo, hi), abs=1e-4
                )
        for agg in ("Recall@10", "Recall@50", "average_recall", "Recall@10_pooled", "Recall@50_pooled"):
            assert m.loc[run, f"{agg}_ci_lo"] <= m.loc[run, agg] <= m.loc[run, f"{agg}_ci_hi"]
    assert m.loc["poor", "Recall@10_ci_hi"] < m.loc["poor", "Recall@10"] + 0.5 < m.loc["good", "Recall@10"] + 0.5
    paired = pd.read_csv(out / "paired.csv").set_index("metric")
    assert {
        "Recall@10",
        "Recall@50",
        "average_recall",
        "Recall@10_pooled",
        "Recall@50_pooled",
        *(f"Recall@10/{c}" for c in cats),
    } <= set(paired.index)
    assert paired.loc["Recall@10", "diff"] == pytest.approx(
        np.mean([paired.loc[f"Recall@10/{c}", "diff"] for c in cats]), abs=1e-5
    )
    assert paired.loc["Recall@10", "p_value"] == "< 0.00333"  # good beats poor in every resample
    assert "Recall@10_pooled" in (out / "report.md").read_text()
    from cir_demo.explorer.runs import load_report
    from cir_demo.explorer.views import RunSummary

    shown = load_report(RunSummary(out, "out", "fingerprint")).metrics.set_index("run")  # the Report's table
    assert list(shown.columns[:6]) == [f"Recall@{k}/{c}" for c in CATEGORIES for k in (10, 50)]
    assert shown.loc["good", "Recall@10/dress"] == "1.0000 [1.0000, 1.0000]"
    # which mean is which, unambiguously: the plain name is the category average (the official number)
    assert "`Recall@10`, `Recall@50`: **category average**" in (out / "report.md").read_text()
    from cir_demo.benchmarks.families import metric_family
    from cir_demo.ui.report import labelled

    table, defs = labelled(shown.reset_index(), metric_family("fashioniq"))
    assert {"Recall@10 category average", "Recall@10 pooled", "Recall@10 dress"} <= set(table.columns)
    by_label = dict(line.split("**: ", 1) for line in defs.split("  \n") if "**: " in line)
    average = by_label["**Recall@10 category average"]  # (markdown-escaped)
    assert "computed per category" in average and "averaged over them" in average and "the official number" in average
    assert "over all queries at once" in by_label["**Recall@10 pooled"]
    assert "not the official category average" in by_label["**Recall@10 pooled"]
    assert "**category average**" in defs and "**pooled**" in defs  # the note under the definitions
