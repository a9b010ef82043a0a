"""`--eval` with the world's own models reranks on one torch thread per batch, a batch per core on a
quiet machine and one at a time on a busy one, and writes the same rankings, metrics and tables as with
two threads inside each batch (the judge's P(yes) to its last stored decimal); OMP_NUM_THREADS, when
set, keeps the user's choice; the load that decides is the machine's before the run began."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cir_demo.harness import cli as eval_cli
from cir_demo.harness.pipeline import small_model_threads


@pytest.fixture()
def torch_threads():
    """Two threads to start from (on any runner), and the runner's count given back afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield torch
    torch.set_num_threads(before)


def _eval(out: Path) -> None:
    import shutil

    from cir_demo.paths import cache_dir

    # The world and its corpus features from the test's copy of conftest.py's `tiny_world_seed` (no
    # corpus image encoded); every reranker score computed by this run's threads.
    shutil.rmtree(cache_dir() / "rerank", ignore_errors=True)
    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    args = p.parse_args(
        [
            "--world-size",
            "tiny",
            "--split",
            "test",
            "--retrievers",
            "world-clip-image,world-cir",
            "--rerank",
            "world-verifier",
            "--limit",
            "12",
            "--n-boot",
            "20",
            "--no-plots",
            "--out",
            str(out),
        ]
    )
    assert eval_cli.run(args) == 0


def test_one_thread_and_two_write_the_same_bytes(tmp_path, monkeypatch, torch_threads, seeded_cache):
    seen = []
    original = torch_threads.set_num_threads
    monkeypatch.setattr(torch_threads, "set_num_threads", lambda n: seen.append(n) or original(n))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.getloadavg", lambda: (64.0, 0.0, 0.0))  # a busy machine: one thread
    _eval(tmp_path / "one")
    assert seen and seen[0] == 1 and torch_threads.get_num_threads() == 2  # set for the run, then given back
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))  # a quiet one: a lane per core, one thread each
    seen.clear()
    _eval(tmp_path / "lanes")
    assert seen and seen[0] == 1 and torch_threads.get_num_threads() == 2
    every = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert [str(f) for f in every if (tmp_path / "one" / f).read_bytes() != (tmp_path / "lanes" / f).read_bytes()] == [
        "run_info.json",
        "run_manifest.json",
    ]  # one thread each way: the same bits, timings aside
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    seen.clear()
    _eval(tmp_path / "two")
    assert seen == [] and torch_threads.get_num_threads() == 2  # the user's two threads throughout
    files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert len(files) > 10 and any("rerank" in str(f) for f in files)
    # torch's CPU kernels sum in an order that depends on the thread count, so the judge's P(yes) may differ
    # in its last stored (6th) decimal; every ranking, metric and table is the same bytes
    scores = [f for f in files if f.parts[0] == "results" and "+rerank" in f.name]
    differ = [
        str(f)
        for f in files
        if f.name not in ("run_info.json", "run_manifest.json")
        and f not in scores
        and (tmp_path / "one" / f).read_bytes() != (tmp_path / "two" / f).read_bytes()
    ]
    assert differ == [] and scores
    for f in scores:
        one, two = (json.loads((tmp_path / run / f).read_text()) for run in ("one", "two"))
        assert _ids(one) == _ids(two), f"{f}: another ranking"
        assert max(_score_gaps(one, two), default=0.0) <= 1.000001e-6, f"{f}: P(yes) beyond its last decimal"
    manifests = [json.loads((tmp_path / run / "run_manifest.json").read_text()) for run in ("one", "two")]
    for m in manifests:  # it records run_info.json, whose timings differ by design
        del m["files"]["run_info.json"]
    for m in manifests:  # the scores' checksums may differ with a last decimal (above)
        for f in scores:
            del m["files"][str(f)]
    assert manifests[0] == manifests[1] and "metrics.csv" in manifests[0]["files"]


def _ids(results) -> list:
    """Every string of a results file (query ids, image ids, keys) in file order: its rankings."""
    if isinstance(results, dict):
        return [x for k, v in results.items() for x in [k, *_ids(v)]]
    if isinstance(results, list):
        return [x for v in results for x in _ids(v)]
    return [results] if isinstance(results, str) else []


def _score_gaps(a, b) -> list[float]:
    """|a - b| of every number two results files of the same shape hold, side by side."""
    if isinstance(a, dict):
        return [g for k in a for g in _score_gaps(a[k], b[k])]
    if isinstance(a, list):
        return [g for x, y in zip(a, b) for g in _score_gaps(x, y)]
    return [abs(a - b)] if isinstance(a, (int, float)) and not isinstance(a, bool) else []


def test_the_world_models_rerank_on_one_torch_thread_per_lane(monkeypatch, torch_threads):
    import os

    from cir_demo.harness.pipeline import MAX_LANES
    from cir_demo.index.corpus_encode import usable_cpus

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (usable_cpus() + 1.0, 0.0, 0.0))  # not busy: a lane per core
    with small_model_threads(["world-cir"], "world-verifier", None) as lanes:
        assert torch_threads.get_num_threads() == 1 and lanes == min(MAX_LANES, usable_cpus())
    monkeypatch.setattr(os, "getloadavg", lambda: (usable_cpus() + 1.5, 0.0, 0.0))  # busy
    cases = {  # (threads, lanes)
        (("world-clip-image", "world-cir"), "world-verifier", None): (1, 1),
        (("world-clip-image",), None, "cpu"): (1, 1),
        (("world-clip-image",), "world-verifier", "cuda"): (2, 1),
        (("world-clip-image", "metaclip2-h14-fusion"), "world-verifier", None): (2, 1),
        (("world-cir",), "qwen2.5-vl", None): (2, 1),
    }
    for (names, reranker, device), want in cases.items():
        with small_model_threads(names, reranker, device) as lanes:
            assert (torch_threads.get_num_threads(), lanes) == want, (names, reranker, device)
        assert torch_threads.get_num_threads() == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with small_model_threads(["world-cir"], "world-verifier", None) as lanes:
        assert torch_threads.get_num_threads() == 2 and lanes == 1


def test_the_runs_own_load_never_makes_the_reranking_one_lane(tmp_path, monkeypatch, torch_threads, seeded_cache):
    """The load average is read when the run begins: the run's render workers and threads, which raise
    it later (here: busy from the second reading on), do not count as other work, neither for its lanes
    nor for the children it forks (`spare_core`)."""
    import contextlib

    from cir_demo.harness import pipeline
    from cir_demo.index.corpus_encode import usable_cpus
    from cir_demo.utils import beside

    monkeypatch.setattr(beside, "usable_cpus", lambda: 2)
    works = iter([0.0])  # the first reading, when the run begins: no other work; busy after it
    monkeypatch.setattr(beside, "other_work", lambda: next(works, 3.0))
    spare, plain_spare = [], beside.spare_core
    monkeypatch.setattr(beside, "spare_core", lambda: spare.append(plain_spare()) or spare[-1])

    readings = iter([0.5])  # the first reading, when the run begins: a quiet machine
    monkeypatch.setattr("os.getloadavg", lambda: (next(readings, 64.0), 0.0, 0.0))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    original, seen = pipeline.small_model_threads, []

    @contextlib.contextmanager
    def spy(*args, **kw):
        with original(*args, **kw) as lanes:
            seen.append(lanes)
            yield lanes

    monkeypatch.setattr(pipeline, "small_model_threads", spy)
    _eval(tmp_path / "run")
    assert seen and set(seen) == {min(pipeline.MAX_LANES, usable_cpus())}  # both retrievers: a lane per core
    assert spare and all(spare)  # its plots, pairs and workers forked: a core was spare when it began
    assert not beside.spare_core()  # outside the run: the load now
