"""Run one function in a forked child while the caller goes on (`beside`), or inline where fork is not
the way processes start, the caller is not the main thread, or no core is spare for the child
(`spare_core`). The child reads the caller's memory as it was (nothing is pickled but the result, which
must be picklable), so it suits work over large in-memory tables whose only output is files, such as an
eval's plots written while its paired bootstrap runs on the other core."""

from __future__ import annotations

import contextlib
import contextvars
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable, Iterator

from cir_demo.utils.procs import end_with_parent


def can_fork_here() -> bool:
    """Whether a child may be forked here: from the main thread only (a server's worker thread may fork
    while another thread holds a lock the child would then wait on forever), where fork is how processes
    start."""
    on_main = threading.current_thread() is threading.main_thread()
    return on_main and "fork" in multiprocessing.get_all_start_methods() and sys.platform != "win32"


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def machine_busy_seconds() -> float | None:
    """CPU seconds the machine's cores have been busy since boot (Linux's /proc/stat; idle and waiting
    on disks left out); None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this process's threads and of its children that have ended."""
    import resource

    own, ended = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime


# (wall clock, machine busy seconds, own CPU seconds, other work then) at the last reading: from the
# module's import on, every reading measures the interval since the one before
_LAST_READING: list[tuple[float, float, float, float]] = []
_SHORTEST_INTERVAL_S = 0.25  # a shorter one is all noise: the reading before it stands
_clock = time.monotonic


def other_work() -> float:
    """How many cores' worth of work besides this process's the machine has had since the last reading
    (at the earliest, this module's import): the cores' busy time less this process's own CPU time, over
    the wall time between. It sees what is running now, where a load average still counts, for a minute,
    a command that has just ended; a run reads it once, when it begins (`other_work_at_start`). Where
    /proc/stat is missing, the 1-minute load average."""
    busy = machine_busy_seconds()
    if busy is None:
        try:
            return os.getloadavg()[0]
        except (AttributeError, OSError):  # nothing known of other work
            return 0.0
    now, own = _clock(), own_cpu_seconds()
    if not _LAST_READING:
        _LAST_READING.append((now, busy, own, 0.0))
        return 0.0  # no interval yet: read at import, so a first use has one
    then, busy_then, own_then, work_then = _LAST_READING[0]
    if now - then < _SHORTEST_INTERVAL_S:
        return work_then
    work = max(0.0, (busy - busy_then) - (own - own_then)) / (now - then)
    _LAST_READING[0] = (now, busy, own, work)
    return work


# What a run read of `other_work` when it began (`other_work_at_start`): its own children and threads
# raise the load as it goes, and they are not other work.
_OTHER_WORK_AT_START: contextvars.ContextVar[float | None] = contextvars.ContextVar("other_work_at_start", default=None)


@contextlib.contextmanager
def other_work_at_start(work: float) -> Iterator[None]:
    """Within it, `spare_core` reads `work` (a run's `other_work` when it began) instead of reading the
    machine now."""
    token = _OTHER_WORK_AT_START.set(work)
    try:
        yield
    finally:
        _OTHER_WORK_AT_START.reset(token)


def spare_core() -> bool:
    """Whether a child process would have most of a core to itself: two usable CPUs or more, and other work
    (`other_work`; inside `other_work_at_start`, the run's) leaving at least one and a half of them to this
    process and its child. On a machine that other work already fills, a child only takes turns with it,
    and its fork and the copy-on-write faults after it cost CPU that the same work done inline does not
    (docs/benchmarks.md measures both). On a quiet machine the child's work and the caller's overlap."""
    cpus = usable_cpus()
    work = _OTHER_WORK_AT_START.get()
    return cpus >= 2 and (other_work() if work is None else work) < cpus - 1.5


class Beside:
    """The result of `fn()` run in a child (or already run inline, where `can_fork_here` or `spare_core`
    says no): `result()` waits for it and returns it, or raises a RuntimeError with the child's traceback."""

    def __init__(self, fn: Callable[[], Any], what: str):
        self.what = what
        self._value: Any = None
        self._proc = None
        if not (can_fork_here() and spare_core()):
            self._value = fn()
            return
        ctx = multiprocessing.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)
        parent = os.getpid()

        def child():
            # A child whose caller was killed must not live on: blocked sending a result larger than the
            # pipe holds, it would wait for good, holding the caller's memory and files. Killed outright
            # (no handler of the caller's runs here), and its copy of the reading end closed, so that
            # a send with no reader left fails instead of waiting.
            end_with_parent(parent, signal.SIGKILL)
            self._recv.close()
            try:
                send.send(("ok", fn()))
            except BaseException:  # the caller re-raises it with the child's traceback
                send.send(("error", traceback.format_exc()))
            finally:
                send.close()

        self._proc = ctx.Process(target=child, name=what, daemon=True)
        self._proc.start()
        send.close()

    def result(self) -> Any:
        if self._proc is None:
            return self._value
        try:
            status, value = self._recv.recv()
        except EOFError:
            status, value = "error", None
        finally:
            self._proc.join()
            self._recv.close()
        if status != "ok":
            code = self._proc.exitcode
            raise RuntimeError(f"{self.what} failed in its child process (exit code {code}):\n{value or ''}")
        return value


def beside(fn: Callable[[], Any], what: str) -> Beside:
    """Start `fn()` beside the caller; `.result()` joins it."""
    return Beside(fn, what)


other_work()  # the first reading, so that a first use measures an interval
