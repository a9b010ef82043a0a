"""bench/bench_app_latency.py --beside-precompute on the tiny world: both conditions are measured
in each phase, the background run really works beside the visits, and it is ended and its
temporary folder removed afterwards."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the run's CPU time from /proc")
def test_latency_bench_beside_the_background_run(tmp_path):
    out = tmp_path / "latency.json"
    env = dict(os.environ, CIR_DEMO_DATA=str(tmp_path / "data"), HF_HUB_OFFLINE="1", TMPDIR=str(tmp_path))
    for var in ("CIR_DEMO_CACHE", "CIR_DEMO_INDEXES", "CIR_DEMO_RUNS"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "bench/bench_app_latency.py", "--world-size", "tiny", "--queries", "4",
                           "--swaps", "1", "--beside-precompute", "--precompute-warmup", "1", "--json", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    res = json.loads(out.read_text())
    for phase in ("plain", "rerank"):
        bg = res["phases"][phase]["background_run"]
        assert bg["run working"]["n"] == 4 and bg["run paused"]["n"] == 4, bg  # visits alternate, 2 views each
        # CPU seconds per wall second of the visits beside the working run: how much depends on the load,
        # but one process's share is never negative nor above the machine's cores (+1: /proc counts 10 ms
        # clock ticks, coarse over four short visits)
        assert 0.0 <= bg["run_cpu_share_while_working"] <= os.cpu_count() + 1, bg
    assert res["background_run_cpu_s"] >= 1.0  # the warm-up waited until the run really worked
    assert not Path(f"/proc/{res['background_run_pid']}").exists() or \
        Path(f"/proc/{res['background_run_pid']}/stat").read_text().split(")")[1].split()[0] == "Z"
    assert not list(tmp_path.glob("cir_demo_bench_run_*"))  # its temporary runs and cache folder are gone
    assert not (tmp_path / "data" / "runs").exists() or not list((tmp_path / "data" / "runs").iterdir())
