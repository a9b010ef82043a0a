"""Run folders: a new `runs/<time>-<benchmark>` made for each `--eval` without `--out`, and where
`--eval --results-json` wrote run folders outside runs/ (`--out elsewhere`): a short list in
runs/elsewhere.json, so the app's Report lists those evaluations too. Only folder paths are kept;
nothing is copied, and a folder that is gone is simply not listed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

LIST_FILE = "elsewhere.json"
KEEP = 200  # the newest folders remembered


def new_run_folder(benchmark_name: str, now: float | None = None) -> Path:
    """`runs/<time>-<benchmark>` (`-2`, `-3`, ... when another run of the same second has it), made here
    as an empty folder: an exclusive create, so two runs started together never get the same one."""
    from cir_demo.paths import runs_dir

    root = runs_dir()
    root.mkdir(parents=True, exist_ok=True)
    base = f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}-{benchmark_name}"
    n = 1
    while True:
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            n += 1


def _list_path() -> Path:
    from cir_demo.paths import runs_dir

    return runs_dir() / LIST_FILE


def recorded_run_folders() -> list[Path]:
    """The remembered folders that still hold an eval run (metrics.csv), newest first."""
    try:
        paths = json.loads(_list_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(paths, list):
        return []
    return [Path(p) for p in paths if isinstance(p, str) and (Path(p) / "metrics.csv").is_file()]


def record_run_folder(folder: str | Path) -> bool:
    """Remember an eval run folder written outside runs/ (a folder inside it is found anyway); False when
    the list cannot be written (the evaluation itself is unaffected)."""
    from cir_demo.paths import DataFolderError, runs_dir
    from cir_demo.utils.io import write_json_atomic

    folder = Path(folder).resolve()
    try:
        root = runs_dir().resolve()
        if folder == root or root in folder.parents:
            return True
        kept = [str(p) for p in recorded_run_folders() if str(p) != str(folder)]
        write_json_atomic(_list_path(), [str(folder), *kept][:KEEP])
    except (OSError, DataFolderError):
        return False
    return True
