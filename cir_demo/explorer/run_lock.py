"""One background run per storage: app processes that share a runs folder (two `python app.py`
on one machine, or a restart while the old process is still ending) agree through an advisory
file lock which of them computes a given run; the others wait for its result.

The lock is `flock` on a dot-file in the runs folder, so the OS releases it when its holder dies,
however it dies. The holder writes the name of the run it computes into the file, so a waiting
process can show that run's progress. Where `fcntl` does not exist (Windows) every `take`
succeeds: each process computes its own run, as before the lock existed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Sequence

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


def lock_path(root: Path, key_parts: Sequence[str]) -> Path:
    """The lock of the run described by `key_parts` (benchmark flags, columns, reranker)."""
    key = hashlib.sha1("\0".join(key_parts).encode()).hexdigest()[:16]
    return root / f".app-run-{key}.lock"


class RunLock:
    """A held lock; `release()` (or the process's end) lets the next process take it."""

    def __init__(self, path: Path, fd: int | None):
        self.path, self._fd = path, fd

    @classmethod
    def take(cls, path: Path, run_name: str = "") -> "RunLock | None":
        """The lock, now, with `run_name` recorded in it; None when another process holds it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            return cls(path, None)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children (PEP 446)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:  # a file system without locks (some network mounts): compute, as without fcntl
            os.close(fd)
            return cls(path, None)
        held = cls(path, fd)
        held.record(run_name)
        return held

    def record(self, run_name: str) -> None:
        """Name the run being computed, for the processes that wait for it."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, run_name.encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def holder_run_name(path: Path) -> str:
    """The run the lock's holder computes ("" when unknown)."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""
