"""A run folder appears under its final name only when complete.

`staged_run_dir(out, overwrite)` yields a fresh folder under `<parent of out>/.partial/`; when
the block ends without an exception its files are recorded in `run_manifest.json` and it is
moved to `out` (cir_demo/utils/owned_folder.py): a new or empty `out` by one rename; an earlier
run there only with `overwrite`, and then only that run's files (those its manifest lists) are
replaced, anything else in the folder is kept. Whatever fails or is killed midway stays under `.partial/`, which no one lists
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
    """`runs/<time>-<benchmark>` (`-2`, `-3`, ... when a run of the same second has it): where a run
    goes when --out is not given; never an existing folder."""
    from cir_demo.paths import runs_dir

    base = runs_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-{benchmark_name}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


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


@contextlib.contextmanager
def staged_run_dir(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    from cir_demo.utils.owned_folder import replace_owned, write_manifest

    out = Path(out).absolute()
    staging = out.parent / PARTIAL
    staging.mkdir(parents=True, exist_ok=True)
    clean_abandoned(out.parent)
    tmp = staging / f"{os.getpid()}-{uuid.uuid4().hex[:8]}-{out.name}"
    tmp.mkdir()
    try:
        yield tmp
        write_manifest(tmp)
        replace_owned(tmp, out, overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):  # leave no empty .partial behind
            staging.rmdir()
