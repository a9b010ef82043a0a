"""Python's cyclic garbage collector kept off the objects that live as long as the process.

`collector_paused()`: the collector off for a block, back on (and one collection) after. For runs that
build millions of small long-lived objects without reference cycles (rankings, reranked items, per-query
rows): the collector's passes over them free nothing and cost a tenth of the run; reference counting
still frees everything else as it goes.

`kept_for_life()`: the collector off while a process imports its libraries and loads what it keeps to
the end (the explorer's service), then all of that frozen (`gc.freeze`): later passes never walk it again.
Importing torch, gradio, open_clip, pandas and faiss with the collector on makes some ten full passes, each
over every object imported so far, and torch's objects are slow to walk: about a quarter of the import
time (docs/benchmarks.md)."""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def collector_paused(collect_after: bool = True):
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
            if collect_after:
                gc.collect()


_AT_ENTRY_POINT = [False]


def started_as_program() -> None:
    """Called by a process's entry point (app.py, `python -m cir_demo`) before its `main`: `kept_for_life`
    acts in this process from then on. Elsewhere (a notebook, a test calling `main`) it does nothing: a
    caller's own objects are never frozen, and its collector settings are its own."""
    _AT_ENTRY_POINT[0] = True


@contextlib.contextmanager
def kept_for_life():
    """In a process started as the app or the command line (`started_as_program`): the collector off inside
    the block; what exists when it ends is frozen, and the collector back as it was. No collection before
    the freeze: the few reference cycles that imports leave are kept, rather than found by a pass over
    everything. For what lives as long as the process only: a frozen object that is later dropped is
    still freed by reference counting, but a frozen cycle never is."""
    if not _AT_ENTRY_POINT[0]:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
