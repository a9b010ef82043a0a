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
    p = _write(
        tmp_path,
        "pp.json",
        {"00001": {"retrieved_items": ["a", "b", "c"], "extra": 1}, "00002": {"retrieved_items": []}},
    )
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


@pytest.mark.parametrize(
    "obj,match",
    [
        ("{not json", "fits none of the results formats"),
        ([1, 2], "a JSON list at the top level"),
        ({"00001": {"items": ["a"]}}, "fits none of the results formats"),
        (
            {"00001": {"retrieved_items": "a"}},
            "query '00001', field 'retrieved_items': read as pinpoint results: must be a list of image ids",
        ),
        ({"00001": {"retrieved_items": ["a", None]}}, "must be a list of image ids"),
        ({"00001": {"retrieved_items": ["a"], "scores": [1, 2]}}, "field 'scores'"),
        ({"0": ["a"], "1": {"retrieved_items": ["b"]}}, "query '1'"),  # mixed formats
    ],
)
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
    registry.register_config(
        {"name": "my-run", "family": "precomputed", "model": "MagicLens-L (run elsewhere)", "params": {"path": str(p)}},
        replace=True,
    )
    r = registry.load_retriever("my-run")
    assert r.rank("0", 1) == (["x"], [1.0]) and r.spec["model"].startswith("MagicLens")
    registry.unregister("my-run")
    with pytest.raises(Exception, match="params.path"):
        registry.register_config({"name": "no-path", "family": "precomputed", "params": {}})


def test_a_config_s_unreadable_file_is_one_line_in_loading_and_in_the_listing(tmp_path, capsys):
    """A `precomputed` config (not --runs) whose file has 30 bad queries: loading raises one line naming the
    file (not its folder), the first problem and the count; `retrievers list` says the same instead of "ok",
    and says "not found" for a config whose file is gone."""
    from cir_demo.retrievers import cli as retrievers_cli

    bad = _write(tmp_path, "bad.json", {str(i): {"retrieved_items": 5} for i in range(30)})
    registry.register_config({"name": "bad-run", "family": "precomputed", "params": {"path": str(bad)}}, replace=True)
    registry.register_config(
        {"name": "gone-run", "family": "precomputed", "params": {"path": str(tmp_path / "gone.json")}}, replace=True
    )
    registry.register_config(
        {
            "name": "good-run",
            "family": "precomputed",
            "params": {"path": str(_write(tmp_path, "good.json", {"0": ["a"]}))},
        },
        replace=True,
    )
    try:
        with pytest.raises(ValueError) as err:
            registry.load_retriever("bad-run")
        line = str(err.value)
        assert "\n" not in line and str(tmp_path) not in line
        assert line.startswith("bad.json: query '0', field 'retrieved_items': read as pinpoint results: must be a list")
        assert "(and 29 more problems;" in line
        from cir_demo.preflight.checks import load_failure_lines  # what the app's page says of the column

        page = load_failure_lines("bad-run", err.value)
        assert len(page) == 1 and page[0].endswith(line)
        assert (
            retrievers_cli.run(retrievers_cli.argparse.Namespace(retrievers_command="list", family="precomputed")) == 0
        )
        rows = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()[1:]}
        assert rows["bad-run"].endswith(line) and str(tmp_path) not in rows["bad-run"]
        assert rows["gone-run"].endswith("results file gone.json not found")
        assert rows["good-run"].endswith(" ok")
    finally:
        for name in ("bad-run", "gone-run", "good-run"):
            registry.unregister(name)


def test_has_agrees_with_rank_and_builds_no_suggestion(tmp_path, monkeypatch):
    """`has` is asked once per benchmark query when a partial file is scored: it answers as `rank` does (the
    oracle: a query `rank` finds, under its own or its official PinPoint id, and no other), without matching
    the query against every ranked id for a "did you mean" answer; `rank` of a missing one still gives it."""
    import difflib

    ids = {f"{i:05d}": {"retrieved_items": ["a"]} for i in range(1, 40)}
    r = PrecomputedRetriever.from_file(_write(tmp_path, "pp.json", ids))
    asked = ["00001", "query_00002", "7", "00040", "query_00099", "x"]

    def by_rank(q):
        try:
            r.rank(q, 1)
        except UnknownNameError:
            return False
        return True

    oracle = [by_rank(q) for q in asked]
    assert oracle == [True, True, True, False, False, False]
    calls = []
    monkeypatch.setattr(difflib, "get_close_matches", lambda *a, **k: calls.append(a) or [])
    assert [r.has(q) for q in asked] == oracle and calls == []
    with pytest.raises(UnknownNameError, match="unknown query id in pp.json 'x'"):
        r.rank("x", 1)
    assert calls  # the error still looks for close names
