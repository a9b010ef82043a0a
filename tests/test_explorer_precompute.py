"""The background run's state machine, with a scripted child process in place of the eval:
waiting -> running (n/N from the staged results files) -> done, a failure with the log's last
line, a retry after it, and no second run while one is running; and `complete_run` (stood in by
the scripted tests) for real on the tiny world."""

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from cir_demo.explorer import precompute
from cir_demo.explorer.precompute import PrecomputeJob, PrecomputeStatus

CHILD = r"""
import os, sys, time
from pathlib import Path
out, mode = Path(sys.argv[1]), sys.argv[2]
# <pid>-<random>-<name> as the harness stages: a retry within the same second (same name) stages apart
staged = out.parent / ".partial" / f"{os.getpid()}-abcd1234-{out.name}"
(staged / "results").mkdir(parents=True)
(staged / "results" / "a.json").write_text("{}")
go, deadline = Path(f"{staged}.go"), time.monotonic() + 300  # the bound only ends a wait that would never end
while not go.exists() and time.monotonic() < deadline:  # held at 1 of 3 until a watcher has seen it
    time.sleep(0.05)
if mode == "fail":
    print("boom: the model file is damaged")
    sys.exit(3)
if mode == "fail-with-bar":  # the command line's error line, then a progress bar's last redraw
    print("error: world-cir: the index is damaged", flush=True)
    sys.stdout.write("rerank world-cir:  40%|####      | 2/5 [00:01<00:01]\r")
    sys.exit(1)
(staged / "results" / "b.json").write_text("{}")
out.mkdir(parents=True)
(out / "metrics.csv").write_text("model\n")
"""


class ScriptedJob(PrecomputeJob):
    WATCH_POLL_S = 0.1  # the same watching as the app's, counting more often: a test sees each state sooner

    def __init__(self, runs_root: Path, modes: list[str]):
        super().__init__([], runs_root=runs_root)
        self.modes = modes
        self.script = runs_root / "child.py"
        runs_root.mkdir(parents=True, exist_ok=True)
        self.script.write_text(CHILD)

    def command(self, service, out):
        return [sys.executable, str(self.script), str(out), self.modes.pop(0)]


def service(stored=()):
    return SimpleNamespace(
        retriever_names=["a"],
        reranker_name="judge",
        benchmark=SimpleNamespace(name="world"),
        stored_sorts=lambda: set(stored),
    )


def wait_for(job, state, seconds=300):
    """The job's first status in `state` and every status seen until then. Waiting for a state after
    "running", it lets a scripted child held at 1 of 3 results go on once it has seen that (a
    signal, not a sleep that a slow machine's watcher might poll past)."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        st = job.status()
        seen.append((st.state, st.done, st.total))
        if state != "running" and st.state == "running" and st.done >= 1:
            for staged in (job.script.parent / ".partial").glob("*/"):
                Path(f"{staged}.go").touch()
        if st.state == state:
            return st, seen
        time.sleep(0.1)
    raise AssertionError(f"never {state}: {seen[-5:]}")


def test_waiting_running_done_and_callbacks(tmp_path, monkeypatch):
    monkeypatch.setattr(precompute, "complete_run", lambda service: None)
    job = ScriptedJob(tmp_path / "runs", ["ok"])
    assert job.status().state == "waiting" and not job.status().ready
    done = []
    job.on_done(lambda: done.append(job.status().state != "done"))  # runs before "done" is visible
    job.start_for(service())
    job.start_for(service())  # a second visitor: no second run
    st, seen = wait_for(job, "done")
    assert ("running", 1, 3) in seen  # 1 of 3 results files (a and a+rerank, then the report) staged
    assert st.ready and "ready" in st.text() and done == [True]
    assert len(job.modes) == 0 and len(list((tmp_path / "runs").glob("*-world-app"))) == 1


def test_failure_says_why_and_a_retry_runs_again(tmp_path, monkeypatch):
    monkeypatch.setattr(precompute, "complete_run", lambda service: None)
    job = ScriptedJob(tmp_path / "runs", ["fail", "ok"])
    job.start_for(service())
    st, _ = wait_for(job, "failed")
    assert st.ready  # the sorts then compute on demand instead of waiting forever
    assert "exit 3: boom: the model file is damaged" in st.text() and "reloading the page" in st.text()
    job.start_for(service())  # the retry a page reload makes
    wait_for(job, "done")


def test_a_failure_names_the_error_line_not_a_progress_bar(tmp_path, monkeypatch):
    monkeypatch.setattr(precompute, "complete_run", lambda service: None)
    job = ScriptedJob(tmp_path / "runs", ["fail-with-bar"])
    job.start_for(service())
    st, _ = wait_for(job, "failed")
    assert st.detail == "exit 1: error: world-cir: the index is damaged"


def test_sorts_with_data_on_disk_are_offered_while_the_run_computes_the_rest(tmp_path, monkeypatch):
    from cir_demo.ui.explore import WAITING_MARK, sort_choices

    monkeypatch.setattr(precompute, "complete_run", lambda service: None)
    job = ScriptedJob(tmp_path / "runs", ["ok"])
    job.start_for(service(stored={"negatives", "spread"}))  # e.g. an eval run without the reranker
    st, _ = wait_for(job, "running")
    assert st.sort_ready("negatives") and st.sort_ready("spread") and st.sort_ready("order")
    assert not st.sort_ready("rerank_helped") and not st.sort_ready("shortcut")
    from cir_demo.explorer import SortChoice

    offered = SimpleNamespace(
        sorts=lambda: (
            [SortChoice(n, n.title(), True) for n in ("order", "negatives", "rerank_hurt")]
            + [SortChoice("two_image", "Two", False, "every query has one reference image")]
        )
    )
    labels = dict((key, label) for label, key in sort_choices(offered, st))
    assert not labels["negatives"].endswith(WAITING_MARK) and labels["rerank_hurt"].endswith(WAITING_MARK)
    assert "two_image" not in labels  # a sort without data is not offered
    st, _ = wait_for(job, "done")
    assert st.sort_ready("rerank_helped")


def test_a_complete_run_on_disk_means_no_job(tmp_path, monkeypatch):
    monkeypatch.setattr(precompute, "complete_run", lambda service: tmp_path / "runs" / "20990101-world")
    job = ScriptedJob(tmp_path / "runs", [])
    job.start_for(service())
    st = job.status()
    assert st.state == "done" and "20990101-world" in st.text() and job._proc is None


def test_the_real_complete_run_on_the_tiny_world(tiny_setup, tmp_path, monkeypatch):
    """complete_run itself (the other tests here stand it in), on the tiny world's served view, with
    the background run's own command run in-process: no run -> None; a run without the reranked
    columns -> None; the whole run -> that run, and a job then starts nothing."""
    import argparse

    from cir_demo.harness import cli as eval_cli
    from cir_demo.testing.explorer import build_tiny_service

    _, names = tiny_setup
    runs = tmp_path / "runs"
    monkeypatch.setenv("CIR_DEMO_RUNS", str(runs))
    svc = build_tiny_service(names[:1], limit_groups=4)  # one column, four intents: the rules, not the size
    job = PrecomputeJob(["--benchmark", "world", "--world-size", "tiny", "--limit", "4"], runs_root=runs)

    def run_eval(out: Path, rerank: bool) -> None:
        argv = [*job.command(svc, out)[4:], "--n-boot", "0", "--no-plots"]  # after `python -m cir_demo eval`
        if not rerank:
            argv[argv.index("--rerank") + 1] = "none"
        parser = argparse.ArgumentParser()
        eval_cli.add_arguments(parser)
        assert eval_cli.run(parser.parse_args(argv)) == 0

    try:
        assert precompute.complete_run(svc) is None
        run_eval(runs / "plain", rerank=False)
        assert (runs / "plain" / "metrics.csv").is_file() and precompute.complete_run(svc) is None  # no +rerank
        run_eval(runs / "whole", rerank=True)
        assert precompute.complete_run(svc) == runs / "whole"
        assert_run_holds_what_the_app_shows(svc, runs / "whole")
        job.start_for(svc)
        st = job.status()
        assert st.state == "done" and "whole" in st.text() and job._proc is None
    finally:
        svc.engine.close()


def assert_run_holds_what_the_app_shows(svc, run_dir: Path) -> None:
    """The run complete_run found, against two oracles for every query the app shows, plain and
    reranked: its per_query.csv equals the metric functions applied to the rankings it wrote
    (results/*.json), and equals the per-column metrics the app computes live for that view."""
    import math

    import pandas as pd

    from cir_demo.benchmarks.registry import RERANK_SUFFIX
    from cir_demo.metrics import pinpoint
    from cir_demo.results import read_results

    per_query = pd.read_csv(run_dir / "per_query.csv", dtype={"query_id": str, "run": str})
    queries = [svc.query(qid) for qid in svc.table["query_id"]]
    name = svc.retriever_names[0]
    nonzero = set()
    for rerank in (False, True):
        run_name = f"{name}{RERANK_SUFFIX}" if rerank else name
        written = per_query[per_query["run"] == run_name].set_index("query_id")
        ranked = read_results(run_dir / "results" / f"{run_name}.json", svc.benchmark).run
        recomputed = pinpoint.per_query({q.query_id: ranked[q.query_id] for q in queries}, queries).set_index(
            "query_id"
        )
        for q in queries:
            live = svc.compare(q.query_id, [name], rerank=rerank).columns[0].metrics
            for metric in ("AP@10", "precision@10", "NegRecall@10"):  # the world's family shows these
                got = float(written.at[q.query_id, metric])  # per_query.csv holds 6 decimals
                assert math.isclose(got, float(recomputed.at[q.query_id, metric]), abs_tol=6e-7), (
                    run_name,
                    q.query_id,
                    metric,
                )
                assert math.isclose(got, live[metric], abs_tol=6e-7), (run_name, q.query_id, metric, got, live[metric])
                if got > 0:
                    nonzero.add(metric)
    assert nonzero == {"AP@10", "precision@10", "NegRecall@10"}  # the views compared are not all zeros


def test_disabled_job_is_off(tmp_path):
    job = PrecomputeJob([], runs_root=tmp_path, enabled=False)
    job.start_for(service())
    assert job.status().state == "off" and job.status().ready and job.status().text() == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_the_child_runs_at_low_priority(tmp_path, monkeypatch):
    import os

    monkeypatch.setattr(precompute, "complete_run", lambda service: None)
    job = ScriptedJob(tmp_path / "runs", ["ok"])
    job.start_for(service())
    deadline = time.monotonic() + 30
    while job._proc is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.getpriority(os.PRIO_PROCESS, job._proc.pid) >= precompute.NICENESS
    wait_for(job, "done")


def published_run(root: Path):
    """complete_run's stand-in: the newest published run of the scripted child."""
    runs = sorted(p for p in root.glob("*-world-app") if (p / "metrics.csv").is_file())
    return runs[-1] if runs else None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock")
def test_a_second_app_process_follows_the_first_run_and_uses_it(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setattr(precompute, "complete_run", lambda service: published_run(root))
    monkeypatch.setattr(PrecomputeJob, "FOLLOW_POLL_S", 0.1)
    first, second = ScriptedJob(root, ["ok"]), ScriptedJob(root, ["ok"])  # two processes' jobs: two lock fds
    first.start_for(service())
    wait_for(first, "running")
    second.start_for(service())
    st, seen = wait_for(second, "done")
    assert ("running", 1, 3) in seen  # the first process's staged results, counted from its lock's run name
    assert second._proc is None and second.modes == ["ok"]  # it started no run of its own
    assert "computed by another app process" in st.detail
    wait_for(first, "done")
    assert len(list(root.glob("*-world-app"))) == 1
    labels = PrecomputeStatus("running", 1, 3, precompute.FOLLOWING).text()
    assert "by another app process (1/3)" in labels


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock")
def test_a_follower_computes_the_run_when_the_first_process_fails(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setattr(precompute, "complete_run", lambda service: published_run(root))
    monkeypatch.setattr(PrecomputeJob, "FOLLOW_POLL_S", 0.1)
    first, second = ScriptedJob(root, ["fail"]), ScriptedJob(root, ["ok"])
    first.start_for(service())
    wait_for(first, "running")
    second.start_for(service())
    assert second.status().detail == precompute.FOLLOWING
    wait_for(first, "failed")
    st, _ = wait_for(second, "done")
    assert second.modes == [] and st.detail.startswith("run ")  # it computed the run itself
    assert len(list(root.glob("*-world-app"))) == 1


def test_the_run_lock_is_held_while_the_run_works_and_released_after(tmp_path, monkeypatch):
    from cir_demo.explorer.run_lock import RunLock, holder_run_name

    monkeypatch.setattr(precompute, "complete_run", lambda service: None)
    job = ScriptedJob(tmp_path / "runs", ["ok"])
    job.start_for(service())
    wait_for(job, "running")
    path = job._lock_path(service(), tmp_path / "runs")
    if sys.platform.startswith("linux"):
        assert RunLock.take(path) is None  # another process could not take it now
        assert holder_run_name(path) == job._out.name
    wait_for(job, "done")
    probe = RunLock.take(path)
    assert probe is not None
    probe.release()
