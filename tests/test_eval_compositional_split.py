"""The world's compositional test split: loaded over the test split's corpus, evaluated beside it by the
default `--eval` (OUT/compositional/, report.md's 'Both test splits' table), alone with `--split
compositional`, a bad split refused in one line, and its runs kept apart from the test split's."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from cir_demo.harness import cli as eval_cli


def _eval(argv) -> int:
    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    return eval_cli.run(p.parse_args(argv))


# --------------------------------------------------------------------------- loader
def test_the_compositional_split_shares_the_test_corpus_with_its_own_queries():
    from cir_demo.engine import benchmark_fingerprint
    from cir_demo.index.build import benchmark_index_name
    from cir_demo.world import load_world
    from cir_demo.world.loader import load_intents

    test = load_world(size="tiny", progress=False)
    comp = load_world(size="tiny", split="compositional", progress=False)
    intents = load_intents(size="tiny", split="compositional")
    manifest_counts = comp.info["counts"]
    assert comp.info["split"] == "compositional" and test.info["split"] == "test"
    assert len(intents) == manifest_counts["compositional_intents"] > 0
    assert len(comp.queries) == 6 * len(intents) == manifest_counts["compositional_queries"]
    assert all(it["edit"] for it in intents)
    assert comp.corpus_ids == test.corpus_ids  # one corpus, one index
    assert benchmark_index_name(comp) == benchmark_index_name(test) == "world-tiny-s0"
    assert not {q.query_id for q in comp.queries} & {q.query_id for q in test.queries}
    assert not {q.group_id for q in comp.queries} & {q.group_id for q in test.queries}
    assert {q.group_id for q in comp.queries} == {it["intent_id"] for it in intents}
    assert all(q.query_id.startswith("wn") for q in comp.queries)
    # references: appended after the test split's in the one reference table, so every id resolves
    test_refs = {r for q in test.queries for r in q.reference_ids}
    comp_refs = {r for q in comp.queries for r in q.reference_ids}
    assert not comp_refs & test_refs and all(r.startswith("w-te-r") for r in comp_refs)
    assert min(int(r[6:]) for r in comp_refs) > max(int(r[6:]) for r in test_refs)
    comp.images.open(sorted(comp_refs)[-1])
    # judgments are those of the intent, on corpus images
    by_id = {it["intent_id"]: it for it in intents}
    corpus = set(comp.corpus_ids)
    for q in comp.queries[::37]:
        assert set(q.judgments.positives) == set(by_id[q.group_id]["positives"]) <= corpus
    # stored runs, reranker scores and per-query caches are keyed by the fingerprint: apart
    assert benchmark_fingerprint(comp) != benchmark_fingerprint(test)
    # the test split's key: the world's pixels (its content checksum, render size and renderer code)
    from cir_demo.world.loader import pixels_fingerprint

    assert benchmark_fingerprint(test) == f"world-{pixels_fingerprint(test.info['checksum'])[:16]}"


def test_a_bad_split_is_one_clear_error_listing_the_splits(tmp_path, capsys):
    from cir_demo.world import load_world
    from cir_demo.world.loader import load_intents

    for load in (load_world, load_intents):
        with pytest.raises(ValueError, match="world split must be one of test, compositional, train, got 'val'"):
            load(size="tiny", split="val")
    out = tmp_path / "run"
    assert _eval(["--world-size", "tiny", "--split", "val", "--rerank", "none", "--out", str(out)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--split val" in err[0] and "test, compositional, train" in err[0], err
    assert not out.exists()


def test_the_split_flag_is_declared_and_travels_to_a_child_command():
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments, benchmark_flags, benchmark_kwargs
    from cir_demo.benchmarks.registry import BENCHMARKS
    from cir_demo.world.loader import SPLITS

    assert BENCHMARKS["world"].splits == SPLITS and BENCHMARKS["world"].eval_splits == ("test", "compositional")
    argv = benchmark_flags("world", {"size": "tiny", "split": "compositional"})
    assert argv[argv.index("--split") + 1] == "compositional"
    parser = argparse.ArgumentParser()
    add_benchmark_arguments(parser)
    assert benchmark_kwargs(parser.parse_args(argv)) == {"size": "tiny", "split": "compositional"}


def test_the_apps_background_run_computes_the_served_split_only():
    from cir_demo.explorer import ServiceConfig
    from cir_demo.ui.app import served_split_kwargs

    assert served_split_kwargs(ServiceConfig(benchmark="world", benchmark_kwargs={"size": "tiny"})) == {
        "size": "tiny",
        "split": "test",
    }
    assert served_split_kwargs(ServiceConfig(benchmark="world", benchmark_kwargs={"split": "compositional"})) == {
        "split": "compositional"
    }
    assert served_split_kwargs(ServiceConfig(benchmark="cirr", benchmark_kwargs={"root": "x"})) == {"root": "x"}


# --------------------------------------------------------------------------- --eval
def _table(report: str, title: str) -> tuple[list[str], list[list[str]]]:
    """The markdown table under `## title` of a report: (header, rows)."""
    section = report.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return cells[0], cells[2:]


def _metrics(folder: Path) -> dict[str, dict]:
    data = json.loads((folder / "metrics.json").read_text())
    return {r["metrics"]["model"]: r["metrics"] for r in data["runs"]}


@pytest.fixture(scope="module")
def both_splits_run(tiny_setup, tmp_path_factory, one_torch_thread):
    from cir_demo.testing.explorer import VERIFIER

    _, names = tiny_setup
    out = tmp_path_factory.mktemp("comp") / "run"
    rc = _eval(
        [
            "--world-size",
            "tiny",
            "--limit",
            "4",
            "--retrievers",
            ",".join(names[:2]),
            "--rerank",
            VERIFIER,
            "--rerank-top-n",
            "10",
            "--n-boot",
            "20",
            "--no-plots",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    return out, names[:2]


def test_the_default_eval_writes_both_splits_and_the_side_by_side_table(both_splits_run):
    from cir_demo.utils.owned_folder import read_manifest

    out, names = both_splits_run
    comp = out / "compositional"
    for folder in (out, comp):
        for f in ("metrics.csv", "metrics.json", "per_query.csv", "breakdowns.csv", "report.md", "run_info.json"):
            assert (folder / f).is_file(), folder / f
        for n in names:
            assert (folder / "results" / f"{n}.json").is_file() and (folder / "results" / f"{n}+rerank.json").is_file()
    assert not (comp / "run_manifest.json").exists()
    listed = set(read_manifest(out)["files"])  # one manifest: --overwrite replaces the subfolder's files too
    assert {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - listed == {"run_manifest.json"}
    # the test split stays at the top, the compositional one in its folder, each with its own queries
    top_q = pd.read_csv(out / "per_query.csv")["query_id"]
    comp_q = pd.read_csv(comp / "per_query.csv")["query_id"]
    assert top_q.str.match(r"w\d").all() and comp_q.str.startswith("wn").all()
    assert json.loads((comp / "run_info.json").read_text())["benchmark_info"]["split"] == "compositional"
    assert "timings_s" in json.loads((out / "run_info.json").read_text())

    report = (out / "report.md").read_text()
    header, rows = _table(report, "Both test splits")
    assert "Both test splits" not in (comp / "report.md").read_text()
    test_m, comp_m = _metrics(out), _metrics(comp)
    checked = 0
    for row in rows:
        cell = dict(zip(header, row))
        name = cell["retriever"]
        for split, m in (("test", test_m), ("compositional", comp_m)):
            for metric in ("mAP@10", "NegRecall@10"):
                assert float(cell[f"{metric} {split}"]) == pytest.approx(m[name][metric], abs=5e-5)
                assert float(cell[f"{metric} reranked {split}"]) == pytest.approx(m[f"{name}+rerank"][metric], abs=5e-5)
                checked += 2
            gain = m[f"{name}+rerank"]["mAP@10"] - m[name]["mAP@10"]
            assert float(cell[f"reranker's mAP@10 gain {split}"]) == pytest.approx(gain, abs=5e-5)
    assert sorted(r[0] for r in rows) == sorted(names) and checked == 8 * len(names)
    # `python -m cir_demo record` reads both splits of such a run folder
    from cir_demo.harness.seed_record import read_seed_metrics

    record = read_seed_metrics(out)
    assert set(record) == {"test", "compositional"}
    assert record["compositional"][names[0]]["mAP@10"] == pytest.approx(comp_m[names[0]]["mAP@10"])
    # ... and the judge's per-world differences with their intervals: each difference is the metrics'
    # difference (the official metric code is the oracle, sensitivity included), inside a real interval
    from cir_demo.harness.seed_record import paired_effects

    for split, m in (("test", test_m), ("compositional", comp_m)):
        effects = paired_effects(out, split)
        assert sorted(effects) == sorted(names)
        for name in names:
            for metric in ("mAP@10", "NegRecall@10", "ling_sens_paraphrase_range"):
                e = effects[name][metric]
                # the files round to 6 significant digits
                assert e["diff"] == pytest.approx(m[f"{name}+rerank"][metric] - m[name][metric], abs=2e-6)
                assert e["lo"] <= e["hi"] and e["n_boot"] == 20


def test_runs_of_the_two_splits_are_listed_apart(both_splits_run):
    from cir_demo.engine import benchmark_fingerprint
    from cir_demo.explorer.runs import load_report
    from cir_demo.store.folders import list_runs
    from cir_demo.world import load_world

    out, _ = both_splits_run
    test = load_world(size="tiny", progress=False).limit(4)
    comp = load_world(size="tiny", split="compositional", progress=False).limit(4)
    for_test = [
        r.path for r in list_runs("world", benchmark_fingerprint(test), root=out.parent) if r.matches == "fingerprint"
    ]
    for_comp = [
        r.path for r in list_runs("world", benchmark_fingerprint(comp), root=out.parent) if r.matches == "fingerprint"
    ]
    assert for_test == [out] and for_comp == [out / "compositional"]
    summary = list_runs("world", benchmark_fingerprint(test), root=out.parent)[0]
    assert any("compositional test split" in line for line in load_report(summary).info)


def test_the_shipped_form_of_a_run_leaves_out_every_results_folder(both_splits_run, tmp_path):
    from cir_demo.index.prebuilt_run import pack_run, read_shipped_manifest

    out, _ = both_splits_run
    shipped = pack_run(out, tmp_path / "eval", {"benchmark_fingerprint": "x"}, ["eval"], {})
    files = set(read_shipped_manifest(shipped)["files"])
    assert "compositional/metrics.json" in files and "compositional/run_info.json" in files
    assert not [f for f in files if "results/" in f]


def test_eval_split_compositional_alone(tiny_setup, tmp_path, one_torch_thread):
    _, names = tiny_setup
    out = tmp_path / "run"
    assert (
        _eval(
            [
                "--world-size",
                "tiny",
                "--split",
                "compositional",
                "--limit",
                "3",
                "--retrievers",
                names[0],
                "--rerank",
                "none",
                "--n-boot",
                "0",
                "--no-plots",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert not (out / "compositional").exists()
    assert pd.read_csv(out / "per_query.csv")["query_id"].str.startswith("wn").all()
    assert len(pd.read_csv(out / "per_query.csv")) == 3 * 6
    info = json.loads((out / "run_info.json").read_text())
    assert info["benchmark_info"]["split"] == "compositional" and info["benchmark_fingerprint"].endswith(
        "-compositional"
    )
    assert "Both test splits" not in (out / "report.md").read_text()
    assert re.search(r"\| " + re.escape(names[0]) + r" \|", (out / "report.md").read_text())


def test_the_app_serves_the_compositional_split_and_reuses_its_stored_run(both_splits_run, monkeypatch):
    """`python app.py --split compositional`: the explorer's queries, columns and paraphrase table are the
    compositional split's, and the compositional folder of a default `--eval` run is its complete stored run
    (the test split's service finds the run's top instead); an app reranking to another depth than the
    run did reads its first stages, never its reranked runs."""
    from cir_demo.explorer import ServiceConfig, build_service
    from cir_demo.explorer.precompute import complete_run
    from cir_demo.testing.explorer import VERIFIER

    out, names = both_splits_run
    monkeypatch.setenv("CIR_DEMO_RUNS", str(out.parent))
    services = {
        split: build_service(
            ServiceConfig(
                benchmark="world",
                benchmark_kwargs={"size": "tiny", "split": "test" if split == "top20" else split},
                retrievers=tuple(names),
                reranker=VERIFIER,
                warm_thumbnails=False,
                limit_groups=4,
                default_top_n=top_n,
            )
        )
        for split, top_n in (("test", 10), ("compositional", 10), ("top20", 20))
    }
    try:
        comp = services["compositional"]
        ids = list(comp.table["query_id"])
        assert len(ids) == 24 and all(i.startswith("wn") for i in ids)
        view = comp.compare(ids[0], list(names), k=10)
        stored = json.loads((out / "compositional" / "results" / f"{names[0]}.json").read_text())
        assert view.columns[0].ranking[:10] == stored[comp.benchmark.results_key(ids[0])]["retrieved_items"][:10]
        assert comp.paraphrase_table(ids[0], list(names)) is not None
        assert complete_run(comp) == out / "compositional"  # the run reranked the top 10, as these apps do
        assert complete_run(services["test"]) == out
        assert complete_run(services["top20"]) is None  # an app reranking the top 20 asks for other runs
        assert services["top20"].store.stored_rows(f"{names[0]}+rerank") is None
        assert services["top20"].store.stored_rows(names[0]) is not None  # its first stage is the same run
    finally:
        for s in services.values():
            s.engine.close()


def test_overwrite_moves_the_earlier_run_with_its_split_folder_aside_whole(
    tiny_setup, tmp_path, one_torch_thread, capsys
):
    _, names = tiny_setup
    out = tmp_path / "run"
    argv = [
        "--world-size",
        "tiny",
        "--limit",
        "2",
        "--retrievers",
        names[0],
        "--rerank",
        "none",
        "--n-boot",
        "0",
        "--no-plots",
        "--out",
        str(out),
    ]
    assert _eval(argv) == 0
    (out / "compositional" / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert _eval(argv) == 2  # an earlier run: only with --overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert _eval([*argv, "--overwrite"]) == 0
    (aside,) = out.parent.glob(f"{out.name}.replaced-*")  # the earlier folder, whole
    assert (aside / "compositional" / "notes.txt").read_text() == "mine"
    assert pd.read_csv(out / "compositional" / "metrics.csv")["model"].tolist() == [names[0]]


def test_a_dry_run_counts_the_queries_of_both_splits(tiny_setup, capsys):
    from cir_demo.world import load_world

    _, names = tiny_setup
    assert _eval(["--world-size", "tiny", "--retrievers", names[0], "--rerank", "none", "--dry-run"]) == 0
    n = len(load_world(size="tiny", progress=False).queries) + len(
        load_world(size="tiny", split="compositional", progress=False).queries
    )
    assert f"and {n} queries" in capsys.readouterr().out
