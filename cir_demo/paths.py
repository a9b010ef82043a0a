"""Where the project keeps generated data. Override with CIR_DEMO_CACHE, CIR_DEMO_INDEXES,
CIR_DEMO_RUNS; a variable that points at a file is a `DataFolderError` naming it."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


class DataFolderError(NotADirectoryError):
    """A data folder (or the variable that names it) points at something that is not a folder."""

    def __str__(self) -> str:
        return self.args[0]


def _folder(env: str, default: Path) -> Path:
    value = os.environ.get(env)
    path = Path(value) if value else default
    if path.exists() and not path.is_dir():
        where = f"{env}={value}" if value else str(path)
        raise DataFolderError(f"{where} is a file, not a folder; "
                              + (f"point {env} at a folder or unset it" if value else "move the file away"))
    return path


def cache_dir() -> Path:
    """Generated worlds, downloaded images, reranker score caches (never committed)."""
    return _folder("CIR_DEMO_CACHE", REPO_ROOT / "cache")


def indexes_dir() -> Path:
    return _folder("CIR_DEMO_INDEXES", REPO_ROOT / "indexes")


def assets_dir() -> Path:
    """Small committed weights (safetensors + manifest)."""
    return REPO_ROOT / "assets"


def runs_dir() -> Path:
    return _folder("CIR_DEMO_RUNS", REPO_ROOT / "runs")


def data_folder_problems() -> list[str]:
    """One line per data folder that is not usable as a folder ([] = all fine)."""
    problems = []
    for get in (cache_dir, indexes_dir, runs_dir):
        try:
            get()
        except DataFolderError as exc:
            problems.append(str(exc))
    return problems
