"""Headless evaluation of rankings files: parsing, official CSV layout, report, no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cir_demo.benchmarks.schema import Benchmark, BenchmarkError, Judgments, Query
from cir_demo.store.score import evaluate_run
from cir_demo.harness.report import write_outputs
from cir_demo.results import read_results, write_results

REPO = Path(__file__).resolve().parent.parent


def small_benchmark() -> Benchmark:
    corpus = [f"img{i}" for i in range(20)]
    j1 = Judgments(positives=("img1", "img2", "img3"), negatives=("img4", "img5"))
    j2 = Judgments(positives=("img6",), negatives=())
    queries = [
        Query("query_00001", ("ref1",), "make it blue", "g1", j1, {"intent_category": "Swap"}),
        Query("query_00002", ("ref1",), "blue version please", "g1", j1, {"intent_category": "Swap"}),
        Query(
            "query_00003",
            ("ref2", "ref3"),
            "<img1> in the style of <img2>",
            "g2",
            j2,
            {"intent_category": "Composition"},
        ),
    ]
    return Benchmark("toy", "pinpoint", queries, corpus, results_id_format="pinpoint")


def naive_ap(ranking, positives, k):
    hits, total = 0, 0.0
    for i, item in enumerate(ranking[:k]):
        if item in positives:
            hits += 1
            total += hits / (i + 1)
    return total / min(len(positives), k) if positives else 0.0


def test_read_results_counts_problems(tmp_path):
    bench = small_benchmark()
    path = tmp_path / "run.json"
    path.write_text(
        json.dumps(
            {
                "_spec": {"model": "x"},
                "00001": {"retrieved_items": ["img1", "img1", "nope", "img4"]},
                "00002": {"retrieved_items": []},
                "99999": {"retrieved_items": ["img1"]},
            }
        )
    )
    rf = read_results(path, bench)
    assert rf.format == "pinpoint"
    assert rf.spec == {"model": "x"}
    assert set(rf.run) == {"query_00001", "query_00002"}
    assert rf.unknown_query_keys == ["99999"]
    assert rf.n_missing_queries == 1 and rf.n_empty == 1
    assert rf.n_unknown_ids == 1
    assert rf.queries_with_duplicates == ["00001"]
    assert rf.coverage == pytest.approx(2 / 3)
    text = "\n".join(str(w) for w in rf.warnings())
    for needle in ("99999", "coverage 66.7%", "empty ranking", "not in the corpus", "repeat an id"):
        assert needle in text


@pytest.mark.parametrize(
    "payload, needle",
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "fits none of the results formats tried"),
        ('{"00001": {"items": []}}', "retrieved_items"),
        ('{"00001": {"retrieved_items": ["img1"]}, "00002": ["img1"]}', "query '00002'"),
        ('{"00001": {"retrieved_items": "img1"}}', "list of image ids"),
        ('{"00001": {"retrieved_items": ["img1"], "scores": [1, 2]}}', "as long as retrieved_items"),
    ],
)
def test_malformed_results_name_file_and_query(tmp_path, payload, needle):
    path = tmp_path / "bad.json"
    path.write_text(payload)
    with pytest.raises(BenchmarkError) as exc:
        read_results(path, small_benchmark())
    assert str(path) in str(exc.value) and needle in str(exc.value)


def test_write_then_read_roundtrip(tmp_path):
    bench = small_benchmark()
    run = {"query_00001": ["img1", "img7"], "query_00003": ["img6"]}
    scores = {"query_00001": [0.9, 0.5], "query_00003": [0.4]}
    path = write_results(tmp_path / "r.json", bench, run, scores, spec={"recipe": "fusion"})
    raw = json.loads(path.read_text())
    assert set(raw) == {"_spec", "00001", "00003"}  # official PinPoint keys
    rf = read_results(path, bench)
    assert rf.run == run and rf.scores == scores and rf.spec == {"recipe": "fusion"}


def test_outputs_official_columns_and_values(tmp_path):
    bench = small_benchmark()
    run_a = {"query_00001": ["img1", "img9", "img2"], "query_00002": ["img4", "img1"], "query_00003": ["img6"]}
    run_b = {"query_00001": ["img9"], "query_00002": ["img3", "img2", "img1"], "query_00003": ["img0", "img6"]}
    evs = [evaluate_run(bench, run_a, "a", n_boot=200), evaluate_run(bench, run_b, "b", n_boot=200)]
    paths = write_outputs(bench, evs, tmp_path, n_boot=200)
    df = pd.read_csv(paths["metrics.csv"])
    from cir_demo.metrics.pinpoint import OFFICIAL_COLUMNS

    assert list(df.columns[: len(OFFICIAL_COLUMNS)]) == list(OFFICIAL_COLUMNS)
    row = df.set_index("model").loc["a"]
    expect = sum(naive_ap(run_a[q.query_id], q.positives, 10) for q in bench.queries) / 3
    assert row["mAP@10"] == pytest.approx(expect, abs=1e-4)
    assert row["total_queries"] == 3
    report = paths["report.md"].read_text()
    assert "Paired comparisons" in report and "By `intent_category`" in report
    assert (tmp_path / "plots" / "precision_vs_safety.png").stat().st_size > 1000
    per_query = pd.read_csv(paths["per_query.csv"])
    assert len(per_query) == 6 and set(per_query["run"]) == {"a", "b"}


def test_eval_cli_scores_jsonl_benchmark_without_torch(tmp_path):
    """`python app.py --eval --results-json` on a benchmark folder never imports torch (nor tqdm for one
    file), and gives the cyclic collector back as it found it."""
    from cir_demo.benchmarks.jsonl import export_jsonl_benchmark

    bench = small_benchmark()
    root = export_jsonl_benchmark(bench, tmp_path / "bench", image_mode="none")
    results = write_results(
        tmp_path / "mymodel.json", bench, {"query_00001": ["img1", "img2"], "query_00003": ["img6"]}
    )
    out = tmp_path / "out"
    code = (
        "import sys, runpy; sys.argv = ['app.py', '--eval', '--benchmark', 'jsonl', '--root', %r, "
        "'--results-json', %r, '--out', %r, '--n-boot', '50', '--no-plots'];\n"
        "import app; rc = app.main(sys.argv[1:]);\n"
        "assert 'torch' not in sys.modules, 'torch was imported';\n"
        "import gc; assert gc.isenabled(), 'the cyclic collector was left paused';\n"
        "assert 'tqdm' not in sys.modules, 'tqdm imported for one file';\n"
        "sys.exit(rc)" % (str(root), str(results), str(out))
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(out / "metrics.csv")
    assert df.loc[0, "model"] == "mymodel" and df.loc[0, "total_queries"] == 2
    assert "coverage" in proc.stderr  # one query missing -> warned
