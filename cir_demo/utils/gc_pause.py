"""`collector_paused()`: Python's cyclic garbage collector off for a block, back on (and one collection)
after. For runs that build millions of small long-lived objects without reference cycles (rankings,
reranked items, per-query rows): the collector's passes over them free nothing and cost a tenth of the
run; reference counting still frees everything else as it goes."""

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
