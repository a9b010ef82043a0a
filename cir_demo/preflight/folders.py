"""Folders a run writes, checked before it creates anything: the output folder (not a link, new or
empty, or moved aside whole with --overwrite; no other writer at it) and the data folders
(`CIR_DEMO_DATA`, `_CACHE`, `_INDEXES`, `_RUNS`).

Each problem is a blocking `Line`: the flag and folder as item, what is wrong, the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

from cir_demo.preflight.checks import Line
from cir_demo.preflight.flags import GivenFlags


def data_folder_problems() -> list[Line]:
    """A data folder variable that names a file (the message names the variable and its fix)."""
    from cir_demo.paths import data_folder_problems as problems

    return [Line("", "blocked", p) for p in problems()]


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


# folders of the system (and everything below the first five): never an output folder
_SYSTEM_TREES = ("/proc", "/sys", "/dev", "/etc", "/boot")
_SYSTEM_FOLDERS = (
    "/",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/var",
    "/run",
    "/opt",
    "/srv",
    "/home",
    "/root",
    "/tmp",
    "/mnt",
    "/media",
    "/snap",
)


def system_folder(path: Path) -> bool:
    """`path` (resolved) is a folder of the system: `/`, `/usr`, anything under `/proc`, ..."""
    text = path.as_posix()
    return (
        text in _SYSTEM_FOLDERS
        or text in _SYSTEM_TREES
        or any(text.startswith(t + "/") for t in _SYSTEM_TREES)
        or text.startswith("/usr/")
        and text.count("/") <= 2
    )


def creatable_dir_problem(path: Path, flag: str, moved_in: bool = True) -> Line | None:
    """None when `path` is a folder or can be created as one, not a system folder, and (`moved_in`: a
    write staged beside it is renamed in at the end) not a mount point, its parent writable. Checked
    without listing anything; a symbolic link is followed, and said."""
    item = f"{flag} {path}"
    resolved = path.resolve()
    if path.is_symlink() and not path.exists():
        return Line(item, "blocked", f"a link to {resolved}, which does not exist", "name a folder")
    link = f"a link to {resolved}: " if resolved != path.absolute() else ""
    if system_folder(resolved):
        return Line(item, "blocked", f"{link}a system folder", "name a folder of your own")
    if path.exists():
        return _existing_dir_problem(item, resolved, link, moved_in)
    base = _nearest_existing(resolved)
    if not base.is_dir():
        return Line(item, "blocked", f"cannot be created, {base} is a file")
    if not os.access(base, os.W_OK | os.X_OK):
        return Line(item, "blocked", f"cannot be created, {base} is not writable")
    return None


def _existing_dir_problem(item: str, resolved: Path, link: str, moved_in: bool) -> Line | None:
    if not resolved.is_dir():
        return Line(item, "blocked", f"{link}an existing file, not a folder", "name a new folder")
    if moved_in and os.path.ismount(resolved):
        return Line(
            item,
            "blocked",
            f"{link}a mount point, and a finished write is moved in by a rename, which cannot cross one",
            "name a folder inside it",
        )
    if not os.access(resolved, os.W_OK | os.X_OK):
        return Line(item, "blocked", f"{link}folder is not writable")
    if moved_in and not os.access(resolved.parent, os.W_OK | os.X_OK):
        return Line(
            item,
            "blocked",
            f"{link}its parent {resolved.parent} is not writable, and the write is staged there",
            "name a folder in a writable one",
        )
    return None


def run_dir_problem(
    path: Path, flag: str = "--out", overwrite: bool = False, replace: str = "--overwrite", wait: bool = False
) -> Line | None:
    """A folder a command writes whole and renames in (owned_folder.staged_run_dir): not a system
    folder or a link, new or empty, or with `overwrite` (the flag `replace`) anything (it is moved
    aside whole), and no other writer at it now."""
    from cir_demo.utils.owned_folder import write_problem

    problem = creatable_dir_problem(path, flag)
    why = None if problem else write_problem(path, overwrite, wait=wait, replace=replace)
    return Line(f"{flag} {path}", "blocked", why) if why else problem


def world_out_problem(flags: GivenFlags) -> Line | None:
    """`world generate --out`: an intact world of that size and seed there is left as it is (nothing
    written); otherwise the folder is written whole, as a run's (--force moves an earlier one aside)."""
    from cir_demo.world.disk import world_problems

    out, force = Path(flags.get("out")), bool(flags.get("force"))
    if (
        not force
        and out.is_dir()
        and not out.is_symlink()
        and not world_problems(out, flags.get("size"), flags.get("seed"))
    ):
        return None
    return run_dir_problem(out, "--out", force, "--force", bool(flags.get("wait")))


def _weights_names(manifest: dict):
    """Trained weights' manifest (its format): every name it lists is the training's (its folders vary)."""
    from cir_demo.training.pipeline import MANIFEST_FORMAT

    if manifest.get("format") != MANIFEST_FORMAT:
        return None
    return (lambda name: True), ()


# commands whose `--out` folder holds the files their manifest.json lists (trained weights):
# what they write, and, given a manifest of theirs, which of the names it lists are theirs
MANIFEST_OUT = {("train", None): ("trained weights", _weights_names)}


def _own_names(path: Path, recognise) -> set[str]:
    """The top-level names in `path` that its manifest.json, recognised as the command's own, makes the
    command's: each listed entry a plain path inside the folder and a name the command writes."""
    import json

    from cir_demo.utils.owned_folder import path_problem

    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        names = recognise(manifest) if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None
    except (OSError, ValueError, RecursionError):
        names = None
    if names is None:  # no manifest of this command's: nothing here was written by it
        return set()
    declares, beside = names
    return {"manifest.json", *beside} | {
        rel.split("/", 1)[0] for rel in manifest["files"] if not path_problem(path, rel) and declares(rel)
    }


def manifest_folder_problem(path: Path, flag: str, what: str, recognise=None) -> Line | None:
    """`path` new, empty, or an earlier write of `what` with nothing beside the files its manifest.json
    lists: the command writes those names again, so anything else there is refused, never overwritten."""
    problem = creatable_dir_problem(path, flag, moved_in=False)  # written in place
    if problem or not path.is_dir() or not any(path.iterdir()):
        return problem
    own = _own_names(path.resolve(), recognise) if recognise else set()
    foreign = sorted(e.name + ("/" if e.is_dir() else "") for e in path.iterdir() if e.name not in own)
    if not foreign:
        return None
    shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
    return Line(
        f"{flag} {path}", "blocked", f"holds files that are not part of {what} ({shown})", "name a new or empty folder"
    )


# commands that write a folder whole by staged_run_dir (--overwrite moves an earlier one aside)
RUN_OUT = {("world", "export"), ("world", "render")}


def _rerank_files(out: Path) -> list[Path]:
    return [out, out.with_name(out.stem + ".rerank.json")]  # the reranked file and its details


# commands whose --out is one file (or a few beside it), replaced only with --overwrite
FILE_OUT = {
    ("rerank", None): _rerank_files,
    ("failures", None): lambda out: [out],
    ("world", "contact-sheet"): lambda out: [out],
}


def file_out_problems(paths: list[Path], overwrite: bool, flag: str = "--out", wait: bool = False) -> list[Line]:
    """An output file that exists (refused unless `overwrite`) or is a folder: one line each."""
    from cir_demo.utils.owned_folder import file_write_problem

    return [Line(f"{flag} {p}", "blocked", why) for p in paths if (why := file_write_problem(p, overwrite, wait))]


def fetch_report_problems(flags: GivenFlags) -> list[Line]:
    """`images fetch --report F`: an existing F is replaced only when an earlier fetch wrote it (its header)."""
    from cir_demo.images.fetch import REPORT_HEADER

    report = flags.get("report")
    if (flags.command, flags.action) != ("images", "fetch") or not report:
        return []
    path = Path(report)
    if path.is_dir():
        return [Line(f"--report {path}", "blocked", "is a folder; name the file to write")]
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(len(REPORT_HEADER))
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [Line(f"--report {path}", "blocked", f"cannot be read ({exc.strerror})")]
    if head == REPORT_HEADER:
        return []
    return [Line(f"--report {path}", "blocked", "exists and is not a report of an earlier fetch", "name a new file")]


def command_out_problems(flags: GivenFlags) -> list[Line]:
    """The `--out` of a command that writes one: a folder (MANIFEST_OUT, RUN_OUT) or a file (FILE_OUT)."""
    key = (flags.command, flags.action)
    out = flags.get("out")
    overwrite, wait = bool(flags.get("overwrite")), bool(flags.get("wait"))
    if not out:
        return fetch_report_problems(flags)
    if key == ("world", "generate"):
        problem = world_out_problem(flags)
    elif key in MANIFEST_OUT:
        problem = manifest_folder_problem(Path(out), "--out", *MANIFEST_OUT[key])
    elif key in RUN_OUT:
        problem = run_dir_problem(Path(out), "--out", overwrite, wait=wait)
    elif key in FILE_OUT:
        return file_out_problems(FILE_OUT[key](Path(out)), overwrite, wait=wait)
    else:
        return []
    return [problem] if problem else []
