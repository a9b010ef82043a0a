"""Precomputed rankings as a retriever: both official formats, clear errors on malformed files."""
import json

import pytest

from cir_demo.benchmarks.schema import BenchmarkError
from cir_demo.retrievers import registry
from cir_demo.retrievers.base import RankingOnlyRetriever, is_ranking_only
from cir_demo.retrievers.precomputed import PrecomputedRetriever
from cir_demo.utils.names import UnknownNameError


def _write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return p


def test_pinpoint_format_with_id_normalisation(tmp_path):
    p = _write(tmp_path, "pp.json", {"00001": {"retrieved_items": ["a", "b", "c"], "extra": 1},
                                     "00002": {"retrieved_items": []}})
    r = PrecomputedRetriever.from_file(p)
    assert isinstance(r, RankingOnlyRetriever) and is_ranking_only(r)
    assert r.format == "pinpoint" and r.query_ids() == ["00001", "00002"]
    assert r.rank("00001", 2) == (["a", "b"], [1.0, 0.5])
    assert r.rank("query_00001", 10) == (["a", "b", "c"], [1.0, 0.5, 1 / 3])  # official id normalisation
    assert r.rank("1", 1) == (["a"], [1.0])
    assert r.rank("00002", 5) == ([], [])
    assert r.spec["scores"] == "reciprocal_rank" and len(r.spec["sha256"]) == 64


def test_pinpoint_scores_are_used_when_given(tmp_path):
    p = _write(tmp_path, "pp.json", {"00001": {"retrieved_items": ["a", "b"], "scores": [0.9, 0.1]}})
    assert PrecomputedRetriever.from_file(p).rank("00001", 5) == (["a", "b"], [0.9, 0.1])


def test_circo_format_int_ids_become_strings(tmp_path):
    p = _write(tmp_path, "circo.json", {"0": [123, 456, 789], "1": ["9"]})
    r = PrecomputedRetriever.from_file(p)
    assert r.format == "circo"
    assert r.rank("0", 2) == (["123", "456"], [1.0, 0.5])
    with pytest.raises(UnknownNameError, match="Did you mean"):
        r.rank("00", 3)  # no PinPoint-style normalisation for CIRCO ids


@pytest.mark.parametrize("obj,match", [
    ("{not json", "fits none of the results formats"),
    ([1, 2], "a JSON list at the top level"),
    ({"00001": {"items": ["a"]}}, "fits none of the results formats"),
    ({"00001": {"retrieved_items": "a"}}, "query '00001', field 'retrieved_items': must be a list of image ids"),
    ({"00001": {"retrieved_items": ["a", None]}}, "must be a list of image ids"),
    ({"00001": {"retrieved_items": ["a"], "scores": [1, 2]}}, "field 'scores'"),
    ({"0": ["a"], "1": {"retrieved_items": ["b"]}}, "query '1'"),  # mixed formats
])
def test_malformed_files_name_file_query_and_field(tmp_path, obj, match):
    p = _write(tmp_path, "bad.json", obj)
    with pytest.raises(BenchmarkError, match=match) as info:
        PrecomputedRetriever.from_file(p)
    assert "bad.json" in str(info.value)


def test_all_errors_reported_together(tmp_path):
    p = _write(tmp_path, "bad.json", {"0": ["a"], "1": "x", "2": {"b": 1}, "3": ["ok"]})
    with pytest.raises(BenchmarkError) as info:
        PrecomputedRetriever.from_file(p)
    assert len(info.value.issues) == 2


def test_run_dict_ranked_as_trec_eval_ranks_it(tmp_path):
    """A run dict {query: {image: score}} (ranx, pytrec_eval, EDIR's main.py): score descending, equal
    scores by image id descending; its scores are kept."""
    p = _write(tmp_path, "ranx.json", {"q1": {"a": 0.5, "b": 0.9, "c": 0.5}, "q2": {"z": 1.0}})
    r = PrecomputedRetriever.from_file(p)
    assert r.format == "run-dict" and r.spec["scores"] == "file"
    assert r.rank("q1", 3) == (["b", "c", "a"], [0.9, 0.5, 0.5])


def test_trec_run_file(tmp_path):
    p = _write(tmp_path, "run.trec", "q1 Q0 a 1 2.0 tag\nq1 Q0 b 2 3.0 tag\nq2 Q0 c 1 1.0 tag\n")
    r = PrecomputedRetriever.from_file(p)
    assert r.format == "trec" and r.query_ids() == ["q1", "q2"]
    assert r.rank("q1", 5)[0] == ["b", "a"]  # score order, not the rank column
    assert r.has("q2") and not r.has("q3")


def test_from_results_keys_by_benchmark_query_ids(tmp_path):
    """Read onto a benchmark, the retriever answers the benchmark's own query ids (PinPoint keys are the
    official 5-digit ones)."""
    from cir_demo.results import read_results
    from cir_demo.benchmarks.registry import load_benchmark

    bench = load_benchmark("world", size="tiny").limit(3)
    q = bench.queries[0]
    p = _write(tmp_path, "mine.json", {bench.results_key(q.query_id): {"retrieved_items": bench.corpus_ids[:3]}})
    r = PrecomputedRetriever.from_results(read_results(p, bench))
    assert r.name == "mine" and r.rank(q.query_id, 2)[0] == bench.corpus_ids[:2]
    assert not r.has(bench.queries[1].query_id)


def test_missing_file_and_bad_k(tmp_path):
    with pytest.raises(FileNotFoundError, match="results file not found"):
        PrecomputedRetriever.from_file(tmp_path / "nope.json")
    r = PrecomputedRetriever.from_file(_write(tmp_path, "c.json", {"0": ["a"]}))
    with pytest.raises(ValueError, match="k must be"):
        r.rank("0", -1)


def test_registered_precomputed_config_loads_without_torch(tmp_path):
    p = _write(tmp_path, "mine.json", {"0": ["x", "y"]})
    registry.register_config({"name": "my-run", "family": "precomputed", "model": "MagicLens-L (run elsewhere)",
                              "params": {"path": str(p)}}, replace=True)
    r = registry.load_retriever("my-run")
    assert r.rank("0", 1) == (["x"], [1.0]) and r.spec["model"].startswith("MagicLens")
    registry.unregister("my-run")
    with pytest.raises(Exception, match="params.path"):
        registry.register_config({"name": "no-path", "family": "precomputed", "params": {}})
