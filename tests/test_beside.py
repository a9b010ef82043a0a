"""`utils/beside.py`: a function run in a forked child gives what it gives inline, its failures reach
the caller with the child's traceback, and it runs inline where no core is spare for a child."""

import os

import numpy as np
import pytest

from cir_demo.utils.beside import beside


def test_result_equals_the_inline_call_and_reads_the_callers_memory(quiet_machine):
    table = np.arange(100_000, dtype=np.float64).reshape(1000, 100)  # not pickled: the child reads it
    task = beside(lambda: {"sum": float(table.sum()), "pid": os.getpid()}, "sum")
    out = task.result()
    assert out["sum"] == float(table.sum())
    assert out["pid"] != os.getpid()  # it ran in a child


def test_an_exception_in_the_child_names_the_task_and_carries_its_traceback(quiet_machine):
    def boom():
        raise ValueError("bad plot input")

    with pytest.raises(RuntimeError, match=r"(?s)plots of x failed in its child process.*ValueError: bad plot input"):
        beside(boom, "plots of x").result()


def test_a_child_that_dies_without_an_answer_is_an_error(quiet_machine):
    with pytest.raises(RuntimeError, match=r"died failed in its child process \(exit code 3\)"):
        beside(lambda: os._exit(3), "died").result()


def test_eval_outputs_are_the_same_bytes_with_plots_written_inline(tmp_path, monkeypatch, quiet_machine):
    """The report written with its plots from a child equals the report written all inline, file for file
    (the plots listed in report.md included)."""
    from test_harness_eval import small_benchmark

    from cir_demo.store.score import evaluate_run
    from cir_demo.harness.report import write_outputs
    from cir_demo.utils import beside as beside_module

    bench = small_benchmark()
    run_a = {"query_00001": ["img1", "img9", "img2"], "query_00002": ["img4", "img1"], "query_00003": ["img6"]}
    run_b = {"query_00001": ["img9"], "query_00002": ["img3", "img2", "img1"], "query_00003": ["img0", "img6"]}
    evs = [evaluate_run(bench, run_a, "a", n_boot=100), evaluate_run(bench, run_b, "b", n_boot=100)]
    forked = write_outputs(bench, evs, tmp_path / "forked", n_boot=100)
    plain = write_outputs(bench, evs, tmp_path / "forked-no-plots", n_boot=100, plots=False)
    monkeypatch.setattr(beside_module.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    inline = write_outputs(bench, evs, tmp_path / "inline", n_boot=100)
    assert list(forked) == list(inline) and any(k.startswith("plots/") for k in forked)
    for name in forked:
        assert forked[name].read_bytes() == inline[name].read_bytes(), name
    # without plots the child writes per_query.csv alone; report.md then lists no plot
    assert list(plain) == [k for k in inline if not k.startswith("plots/")]
    for name in plain:
        if name != "report.md":
            assert plain[name].read_bytes() == inline[name].read_bytes(), name
    assert "plots/" in inline["report.md"].read_text() and "plots/" not in plain["report.md"].read_text()
    assert not (tmp_path / "forked-no-plots" / "plots").exists()


def test_off_the_main_thread_it_runs_inline():
    """A server's worker thread never forks: the function runs in the caller's process."""
    import threading

    out = {}
    worker = threading.Thread(target=lambda: out.update(pid=beside(os.getpid, "pid").result()))
    worker.start()
    worker.join()
    assert out["pid"] == os.getpid()


def test_other_work_is_the_cores_busy_time_less_this_process_over_the_interval(monkeypatch):
    """`other_work` against hand arithmetic on scripted readings of the clock, the machine's busy core
    seconds and this process's CPU seconds: (busy - own) / wall since the reading before."""
    from cir_demo.utils import beside as beside_module

    readings = iter(
        [  # (clock, machine busy core-s, own CPU s)
            (0.0, 100.0, 10.0),  # the first reading: no interval yet
            (10.0, 112.0, 12.0),  # 12 core-s busy in 10 s, 2 of them this process's: 1.0 core of other work
            (10.1, 200.0, 12.0),  # 0.1 s later: too short to say; the reading before stands
            (20.0, 115.0, 14.5),  # from the reading at 10 s: 3 busy, 2.5 this process's: 0.05
            (30.0, 116.0, 16.0),  # this process busier than the cores' count (rounding): none, not less
        ]
    )
    current = {}

    def read(field):  # the machine's busy seconds are read first
        if field == 1:
            current.update(zip(range(3), next(readings)))
        return current[field]

    monkeypatch.setattr(beside_module, "_LAST_READING", [])
    monkeypatch.setattr(beside_module, "_clock", lambda: read(0))
    monkeypatch.setattr(beside_module, "machine_busy_seconds", lambda: read(1))
    monkeypatch.setattr(beside_module, "own_cpu_seconds", lambda: read(2))
    for expected in (0.0, 1.0, 1.0, 0.05, 0.0):
        assert beside_module.other_work() == pytest.approx(expected)
    monkeypatch.setattr(beside_module, "machine_busy_seconds", lambda: None)  # no /proc/stat
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 0.0, 0.0))
    assert beside_module.other_work() == 1.5  # the 1-minute load average


def test_without_a_spare_core_it_runs_inline_and_a_run_reads_the_machine_when_it_began(monkeypatch):
    """A child only where it would have most of a core: two CPUs or more and other work leaving one and a
    half of them; within `other_work_at_start`, what a run read when it began."""
    from cir_demo.utils import beside as beside_module

    work = [0.0]
    monkeypatch.setattr(beside_module, "other_work", lambda: work[0])
    monkeypatch.setattr(beside_module, "usable_cpus", lambda: 2)

    def forked() -> bool:
        return beside(os.getpid, "pid").result() != os.getpid()

    for work[0], child in ((0.0, True), (0.45, True), (0.5, False), (0.95, False), (3.5, False)):
        assert forked() is child, work[0]
    work[0] = 6.0  # the run's own children: not other work
    with beside_module.other_work_at_start(0.4):
        assert forked()
    assert not forked()
    work[0] = 0.0
    with beside_module.other_work_at_start(2.0):  # busy when the run began
        assert not forked()
    monkeypatch.setattr(beside_module, "usable_cpus", lambda: 1)
    assert not forked()  # one CPU: never a second process
    monkeypatch.setattr(beside_module, "usable_cpus", lambda: 4)
    work[0] = 2.4
    assert forked()


CALLER_KILLED_WHILE_ITS_CHILD_SENDS = r"""
import os, time
from cir_demo.utils import beside
beside.usable_cpus = lambda: 2
beside.other_work = lambda: 0.0  # a quiet machine, whatever the suite's load
task = beside.beside(lambda: b"x" * (8 << 20), "big")  # more than a pipe holds: the child waits in its send
print(task._proc.pid, flush=True)
time.sleep(600)  # never reads the result
"""


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_child_ends_with_its_killed_caller_even_while_sending_its_result():
    """A caller killed (SIGKILL: a stopped run, the app's background run ended) before reading its
    child's result leaves no child behind: one blocked sending a result larger than the pipe held the
    caller's memory for good."""
    import signal
    import subprocess
    import sys
    import time

    from test_corpus_workers import _alive

    proc = subprocess.Popen(
        [sys.executable, "-c", CALLER_KILLED_WHILE_ITS_CHILD_SENDS], stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(proc.stdout.readline())
        deadline = time.monotonic() + 60
        while _alive(child) and "pipe" not in open(f"/proc/{child}/wchan").read():  # its send, waiting
            assert time.monotonic() < deadline, "the child never blocked in its send"
            time.sleep(0.05)
        assert _alive(child)
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        deadline = time.monotonic() + 60
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the child outlived its killed caller"
    finally:
        proc.kill()
