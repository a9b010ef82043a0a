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
    ("{not json", "not valid JSON: line 1"),
    ([1, 2], "top level must be an object"),
    ({"00001": {"items": ["a"]}}, "query '00001', field 'retrieved_items': missing"),
    ({"00001": {"retrieved_items": "a"}}, "must be a list of image ids"),
    ({"00001": {"retrieved_items": ["a", "a"]}}, "'a' appears more than once"),
    ({"00001": {"retrieved_items": ["a", None]}}, "item 1 is None"),
    ({"00001": {"retrieved_items": ["a"], "scores": [1, 2]}}, "field 'scores'"),
    ({"0": ["a"], "1": {"retrieved_items": ["b"]}}, "query '1'"),  # mixed formats
])
def test_malformed_files_name_file_query_and_field(tmp_path, obj, match):
    p = _write(tmp_path, "bad.json", obj)
    with pytest.raises(BenchmarkError, match=match) as info:
        PrecomputedRetriever.from_file(p)
    assert "bad.json" in str(info.value)


def test_all_errors_reported_together(tmp_path):
    p = _write(tmp_path, "bad.json", {"0": "x", "1": ["a", "a"], "2": ["ok"]})
    with pytest.raises(BenchmarkError) as info:
        PrecomputedRetriever.from_file(p)
    assert len(info.value.issues) == 2


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
