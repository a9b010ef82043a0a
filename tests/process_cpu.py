"""How long to wait for work done at low priority: a background run at nice 19 beside other jobs at
nice 0 gets about 1% of a core, so no fixed bound fits it. A wait goes on while the processes doing
the work still use CPU, and ends (fails) only after a whole slice in which they used none (Linux /proc)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def cpu_seconds(pid: int, itself: bool = True) -> float:
    """CPU seconds (user+sys, reaped children included) of `pid` (unless `itself` is False) and of all its
    live descendants; a process gone meanwhile counts 0."""
    total = 0.0
    if itself:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) * TICK_S  # utime, stime, cutime, cstime
        except (FileNotFoundError, ProcessLookupError):
            return 0.0
    return total + sum(cpu_seconds(child) for child in _children(pid))


WORKING_LIMIT_S = 600.0  # a run that works without end (spinning) fails here, below pytest.ini's timeout


def wait_while_working(
    done: Callable[[float], bool], cpu: Callable[[], float], slice_s: float, limit_s: float = WORKING_LIMIT_S
) -> None:
    """Until `done(seconds)` (a check that may itself wait up to `seconds`) is true; after each slice of
    `slice_s` without it, go on only if `cpu()` grew meanwhile, and for `limit_s` seconds in all."""
    started, used = time.monotonic(), cpu()
    while not done(min(slice_s, max(0.0, limit_s - (time.monotonic() - started)))):
        now = cpu()
        waited = time.monotonic() - started
        assert now > used, f"no CPU used in {slice_s:.0f} s by the work waited for, and it is not done"
        assert waited < limit_s, f"not done after {waited:.0f} s although it works: a run that never ends?"
        used = now


def until(check: Callable[[], bool], poll_s: float = 0.2) -> Callable[[float], bool]:
    """`check` as a `done` for `wait_while_working`: polled for up to the given seconds."""

    def done(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if check():
                return True
            time.sleep(poll_s)
        return check()

    return done
