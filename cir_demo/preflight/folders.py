"""Folders a run writes, checked before it creates anything: the output folder (new, empty, or
an earlier run recorded by its run_manifest.json, replaced with --overwrite) and the data folders (`CIR_DEMO_DATA`, `_CACHE`, `_INDEXES`, `_RUNS`).

Each problem is a blocking `Line`: the flag and folder as item, what is wrong, the fix.
"""
from __future__ import annotations

import os
from pathlib import Path

from cir_demo.preflight.checks import Line


def data_folder_problems() -> list[Line]:
    """A data folder variable that names a file (the message names the variable and its fix)."""
    from cir_demo.paths import data_folder_problems as problems

    return [Line("", "blocked", p) for p in problems()]


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def creatable_dir_problem(path: Path, flag: str) -> Line | None:
    """None when `path` is a folder or can be created as one."""
    item = f"{flag} {path}"
    if path.exists():
        if not path.is_dir():
            return Line(item, "blocked", "an existing file, not a folder", "name a new folder")
        if not os.access(path, os.W_OK | os.X_OK):
            return Line(item, "blocked", "folder is not writable")
        return None
    base = _nearest_existing(path)
    if not base.is_dir():
        return Line(item, "blocked", f"cannot be created, {base} is a file")
    if not os.access(base, os.W_OK | os.X_OK):
        return Line(item, "blocked", f"cannot be created, {base} is not writable")
    return None


def run_dir_problem(path: Path, flag: str = "--out", overwrite: bool = False) -> Line | None:
    """A run's output folder: new, empty, or (with --overwrite) an earlier run, recognised by its manifest."""
    from cir_demo.utils.owned_folder import write_problem

    problem = creatable_dir_problem(path, flag)
    if problem or not path.is_dir():
        return problem
    why = write_problem(path, overwrite)
    return Line(f"{flag} {path}", "blocked", why) if why else None


# commands whose `--out` folder holds the files their manifest.json lists (a world, trained weights)
MANIFEST_OUT = {("world", "generate"): "a generated world", ("train", None): "trained weights"}


def manifest_folder_problem(path: Path, flag: str, what: str) -> Line | None:
    """`path` new, empty, or an earlier write of `what` with nothing beside the files its manifest.json
    lists: the command writes those names again, so anything else there is refused, never overwritten."""
    import json

    problem = creatable_dir_problem(path, flag)
    if problem or not path.is_dir() or not any(path.iterdir()):
        return problem
    own = {"manifest.json"}
    try:
        files = json.loads((path / "manifest.json").read_text(encoding="utf-8"))["files"]
        own |= {name.split("/", 1)[0] for name in files}
    except (OSError, ValueError, KeyError, TypeError):
        own = set()  # no manifest of ours: nothing here was written by this command
    foreign = sorted(e.name + ("/" if e.is_dir() else "") for e in path.iterdir() if e.name not in own)
    if not foreign:
        return None
    shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
    return Line(f"{flag} {path}", "blocked", f"holds files that are not part of {what} ({shown})",
                "name a new or empty folder")


# commands that write a folder of their own files by staged_run_dir (run_manifest.json, --overwrite)
RUN_OUT = {("world", "export"), ("world", "render")}


def _rerank_files(out: Path) -> list[Path]:
    return [out, out.with_name(out.stem + ".rerank.json")]  # the reranked file and its details


# commands whose --out is one file (or a few beside it), replaced only with --overwrite
FILE_OUT = {("rerank", None): _rerank_files, ("failures", None): lambda out: [out],
            ("world", "contact-sheet"): lambda out: [out]}


def file_out_problems(paths: list[Path], overwrite: bool, flag: str = "--out") -> list[Line]:
    """An output file that exists (refused unless `overwrite`) or is a folder: one line each."""
    from cir_demo.utils.owned_folder import file_write_problem

    return [Line(f"{flag} {p}", "blocked", why) for p in paths if (why := file_write_problem(p, overwrite))]


def fetch_report_problems(args) -> list[Line]:
    """`images fetch --report F`: an existing F is replaced only when an earlier fetch wrote it (its header)."""
    from cir_demo.images.fetch import REPORT_HEADER

    report = getattr(args, "report", None)
    if (args.command, getattr(args, "images_command", None)) != ("images", "fetch") or not report:
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
    return [Line(f"--report {path}", "blocked", "exists and is not a report of an earlier fetch",
                 "name a new file")]


def command_out_problems(args) -> list[Line]:
    """The `--out` of a command that writes one: a folder (MANIFEST_OUT, RUN_OUT) or a file (FILE_OUT)."""
    key = (args.command, getattr(args, f"{args.command}_command", None))
    out = getattr(args, "out", None)
    if not out:
        return fetch_report_problems(args)
    if key in MANIFEST_OUT:
        problem = manifest_folder_problem(Path(out), "--out", MANIFEST_OUT[key])
    elif key in RUN_OUT:
        problem = run_dir_problem(Path(out), "--out", getattr(args, "overwrite", False))
    elif key in FILE_OUT:
        return file_out_problems(FILE_OUT[key](Path(out)), getattr(args, "overwrite", False))
    else:
        return []
    return [problem] if problem else []
