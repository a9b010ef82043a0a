"""`utils/gc_pause.py`: the collector is off inside the block and as it was after, errors included."""

import contextlib
import gc

import pytest

from cir_demo.utils.gc_pause import collector_paused


def test_collector_off_inside_and_restored_after_even_on_error():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_off_before_stays_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


class _Cycle:
    """An object in a reference cycle with itself: only the collector frees it."""

    def __init__(self):
        self.me = self


def _a_cycle_made_in(block):
    """A weak reference to a cycle made inside `block` and dropped after it."""
    import weakref

    with block:
        ref = weakref.ref(_Cycle())
    return ref


def test_kept_for_life_freezes_what_the_block_made_only_in_a_program(monkeypatch):
    """Oracle: whether a full collection frees a dropped reference cycle. In a process started as a program
    (`started_as_program`): the collector off inside, on after; a cycle made inside survives every later
    collection (frozen); one made after is freed. Without it (a test, a notebook calling `main`) the block
    changes nothing: the cycle is freed."""
    from cir_demo.utils import gc_pause

    assert gc.isenabled()
    plain = _a_cycle_made_in(gc_pause.kept_for_life())
    gc.collect()
    assert plain() is None and gc.isenabled()

    monkeypatch.setattr(gc_pause, "_AT_ENTRY_POINT", [False])
    gc_pause.started_as_program()
    seen = []

    class Watch:
        def __enter__(self):
            self.block = gc_pause.kept_for_life()
            self.block.__enter__()
            seen.append(gc.isenabled())

        def __exit__(self, *exc):
            return self.block.__exit__(*exc)

    kept = _a_cycle_made_in(Watch())
    later = _a_cycle_made_in(contextlib.nullcontext())
    gc.collect()
    assert seen == [False] and gc.isenabled()
    assert kept() is not None and later() is None
    with pytest.raises(RuntimeError), gc_pause.kept_for_life():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_the_programs_import_their_modules_with_the_collector_off_and_freeze_them():
    """`python -m cir_demo` and `python app.py --eval`, run as programs in a fresh process: no full collection
    while the command line's modules are imported, and those modules frozen (counted by the collector)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = """
import gc, runpy, sys
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)
for argv, run in ((["cir_demo"], lambda: runpy.run_module("cir_demo", run_name="__main__")),
                  (["app.py", "--eval", "--benchmark", "wrold"], lambda: runpy.run_path("app.py", run_name="__main__"))):
    sys.argv = argv
    try:
        run()
    except SystemExit:
        pass
    print("after", argv[0], len(full), gc.get_freeze_count() > 10000, gc.isenabled())
    gc.unfreeze()
"""
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300, check=True
    ).stdout.split("\n")
    assert [line for line in out if line.startswith("after ")] == [
        "after cir_demo 0 True True",
        "after app.py 0 True True",
    ]
