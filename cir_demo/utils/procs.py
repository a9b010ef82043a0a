"""Child processes that end with the process that started them."""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def end_with_parent(parent_pid: int | None = None, sig: int = signal.SIGTERM) -> None:
    """In a child just after fork: (Linux) the kernel sends it `sig` when its parent ends, however the
    parent ends (SIGKILL included). Otherwise a forked worker outlives a killed parent, blocked for
    good, and keeps every file it inherited open: an `flock` the parent held stays held, and the next
    index build waits on it forever. `parent_pid`: the parent as the caller knew it before the fork;
    a parent already gone by now (reparented meanwhile) ends the child at once."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))
    except OSError:  # no such libc: the child then outlives its parent, as anywhere else
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
