"""A folder a command writes appears under its final name only when complete.

`staged_run_dir(out, overwrite, outputs)` yields a fresh folder under `<parent of out>/.partial/`; when
the block ends without an exception its files are recorded in `run_manifest.json` and it is
moved to `out` (owned_folder.replace_owned): a new or empty `out` by one rename; an earlier
write there only with `overwrite`, and then only that write's files (those its manifest lists and the
command declares) are replaced under a journal, anything else in the folder is kept. Whatever fails or
is killed midway stays under `.partial/`, which no one lists (run listings look for `metrics.csv` one
level down), and is cleaned up by the next write there once the process that wrote it is gone.
`out` a symbolic link: the folder it names is written (so the link stays a link).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Iterator

PARTIAL = ".partial"
_STAGED = re.compile(r"(\d+)-[0-9a-f]{8}-")  # <pid>-<random>-<name>: the only folders clean_abandoned removes


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def clean_abandoned(parent: Path) -> None:
    """Remove staging folders of processes that have ended (killed runs); the earlier run's files
    an interrupted --overwrite set aside (`replaced-...`) and anything else are kept."""
    staging = parent / PARTIAL
    if not staging.is_dir():
        return
    for d in staging.iterdir():
        m = _STAGED.match(d.name)
        if m and d.is_dir() and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def staged_run_dir(
    out: str | os.PathLike, overwrite: bool = False, outputs=None, reserved: bool = False
) -> Iterator[Path]:
    """`outputs`: the names the command declares (owned_folder.OUTPUTS; default `--eval`'s). `reserved`:
    `out` is an empty folder made for this run (staging.default_out_dir), removed again when it fails."""
    from cir_demo.utils.folder_journal import settle
    from cir_demo.utils.owned_folder import EVAL_RUN, replace_owned, write_manifest

    outputs = outputs or EVAL_RUN
    out = Path(out).absolute()
    if out.is_symlink():
        print(f"{out} is a link to {out.resolve()}: written there", flush=True)
        out = out.resolve()
    if out.is_dir():
        settle(out)  # a replacement a kill interrupted: completed or undone before anything else
    staging = out.parent / PARTIAL
    staging.mkdir(parents=True, exist_ok=True)
    clean_abandoned(out.parent)
    tmp = staging / f"{os.getpid()}-{uuid.uuid4().hex[:8]}-{out.name}"
    tmp.mkdir()
    done = False
    try:
        yield tmp
        write_manifest(tmp, outputs=outputs)
        replace_owned(tmp, out, overwrite, outputs)
        done = True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):  # leave no empty .partial behind
            staging.rmdir()
        if reserved and not done:
            with contextlib.suppress(OSError):
                out.rmdir()
