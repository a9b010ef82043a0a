"""bench/bench_app_latency.py --beside-precompute, the script's behaviour, never its timings (those
are the script's own targets): on the tiny world with the fewest visits (4 queries, 1 swap) both
conditions are measured in each phase, the background run really works beside the visits, and it
is ended and its temporary folder removed afterwards; and the CPU share it reports, checked on a
busy-loop child against the test's own clocks."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the run's CPU time from /proc")
def test_latency_bench_beside_the_background_run(tmp_path, tiny_world_seed):
    out = tmp_path / "latency.json"
    # the tiny world and its corpus features are there (conftest.py's `tiny_world_seed`, copied): the
    # app loads without encoding the corpus, and the background run's work is its retrieval and reranking
    shutil.copytree(tiny_world_seed, tmp_path / "data" / "cache")
    env = dict(os.environ, CIR_DEMO_DATA=str(tmp_path / "data"), HF_HUB_OFFLINE="1", TMPDIR=str(tmp_path))
    for var in ("CIR_DEMO_CACHE", "CIR_DEMO_INDEXES", "CIR_DEMO_RUNS"):
        env.pop(var, None)
    proc = subprocess.run(
        [
            sys.executable,
            "bench/bench_app_latency.py",
            "--world-size",
            "tiny",
            "--queries",
            "4",
            "--swaps",
            "1",
            "--beside-precompute",
            "--precompute-warmup",
            "1",
            "--json",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    res = json.loads(out.read_text())
    for phase in ("plain", "rerank"):
        bg = res["phases"][phase]["background_run"]
        assert bg["run working"]["n"] == 4 and bg["run paused"]["n"] == 4, bg  # visits alternate, 2 views each
        # CPU seconds per wall second of the visits beside the working run: how much depends on the load
        # (the run is niced, so it may get none over two short visits), but never more than the machine's
        # cores (+1: /proc counts 10 ms clock ticks, coarse over short visits); its accounting is checked
        # against an oracle below
        assert bg["run_cpu_share_while_working"] <= os.cpu_count() + 1, bg
    assert res["background_run_cpu_s"] >= 1.0  # the warm-up waited until the run really worked
    assert (
        not Path(f"/proc/{res['background_run_pid']}").exists()
        or Path(f"/proc/{res['background_run_pid']}/stat").read_text().split(")")[1].split()[0] == "Z"
    )
    assert not list(tmp_path.glob("cir_demo_bench_run_*"))  # its temporary runs and cache folder are gone
    assert not (tmp_path / "data" / "runs").exists() or not list((tmp_path / "data" / "runs").iterdir())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the child's CPU time from /proc")
def test_the_cpu_share_is_the_working_visits_cpu_over_their_wall_time(monkeypatch):
    """PausableRun (what the bench measures the background run with) on a busy-loop child: a working
    visit lasts until the child has 0.1 more CPU seconds, then a paused visit lasts 0.5 s. The share
    must lie between the bounds the test's own clock and CPU readings around the first visit give;
    had the paused visit counted, or the CPU of another span, it would fall outside them."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    from bench_app_latency import PausableRun

    run = PausableRun(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
    try:
        t0, c0 = time.perf_counter(), run.cpu_s()
        assert run.set_for_visit(0) == "run working"
        t1, c1 = time.perf_counter(), run.cpu_s()
        deadline = time.monotonic() + 120  # a niced child on a loaded machine may get a few % of a core
        while run.cpu_s() < c1 + 0.1:
            assert time.monotonic() < deadline, "the busy child got no CPU"
            time.sleep(0.01)
        t2 = time.perf_counter()
        run.end_visit()
        t3, c3 = time.perf_counter(), run.cpu_s()
        assert run.set_for_visit(1) == "run paused"
        p0 = run.cpu_s()
        time.sleep(0.5)
        p1 = run.cpu_s()
        run.end_visit()
        assert p1 - p0 <= 0.011  # a stopped child gets no CPU (one 10 ms tick of slack)
        # the visit's CPU is within [0.1, c3 - c0] and its wall time within [t2 - t1, t3 - t0]
        low, high = 0.1 / (t3 - t0), (c3 - c0) / (t2 - t1)
        assert low - 0.0005 <= run.cpu_share() <= high + 0.0005, (low, run.cpu_share(), high)
        assert run.cpu_share() <= 1.0 + 0.01 / (t2 - t1) + 0.0005  # one thread: at most one core (and a tick)
    finally:
        run.stop()
    assert run.proc.poll() is not None
