"""`utils/beside.py`: a function run in a forked child gives what it gives inline, and its failures reach
the caller with the child's traceback."""

import os

import numpy as np
import pytest

from cir_demo.utils.beside import beside


def test_result_equals_the_inline_call_and_reads_the_callers_memory():
    table = np.arange(100_000, dtype=np.float64).reshape(1000, 100)  # not pickled: the child reads it
    task = beside(lambda: {"sum": float(table.sum()), "pid": os.getpid()}, "sum")
    out = task.result()
    assert out["sum"] == float(table.sum())
    assert out["pid"] != os.getpid()  # it ran in a child


def test_an_exception_in_the_child_names_the_task_and_carries_its_traceback():
    def boom():
        raise ValueError("bad plot input")

    with pytest.raises(RuntimeError, match=r"(?s)plots of x failed in its child process.*ValueError: bad plot input"):
        beside(boom, "plots of x").result()


def test_a_child_that_dies_without_an_answer_is_an_error():
    with pytest.raises(RuntimeError, match=r"died failed in its child process \(exit code 3\)"):
        beside(lambda: os._exit(3), "died").result()


def test_eval_outputs_are_the_same_bytes_with_plots_written_inline(tmp_path, monkeypatch):
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
