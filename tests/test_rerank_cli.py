"""`python -m cir_demo rerank` end to end: tiny world benchmark, tiny random Qwen2.5-VL, score cache."""

from __future__ import annotations

import argparse
import json

import pytest


from cir_demo.harness.rerank_run import run as rerank_command
from cir_demo.rerank import cli
from cir_demo.testing.tiny_qwen import build_tiny_qwen2_5_vl


def parse(argv):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(argv)


def test_rerank_cli_writes_results_details_and_uses_cache(tmp_path, monkeypatch, capsys, one_torch_thread):
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    from cir_demo.benchmarks.registry import load_benchmark
    from cir_demo.results import read_results, write_results

    bench = load_benchmark("world", size="tiny").limit(2)
    run = {q.query_id: bench.corpus_ids[i : i + 8] for i, q in enumerate(bench.queries)}
    scores = {q: [1.0 - 0.1 * k for k in range(8)] for q in run}
    first = write_results(tmp_path / "first.json", bench, run, scores=scores, spec={"retriever": "test"})
    model = build_tiny_qwen2_5_vl(tmp_path / "tiny", size="test", seed=0)
    out = tmp_path / "reranked.json"
    argv = [
        "--benchmark",
        "world",
        "--world-size",
        "tiny",
        "--limit",
        "2",
        "--results-json",
        str(first),
        "--out",
        str(out),
        "--top-n",
        "5",
        "--backend",
        "qwen2.5-vl",
        "--model",
        str(model),
        "--device",
        "cpu",
        "--cache",
        str(tmp_path / "scores.sqlite"),
    ]
    assert rerank_command(parse(argv)) == 0
    assert "0 from cache" in capsys.readouterr().out

    reranked = read_results(out, bench)
    assert reranked.spec["first_stage"] == {"retriever": "test"}
    assert reranked.spec["reranker"]["spec"]["backend"] == "qwen2.5-vl"
    assert reranked.spec["reranker"]["top_n"] == 5
    details = json.loads(out.with_name("reranked.rerank.json").read_text())
    for qid, ids in run.items():
        new = reranked.run[qid]
        assert sorted(new[:5]) == sorted(ids[:5]) and new[5:] == ids[5:]  # only the top 5 move
        items = details["items"][qid]
        assert [it["candidate_id"] for it in items] == new
        block = [it for it in items if it["reranked"]]
        assert len(block) == 5 and all(it["p_yes"] is not None for it in block)
        margins = [it["logit_yes"] - it["logit_no"] for it in block]
        assert margins == sorted(margins, reverse=True)
        assert all(it["first_stage_score"] == pytest.approx(scores[qid][it["first_stage_rank"]]) for it in items)

    assert rerank_command(parse([*argv, "--overwrite"])) == 0  # second run: every score from the cache
    assert f"{5 * len(run)} from cache" in capsys.readouterr().out
    assert read_results(out, bench).run == reranked.run


def test_rerank_cli_reports_bad_backend(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    from cir_demo.benchmarks.registry import load_benchmark
    from cir_demo.results import write_results

    bench = load_benchmark("world", size="tiny").limit(1)
    first = write_results(tmp_path / "first.json", bench, {bench.queries[0].query_id: bench.corpus_ids[:3]})
    argv = [
        "--benchmark",
        "world",
        "--world-size",
        "tiny",
        "--limit",
        "1",
        "--results-json",
        str(first),
        "--out",
        str(tmp_path / "o.json"),
        "--backend",
        "qwen-vl",
    ]
    assert rerank_command(parse(argv)) == 2
    assert "did you mean" in capsys.readouterr().err.lower()


def test_backend_args_parse():
    assert cli.parse_backend_args(["batch_size=4", "device=cpu", "x=[1, 2]"]) == {
        "batch_size": 4,
        "device": "cpu",
        "x": [1, 2],
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        cli.parse_backend_args(["novalue"])
    args = parse(
        ["--results-json", "r.json", "--out", "o.json", "--backend", "world-verifier", "--backend-arg", "batch_size=8"]
    )
    assert cli.backend_kwargs(args) == {"batch_size": 8}  # no yes/no tokens for a prompt-free backend
    args = parse(
        ["--results-json", "r.json", "--out", "o.json", "--backend", "openai", "--backend-arg", "top_logprobs=5"]
    )
    kw = cli.backend_kwargs(args)
    assert kw["top_logprobs"] == 5 and kw["yes_token"] == "yes" and kw["base_url"].startswith("http://")


def test_the_command_reranks_as_the_store_does(tiny_setup, tmp_path, monkeypatch, capsys):
    """The command reranks through the store (`store.produce_rerank`) into the benchmark's score cache,
    which `--eval` and the app read: the store reranking the same run afterwards scores no candidate
    again and orders every query as the command wrote it."""
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    from cir_demo.benchmarks.registry import load_benchmark
    from cir_demo.engine import RetrievalEngine
    from cir_demo.results import read_results, write_results
    from cir_demo.store.store import produce_rerank
    from cir_demo.testing.explorer import VERIFIER

    bench = load_benchmark("world", size="tiny").limit(3)
    first = {q.query_id: bench.corpus_ids[i : i + 8] for i, q in enumerate(bench.queries)}
    path = write_results(tmp_path / "first.json", bench, first)
    out = tmp_path / "reranked.json"
    argv = ["--benchmark", "world", "--world-size", "tiny", "--limit", "3", "--results-json", str(path)]
    assert rerank_command(parse([*argv, "--out", str(out), "--top-n", "4", "--backend", VERIFIER])) == 0
    assert "0 from cache" in capsys.readouterr().out
    engine = RetrievalEngine(bench, [], progress=False)
    try:
        again = produce_rerank(engine, VERIFIER, first, None, 4)
    finally:
        engine.close()
    assert again.stats["from_cache"] == 4 * len(first)
    assert read_results(out, bench).run == again.run
