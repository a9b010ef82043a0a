"""Results of record across world seeds: aggregation against hand-computed values, resume, refusals."""

import json

import pytest

from cir_demo.cli import main
from cir_demo.harness.seed_record import METRICS, aggregate, read_seed_metrics, render_markdown


def _metrics(values: dict[str, dict[str, float]]) -> dict:
    return {
        "runs": [{"metrics": {"model": run, **{m: vals.get(m, 0.0) for m in METRICS}}} for run, vals in values.items()]
    }


def _seed_folder(root, seed, test, comp=None):
    folder = root / f"seed-{seed}"
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(_metrics(test)))
    if comp is not None:
        (folder / "compositional").mkdir()
        (folder / "compositional" / "metrics.json").write_text(json.dumps(_metrics(comp)))
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
    assert (tmp_path / "rec" / "record.md").read_text().startswith("# Results of record: world seeds 7, 11")


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
