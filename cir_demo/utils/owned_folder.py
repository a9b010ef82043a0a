"""Folders and files a command writes where the user names them (`--out`), written so that no byte of
the user's is ever lost, whatever the folder holds and wherever a kill lands.

The rule, the same for every writing command:
  * Nothing is deleted. A folder is written whole into a staging folder of this process
    (`<parent>/.partial/<pid>-<id>-<name>/`), its `run_manifest.json` written last (the completion mark),
    and put in place by one rename. An `--out` that holds anything is refused unless `--overwrite`,
    which first renames it whole to `<out>.replaced-<time>` (named in the command's last line).
    An output file is set aside the same way (`<file>.replaced-<time>`) before it is written anew.
  * Nothing in the folder is read as an instruction: what happens is decided by names and by what is
    there (empty or not), never by a file's content; a run's manifest is a record of what it wrote.
    A symbolic link at a path the command writes or renames (`--out`, `.partial`, the lock file)
    is refused before any work.
  * One writer at a time: an fcntl lock on `<parent>/.partial/<name>.lock` is held for the whole write;
    a second writer is refused in one line naming the process that holds it, or waits (`--wait`).
After a kill, `--out` is as it was, moved aside whole, or the whole new write; a staging folder a kill
left under `.partial/` is kept (said, for the user to delete), never removed by another process.
`CIR_DEMO_KILL_AT=<step>` (`STEPS`) kills the process before that file-system change (tests).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

from cir_demo.errors import UserError
from cir_demo.utils.io import sha256_file, write_json_atomic

RUN_MANIFEST = "run_manifest.json"
WRITTEN_BY = "cir_demo"
PARTIAL = ".partial"
# every file-system change of a write, in order; CIR_DEMO_KILL_AT names the one to die before
STEPS = ("partial", "lock", "staging", "manifest", "aside", "in", "unlock", "tidy")


class FolderInTheWay(UserError):
    """The target cannot be written now (message: one line naming what is in the way)."""


def kill_point(step: str) -> None:
    """Die by SIGKILL before `step` when CIR_DEMO_KILL_AT names it: how the tests stop a write there."""
    if os.environ.get("CIR_DEMO_KILL_AT") == step:
        os.kill(os.getpid(), signal.SIGKILL)


def target(path: str | os.PathLike) -> Path:
    """`path` absolute, its parent's links resolved (the parent is written into, never renamed)."""
    path = Path(path).absolute()
    return path.parent.resolve() / path.name


def path_problem(folder: Path, rel: object) -> str | None:
    """Why `rel` is not a plain relative path inside `folder` (None when it is): not a string, absolute,
    with `..` or an empty part, or passing through a symbolic link."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\0" in rel:
        return "not a relative path"
    if rel.startswith("/") or os.path.isabs(rel):
        return "an absolute path"
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "not a plain path inside the folder"
    here = folder
    for part in parts:
        here = here / part
        if os.path.islink(here):
            return "passes through a symbolic link"
    return None


# --------------------------------------------------------------------------- checks (no side effects)
def _kind_problem(path: Path, want_dir: bool) -> str | None:
    """Why `path` may not be written or renamed: a symbolic link, the wrong kind, a lock file with other
    hard links. None when it is missing or fine."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return (
            f"is a symbolic link (to {os.readlink(path)}); links are not written through, name a folder or file itself"
        )
    if want_dir and not stat.S_ISDIR(info.st_mode):
        return "is a file, not a folder"
    if not want_dir and not stat.S_ISREG(info.st_mode):
        return "is not a plain file"
    return None


def _lock_path(path: Path) -> Path:
    return path.parent / PARTIAL / f"{path.name}.lock"


def _names(folder: Path, limit: int = 4) -> str:
    names = sorted(os.listdir(folder))
    shown = [n + ("/" if os.path.isdir(folder / n) and not os.path.islink(folder / n) else "") for n in names[:limit]]
    return ", ".join(shown) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def write_problem(
    out: Path, overwrite: bool, is_file: bool = False, wait: bool = False, replace: str = "--overwrite"
) -> str | None:
    """Why `out` (a folder, or a file with `is_file`) may not be written now; None when it may. Reads
    names and file types only and creates nothing. `wait`: another writer at it is waited for (or
    this process holds its lock); `replace`: the command's flag that moves an earlier write aside."""
    out, lock = target(out), _lock_path(target(out))
    why = _kind_problem(out, not is_file)
    for path, want_dir in ((lock.parent, True), (lock, False)):
        if not why and (why := _kind_problem(path, want_dir)):
            why = f"{path} {why}"
    if why:
        return why
    if os.path.lexists(lock) and os.lstat(lock).st_nlink > 1:
        return f"{lock} has other hard links; move it away"
    holder = None if wait else _holder_now(lock)
    if holder:
        return f"in use by process {holder} (another command is writing it); wait for it or add --wait"
    if not os.path.lexists(out) or overwrite:
        return None
    if is_file:
        return f"exists; add {replace} to replace it, or name a new file"
    try:
        if not os.listdir(out):
            return None
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return (
        f"holds files ({_names(out)}); add {replace} to move the folder aside whole "
        f"(to {out.name}.replaced-<time>), or name a new or empty folder"
    )


def file_write_problem(path: Path, overwrite: bool, wait: bool = False) -> str | None:
    """Why one output file (a results file, a CSV, a PNG) may not be written at `path`; None when it may."""
    if path.is_dir() and not path.is_symlink():
        return "is a folder; name the file to write"
    return write_problem(path, overwrite, is_file=True, wait=wait)


# --------------------------------------------------------------------------- one writer at a time
_HELD: set[Path] = set()  # the locks this process holds: fcntl never excludes a lock's own process
_HELD_LOCK = threading.Lock()
_FLOCK = "hhqqi4x"  # Linux's struct flock: type, whence, start, len, pid


def _holder(fd: int) -> int | None:
    """The process holding a write lock on `fd`'s file; None when none (or it cannot be told)."""
    import fcntl
    import struct

    try:
        got = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, 0, 0, 0, 0))
        kind, _, _, _, pid = struct.unpack(_FLOCK, got)
    except (OSError, struct.error):
        return None
    return pid if kind != fcntl.F_UNLCK else None


def _holder_now(lock: Path) -> int | None:
    if lock in _HELD:  # checked first: closing any descriptor of a held lock's file would release it
        return os.getpid()
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _holder(fd)
    finally:
        os.close(fd)


def _try_lock(lock: Path) -> tuple[int, bool] | int:
    """(fd, made) holding `lock`'s fcntl lock, else the pid of the process holding it (-1: one that
    cannot be told; 0: none, try again)."""
    import fcntl

    with _HELD_LOCK:
        if lock in _HELD:
            return os.getpid()
        fd, made = _open_lock(lock)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd) or -1
            os.close(fd)
            return holder
        if os.path.lexists(lock) and os.fstat(fd).st_ino == os.lstat(lock).st_ino:
            _HELD.add(lock)
            return fd, made
        os.close(fd)  # the file was removed by the writer that just ended: lock the new one
        return 0


def _open_lock(lock: Path) -> tuple[int, bool]:
    """(fd, whether this call made the file); never through a link, never a file with other hard links."""
    for _ in range(5):
        try:
            return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644), True
        except FileExistsError:
            pass
        except FileNotFoundError:  # `.partial` removed by a writer that just ended
            lock.parent.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise FolderInTheWay(f"{lock}: cannot be used as a lock file ({exc.strerror}); move it away") from None
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
            return fd, False
        os.close(fd)
        raise FolderInTheWay(f"{lock}: not a plain file of its own (a folder or a hard link); move it away")
    raise FolderInTheWay(f"{lock}: keeps changing; another program is using {lock.parent}")


@contextlib.contextmanager
def folder_lock(path: Path, wait: bool = False) -> Iterator[None]:
    """Hold the one-writer lock of `path` (a folder or a file) until the block ends; a second writer is
    refused in one line or (`wait`) waits. The lock file and `.partial` are removed afterwards only
    when this process made them."""
    path = target(path)
    lock, made_partial = _lock_path(path), False
    if not os.path.lexists(lock.parent):
        kill_point("partial")
        with contextlib.suppress(FileExistsError):
            lock.parent.mkdir(parents=True)
            made_partial = True
    kill_point("lock")
    while not isinstance(got := _try_lock(lock), tuple):
        if got and not wait:
            raise FolderInTheWay(
                f"{path}: in use by process {got if got > 0 else '(unknown)'} (another command is writing it); "
                "wait for it or add --wait"
            )
        time.sleep(0.2 if got else 0.01)
    fd, made = got
    try:
        yield
    finally:
        if made:
            kill_point("unlock")
            with contextlib.suppress(OSError):
                os.unlink(lock)
        with _HELD_LOCK:
            _HELD.discard(lock)
            os.close(fd)
        if made_partial:
            kill_point("tidy")
            with contextlib.suppress(OSError):  # not empty: another writer's, or what a kill left
                lock.parent.rmdir()


# --------------------------------------------------------------------------- putting a write in place
SET_ASIDE: list[Path] = []  # what this process moved aside, said again as the command's last line


def set_aside(path: Path) -> Path:
    """Rename `path` (a folder or file, whole) to a free `<name>.replaced-<time>` beside it; returns that."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside, n = path.with_name(f"{path.name}.replaced-{stamp}"), 1
    while os.path.lexists(aside):
        n += 1
        aside = path.with_name(f"{path.name}.replaced-{stamp}-{n}")
    kill_point("aside")
    os.rename(path, aside)
    if not SET_ASIDE:
        import atexit

        atexit.register(_say_set_aside)
    SET_ASIDE.append(aside)
    print(f"note: moved the earlier {path} aside whole to {aside}", file=sys.stderr, flush=True)
    return aside


def _say_set_aside() -> None:
    print(
        f"note: the earlier contents are kept in {', '.join(map(str, SET_ASIDE))}; delete them when you no longer need them",
        file=sys.stderr,
        flush=True,
    )


def write_manifest(folder: Path, kind: str = "run") -> dict:
    """Record every file now in `folder` (size and sha256), written last: the write is complete."""
    files = {}
    for top, dirs, names in os.walk(folder):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            path = Path(top) / name
            rel = path.relative_to(folder).as_posix()
            is_link = path.is_symlink()  # recorded as a link: never followed out of the folder
            files[rel] = (
                {"link": os.readlink(path)} if is_link else {"size": path.stat().st_size, "sha256": sha256_file(path)}
            )
    manifest = {"written_by": WRITTEN_BY, "kind": kind, "files": dict(sorted(files.items()))}
    kill_point("manifest")
    write_json_atomic(folder / RUN_MANIFEST, manifest)
    return manifest


def read_manifest(folder: Path) -> dict | None:
    """The record of an earlier write in `folder`; None when there is none or it is not ours. A record
    only: nothing is moved or removed because of what it says."""
    import json

    try:
        manifest = json.loads((folder / RUN_MANIFEST).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return None
    ours = isinstance(manifest, dict) and manifest.get("written_by") == WRITTEN_BY
    return manifest if ours and isinstance(manifest.get("files"), dict) else None


def _stopped_writes(out: Path) -> list[str]:
    """Staging folders of `out` that a stopped process left in `.partial` (their names say whose)."""
    staging, found = out.parent / PARTIAL, []
    with contextlib.suppress(OSError):
        for d in staging.iterdir():
            pid, _, rest = d.name.partition("-")
            mine = rest.partition("-")[2] == out.name and pid.isdigit()
            if mine and not _alive(int(pid)) and d.is_dir() and not d.is_symlink():
                found.append(d.name + (" (complete)" if os.path.isfile(d / RUN_MANIFEST) else ""))
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


@contextlib.contextmanager
def staged_run_dir(
    out: str | os.PathLike, overwrite: bool = False, reserved: bool = False, wait: bool = False
) -> Iterator[Path]:
    """Yield a fresh staging folder; when the block ends without an exception its record is written and
    it becomes `out` by one rename (an `out` with files moved aside whole first, with `overwrite`).
    `reserved`: `out` is an empty folder made for this run (results/run_folders.py), removed again when
    the run fails. Refused (FolderInTheWay) before anything is created when `out` may not be written."""
    out = target(out)
    why = write_problem(out, overwrite, wait=wait)
    if why:
        raise FolderInTheWay(f"{out}: {why}")
    with folder_lock(out, wait):
        why = write_problem(out, overwrite, wait=True)  # again, now that no other writer can change it
        if why:
            raise FolderInTheWay(f"{out}: {why}")
        stopped = _stopped_writes(out)
        if stopped:
            print(
                f"note: {out.parent / PARTIAL} keeps what stopped writes of {out.name} left ({', '.join(stopped[:3])}); "
                "delete them when you no longer need them",
                file=sys.stderr,
            )
        kill_point("staging")
        tmp = out.parent / PARTIAL / f"{os.getpid()}-{uuid.uuid4().hex[:8]}-{out.name}"
        tmp.mkdir()
        done = False
        try:
            yield tmp
            write_manifest(tmp)
            if os.path.isdir(out) and os.listdir(out):
                set_aside(out)
            kill_point("in")
            os.rename(tmp, out)  # onto nothing or an empty folder: one atomic step
            done = True
        finally:
            if not done:
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)  # this process's own staging folder, nothing else
                if reserved:
                    with contextlib.suppress(OSError):
                        out.rmdir()


@contextlib.contextmanager
def writing_files(paths: list[Path], overwrite: bool, wait: bool = False) -> Iterator[None]:
    """Hold the lock of each output file and move an existing one aside (`overwrite`) before the block
    writes them anew; refused in one line, before anything changes, when one may not be written."""
    paths = sorted({target(p) for p in paths})
    problems = [f"{p}: {why}" for p in paths if (why := file_write_problem(p, overwrite, wait))]
    if problems:
        raise FolderInTheWay(problems[0])
    with contextlib.ExitStack() as stack:
        for p in paths:
            stack.enter_context(folder_lock(p, wait))
        for p in paths:
            if os.path.lexists(p):
                set_aside(p)
        yield


def add_wait_argument(p) -> None:
    """`--wait` for a command that writes where the user names (argparse parser or group)."""
    p.add_argument(
        "--wait",
        action="store_true",
        help="when another command is writing the same output, wait for it to end instead of stopping",
    )
