"""Results readers: every run format, detection, the override, and errors that name file, entry and line."""

from __future__ import annotations

import json

import pytest

from cir_demo.benchmarks.schema import Benchmark, BenchmarkError, Judgments, Query
from cir_demo.results import FORMATS, parse_results, read_results, write_results


def bench() -> Benchmark:
    corpus = [f"img{i}" for i in range(12)]
    j = Judgments(positives=("img1", "img2"), negatives=("img3",))
    queries = [Query(f"q{i}", ("ref",), "text", f"g{i}", j) for i in range(3)]
    return Benchmark("toy", "edir", queries, corpus)


def test_run_dict_is_ranked_by_score_then_id_descending(tmp_path):
    path = tmp_path / "predictions.json"
    path.write_text(
        json.dumps({"q0": {"img1": 0.5, "img9": 0.9, "img2": 0.5, "img10": 0.5}, "q1": {}, "extra": {"img1": 1}})
    )
    rf = read_results(path, bench())
    assert rf.format == "run-dict"
    # ties at 0.5 by id descending in byte order ("img2" > "img10" > "img1"), as trec_eval orders them
    assert rf.run["q0"] == ["img9", "img2", "img10", "img1"]
    assert rf.scores["q0"] == [0.9, 0.5, 0.5, 0.5]
    assert rf.run["q1"] == [] and rf.n_empty == 1
    assert rf.unknown_query_keys == ["extra"] and rf.n_missing_queries == 1


def test_trec_run_file_ignores_rank_column_like_trec_eval(tmp_path):
    path = tmp_path / "bm25.run"
    path.write_text("q0 Q0 img4 1 2.0 tag\nq0 Q0 img5 2 3.5 tag\n\nq0 Q0 img6 3 2.0 tag\nq2 0 img1 1 -1e-3 x\n")
    rf = read_results(path, bench())
    assert rf.format == "trec"
    assert rf.run == {"q0": ["img5", "img6", "img4"], "q2": ["img1"]}
    assert rf.scores["q0"] == [3.5, 2.0, 2.0]
    assert any("rank column" in str(w) for w in rf.warnings())


@pytest.mark.parametrize("fmt", FORMATS)
def test_write_then_read_roundtrip_every_format(tmp_path, fmt):
    b = bench()
    run = {"q0": ["img7", "img1", "img2"], "q2": ["img3"]}
    path = write_results(tmp_path / f"r.{'trec' if fmt == 'trec' else 'json'}", b, run, fmt=fmt)
    rf = read_results(path, b)
    assert rf.format == fmt and rf.run == run


def test_override_reads_the_named_format_and_refuses_a_mismatch(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text(json.dumps({"q0": ["img1"]}))
    assert read_results(path, bench(), fmt="circo").run == {"q0": ["img1"]}
    with pytest.raises(BenchmarkError, match=r"query 'q0'.*run dict"):
        read_results(path, bench(), fmt="run-dict")
    with pytest.raises(BenchmarkError, match="line 1.*6 fields"):
        read_results(path, bench(), fmt="trec")
    with pytest.raises(BenchmarkError, match="unknown format 'csv'"):
        read_results(path, bench(), fmt="csv")


@pytest.mark.parametrize(
    "payload, where, first",
    [
        ('{"q0": {"items": ["img1"]}}', "query 'q0'", "{'items': ['img1']}"),
        ('{"q0": {"img1": "high"}}', "query 'q0'", "{'img1': 'high'}"),
        ('"just a string"', None, "'just a string'"),
        ("q0 img1 0.5\nq0 img2 0.4\n", "line 1", "'q0 img1 0.5'"),
    ],
)
def test_unreadable_file_gets_one_error_naming_formats_and_first_entry(tmp_path, payload, where, first):
    path = tmp_path / "weird.json"
    path.write_text(payload)
    with pytest.raises(BenchmarkError) as exc:
        parse_results(path)
    msg = str(exc.value)
    assert len(exc.value.issues) == 1 and str(path) in msg and first in msg
    assert all(name in msg for name in FORMATS)
    if where:
        assert where in msg


@pytest.mark.parametrize(
    "text, needle",
    [
        ("q0 Q0 img1 1 0.5 t\nq0 Q0 img1 2 0.4 t\n", "line 2, field 'docid'"),
        ("q0 Q0 img1 1 0.5 t\nq0 Q0 img2 x 0.4 t\n", "line 2, field 'rank'"),
        ("q0 Q0 img1 1 0.5 t\nq0 Q0 img2 2 nan t\n", "line 2, field 'score'"),
    ],
)
def test_trec_errors_name_the_line(tmp_path, text, needle):
    path = tmp_path / "r.trec"
    path.write_text(text)
    with pytest.raises(BenchmarkError, match=needle):
        read_results(path, bench())


def test_run_dict_later_entry_errors_name_query_and_image(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"q0": {"img1": 1.0}, "q1": {"img2": None}, "q2": ["img1"]}))
    with pytest.raises(BenchmarkError) as exc:
        read_results(path, bench())
    msg = str(exc.value)
    assert "query 'q1', field 'img2'" in msg and "query 'q2'" in msg


def test_empty_object_and_missing_file(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text("{}")
    rf = read_results(path, bench())
    assert rf.run == {} and rf.n_missing_queries == 3
    with pytest.raises(BenchmarkError, match="not found"):
        read_results(tmp_path / "nope.json", bench())
