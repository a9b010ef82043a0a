"""A run folder appears under its final name only when complete.

`staged_run_dir(out)` yields a fresh folder under `<parent of out>/.partial/`; when the
block ends without an exception it is renamed to `out` (an earlier run there is replaced
as a whole). Whatever fails or is killed midway stays under `.partial/`, which no one lists
(run listings look for `metrics.csv` one level down), and is cleaned up by the next run once
the process that wrote it is gone. Caches (indexes, embeddings, reranker scores) live
elsewhere, so a re-run after a kill reuses all the work done before it.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Iterator

PARTIAL = ".partial"


def default_out_dir(benchmark_name: str) -> Path:
    """`runs/<time>-<benchmark>`: where a run goes when --out is not given."""
    from cir_demo.paths import runs_dir

    return runs_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-{benchmark_name}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def clean_abandoned(parent: Path) -> None:
    """Remove staging folders of processes that no longer run (killed runs)."""
    staging = parent / PARTIAL
    if not staging.is_dir():
        return
    for d in staging.iterdir():
        pid = d.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)


def publish(tmp: Path, out: Path) -> None:
    """Move the complete run `tmp` to `out`; an earlier run (or empty folder) there is replaced."""
    old = None
    if out.exists():
        old = tmp.parent / f"{os.getpid()}-old-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_run_dir(out: str | os.PathLike) -> Iterator[Path]:
    out = Path(out).absolute()
    staging = out.parent / PARTIAL
    staging.mkdir(parents=True, exist_ok=True)
    clean_abandoned(out.parent)
    tmp = staging / f"{os.getpid()}-{uuid.uuid4().hex[:8]}-{out.name}"
    tmp.mkdir()
    try:
        yield tmp
        publish(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):  # leave no empty .partial behind
            staging.rmdir()
