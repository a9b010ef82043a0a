"""Run one function in a forked child while the caller goes on (`beside`), or inline where fork is not
the way processes start or the caller is not the main thread. The child reads the caller's memory as it was (nothing is pickled but the
result, which must be picklable), so it suits work over large in-memory tables whose only output is
files, such as an eval's plots written while its paired bootstrap runs on the other core."""

from __future__ import annotations

import multiprocessing
import sys
import threading
import traceback
from typing import Any, Callable


def can_fork_here() -> bool:
    """Whether a child may be forked here: from the main thread only (a server's worker thread may fork
    while another thread holds a lock the child would then wait on forever), where fork is how processes
    start."""
    on_main = threading.current_thread() is threading.main_thread()
    return on_main and "fork" in multiprocessing.get_all_start_methods() and sys.platform != "win32"


class Beside:
    """The result of `fn()` run in a child (or already run inline): `result()` waits for it and returns
    it, or raises a RuntimeError with the child's traceback."""

    def __init__(self, fn: Callable[[], Any], what: str):
        self.what = what
        self._value: Any = None
        self._proc = None
        if not can_fork_here():
            self._value = fn()
            return
        ctx = multiprocessing.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)

        def child():
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
