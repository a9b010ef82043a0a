"""Results of record across world seeds: aggregation against hand-computed values, resume, refusals."""

import json

import pytest

from cir_demo.cli import main
from cir_demo.harness.seed_record import METRICS, aggregate, paired_effects, read_seed_metrics, render_markdown


def _metrics(values: dict[str, dict[str, float]]) -> dict:
    return {
        "runs": [{"metrics": {"model": run, **{m: vals.get(m, 0.0) for m in METRICS}}} for run, vals in values.items()]
    }


# Per-query AP@10 of two intents (three paraphrases each): paraphrase ranges 0.3 and 0.0 for `cir`,
# 0.1 and 0.2 for `cir+rerank` (means 0.15 and 0.15: sensitivity unchanged on average).
AP10 = {"cir": [0.1, 0.4, 0.2, 0.5, 0.5, 0.5], "cir+rerank": [0.3, 0.2, 0.2, 0.6, 0.4, 0.5]}
PAIRED = "a,b,metric,n_queries,diff,lo,hi,p_value,mean_a,mean_b,n_groups,n_boot\n"


def _write_eval_files(folder, values, paired_rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(_metrics(values)))
    lines = ["run,query_id,group_id,scored,AP@10"]
    for run, aps in AP10.items():
        lines += [f"{run},q{i},g{i // 3},True,{ap}" for i, ap in enumerate(aps)]
    (folder / "per_query.csv").write_text("\n".join(lines) + "\n")
    rows = [f"cir,cir+rerank,{m},6,{d},{lo},{hi},0.01,0,0,2,200" for m, (d, lo, hi) in paired_rows.items()]
    (folder / "paired.csv").write_text(PAIRED + "".join(r + "\n" for r in rows))


def _seed_folder(root, seed, test, comp=None):
    folder = root / f"seed-{seed}"
    _write_eval_files(folder, test, INTERVALS[seed][0])
    if comp is not None:
        _write_eval_files(folder / "compositional", comp, INTERVALS[seed][1])
    (folder / "run_manifest.json").write_text('{"written_by": "cir_demo", "kind": "run", "files": {}}')
    return folder


SEEDS = {
    7: (
        {"cir": {"mAP@10": 0.10, "NegRecall@10": 0.30}, "cir+rerank": {"mAP@10": 0.20, "NegRecall@10": 0.20}},
        {"cir": {"mAP@10": 0.10, "NegRecall@10": 0.30}, "cir+rerank": {"mAP@10": 0.12, "NegRecall@10": 0.31}},
    ),
    11: (
        {"cir": {"mAP@10": 0.20, "NegRecall@10": 0.30}, "cir+rerank": {"mAP@10": 0.26, "NegRecall@10": 0.25}},
        {"cir": {"mAP@10": 0.10, "NegRecall@10": 0.30}, "cir+rerank": {"mAP@10": 0.09, "NegRecall@10": 0.28}},
    ),
}


# (difference, lo, hi) of the paired bootstrap per seed: (test split, compositional split)
INTERVALS = {
    7: (
        {"mAP@10": (0.10, 0.05, 0.15), "NegRecall@10": (-0.10, -0.12, -0.08)},
        {"mAP@10": (0.02, -0.01, 0.05), "NegRecall@10": (0.01, 0.005, 0.02)},
    ),
    11: (
        {"mAP@10": (0.06, 0.01, 0.11), "NegRecall@10": (-0.05, -0.09, 0.01)},
        {"mAP@10": (-0.01, -0.03, -0.002), "NegRecall@10": (-0.02, -0.04, 0.0)},
    ),
}


def test_intervals_count_the_worlds_whose_interval_excludes_zero(tmp_path):
    per_seed, intervals = {}, {}
    for s, v in SEEDS.items():
        folder = _seed_folder(tmp_path, s, *v)
        per_seed[s] = read_seed_metrics(folder)
        intervals[s] = {
            "test": paired_effects(folder, "test"),
            "compositional": paired_effects(folder, "compositional"),
        }
    rec = aggregate(per_seed, intervals)
    test, comp = rec["judge_intervals"]["test"]["cir"], rec["judge_intervals"]["compositional"]["cir"]
    # by hand: test mAP up with lo > 0 on both; test NegRecall down with hi < 0 on seed 7 only
    assert (test["mAP@10"]["holds_on"], test["mAP@10"]["loses_on"]) == (2, 0)
    assert (test["NegRecall@10"]["holds_on"], test["NegRecall@10"]["loses_on"]) == (1, 0)
    # compositional mAP: spans 0 on seed 7, excludes it the losing way on seed 11; NegRecall rises on seed 7
    assert (comp["mAP@10"]["holds_on"], comp["mAP@10"]["loses_on"]) == (0, 1)
    assert (comp["NegRecall@10"]["holds_on"], comp["NegRecall@10"]["loses_on"]) == (0, 1)
    assert test["mAP@10"]["mean_diff"] == pytest.approx(0.08)
    # the paraphrase sensitivity's difference, from the per-query rows: mean range 0.15 -> 0.15
    sens = intervals[7]["test"]["cir"]["ling_sens_paraphrase_range"]
    assert sens["diff"] == pytest.approx(0.0, abs=1e-12) and sens["n_groups"] == 2 and sens["lo"] <= sens["hi"]
    md = render_markdown(rec)
    assert (
        "| cir | compositional | Δ mAP@10 | +0.0200 [-0.0100, +0.0500] | -0.0100 [-0.0300, -0.0020] | 0 of 2 | 1 of 2 |"
        in md
    )


def test_a_record_without_the_paired_bootstrap_is_refused(tmp_path, capsys):
    for s, v in SEEDS.items():
        _seed_folder(tmp_path / "rec", s, *v)
    (tmp_path / "rec" / "seed-11" / "paired.csv").write_text(PAIRED)  # what --n-boot 0 leaves
    (tmp_path / "rec" / "record.json").write_text(json.dumps({"made_by": _made_by(tmp_path / "rec", SEEDS)}))
    assert main(["record", "--seeds", "7", "11", "--out", str(tmp_path / "rec")]) == 2
    err = capsys.readouterr().err
    assert "seed 11" in err and "--n-boot 0" in err and not (tmp_path / "rec" / "record.md").exists()


def test_aggregate_equals_hand_computed_means_ranges_and_holds(tmp_path):
    per_seed = {s: read_seed_metrics(_seed_folder(tmp_path, s, *v)) for s, v in SEEDS.items()}
    rec = aggregate(per_seed)
    cir = rec["splits"]["test"]["cir"]["mAP@10"]
    assert cir["mean"] == pytest.approx(0.15) and (cir["min"], cir["max"]) == (0.10, 0.20)
    gain = rec["judge"]["test"]["cir"]["mAP@10"]
    assert gain["mean"] == pytest.approx((0.10 + 0.06) / 2) and gain["holds_on_every_seed"]
    assert rec["judge"]["test"]["cir"]["NegRecall@10"]["holds_on_every_seed"]
    comp = rec["judge"]["compositional"]["cir"]
    assert not comp["mAP@10"]["holds_on_every_seed"] and comp["mAP@10"]["seeds_where_it_holds"] == 1
    assert not comp["NegRecall@10"]["holds_on_every_seed"]  # +0.01 on seed 7: no drop there
    md = render_markdown(rec)
    assert "(1/2)" in md and "## compositional split" in md and "0.1500 [0.1000, 0.2000]" in md


def _made_by(out, seeds, *eval_args) -> dict:
    """record.json's made_by for `seeds` as this code would write it, computed from the command line."""
    from cir_demo.harness.record_cli import seed_key

    return {
        str(s): seed_key(
            [
                "-m",
                "cir_demo",
                "eval",
                "--benchmark",
                "world",
                "--world-size",
                "default",
                "--world-seed",
                str(s),
                "--out",
                str(out / f"seed-{s}"),
                *eval_args,
            ]
        )
        for s in seeds
    }


def test_record_command_reuses_complete_seeds_and_writes_the_record(tmp_path, capsys):
    for s, v in SEEDS.items():
        _seed_folder(tmp_path / "rec", s, *v)
    (tmp_path / "rec" / "record.json").write_text(json.dumps({"made_by": _made_by(tmp_path / "rec", SEEDS)}))
    # an interrupted seed's --eval leaves its staging folder behind: the record resumes beside it
    (tmp_path / "rec" / ".partial" / "123-abc-seed-13").mkdir(parents=True)
    assert main(["record", "--seeds", "7", "11", "--out", str(tmp_path / "rec")]) == 0
    rec = json.loads((tmp_path / "rec" / "record.json").read_text())
    assert rec["seeds"] == [7, 11] and "compositional" in rec["splits"]
    assert rec["judge_intervals"]["test"]["cir"]["mAP@10"]["by_seed"]["7"]["lo"] == pytest.approx(0.05)
    assert (tmp_path / "rec" / "record.md").read_text().startswith("# Results of record: world seeds 7, 11")
    # record.csv: one row per world, split, retriever and measure, the numbers the seed folders hold
    import csv

    rows = list(csv.DictReader((tmp_path / "rec" / "record.csv").open()))
    assert len(rows) == 2 * 2 * 1 * 3  # worlds x splits x retrievers x measures
    for seed, (test, comp) in SEEDS.items():
        for split, values in (("test", test), ("compositional", comp)):
            for metric, (diff, lo, hi) in INTERVALS[seed][split == "compositional"].items():
                (row,) = [
                    r
                    for r in rows
                    if (r["world_seed"], r["split"], r["retriever"], r["measure"]) == (str(seed), split, "cir", metric)
                ]
                got = [float(row[k]) for k in ("first_stage", "reranked", "difference", "lo", "hi")]
                want = [values["cir"][metric], values["cir+rerank"][metric], diff, lo, hi]
                assert got == pytest.approx(want) and (row["world_size"], row["fold"]) == ("default", "0")


def test_record_refuses_a_folder_that_is_not_a_record_and_bad_metrics(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("keep me")
    assert main(["record", "--seeds", "7", "--out", str(tmp_path / "mine")]) == 2
    assert "thesis.tex" in capsys.readouterr().err
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "keep me"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.json").write_text('{"runs": [{"nothing": 1}]}')
    with pytest.raises(ValueError, match="metrics.json"):
        read_seed_metrics(bad)


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda key: {**key, "code_sha256": "0" * 64}, "code_sha256"),  # made by other code
        (lambda key: {**key, "weights_manifests": {"world-verifier/manifest.json": "0" * 64}}, "weights_manifests"),
        (lambda key: {**key, "eval_args": key["eval_args"] + ["--no-plots"]}, "eval_args"),  # other arguments
        (lambda key: None, "no record of what made it"),
    ],
)
def test_record_refuses_a_complete_seed_folder_made_otherwise(tmp_path, capsys, change, named):
    out = tmp_path / "rec"
    for s, v in SEEDS.items():
        _seed_folder(out, s, *v)
    made_by = _made_by(out, SEEDS)
    made_by["11"] = change(made_by["11"])
    (out / "record.json").write_text(json.dumps({"made_by": made_by}))
    assert main(["record", "--seeds", "7", "11", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "seed-11" in err and named in err and "seed-7 " not in err
    assert json.loads((out / "record.json").read_text())["made_by"] == made_by  # nothing rewritten
