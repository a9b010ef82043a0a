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


def _runnable_now() -> int | None:
    """Threads runnable on the machine at this moment, the caller's included (Linux's /proc/loadavg)."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def other_work(load: float | None = None) -> float:
    """How many cores' worth of work besides the caller's the machine has: the lesser of its 1-minute load
    average (`load`, read now when None) and the threads runnable at this moment besides the caller. The
    average alone still counts a command that has just ended; the moment alone misses work that waits on
    its disk. 0.0 where neither is known."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average here
            load = None
    runnable = _runnable_now()
    known = [x for x in (load, None if runnable is None else runnable - 1) if x is not None]
    return min(known) if known else 0.0


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
    """Whether a child process would have a core of its own: two usable CPUs or more, and other work
    (`other_work`; inside `other_work_at_start`, the run's) filling fewer than all but one of them. On a
    machine that other work already fills, a child only takes turns with it, and its fork and the
    copy-on-write faults after it cost CPU that the same work done inline does not (docs/benchmarks.md
    measures both). On a quiet machine the child's work and the caller's overlap."""
    cpus = usable_cpus()
    work = _OTHER_WORK_AT_START.get()
    return cpus >= 2 and (other_work() if work is None else work) < cpus - 1


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
