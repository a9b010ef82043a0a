"""Where the project keeps generated data: caches, indexes and runs.

They live under one data root: `CIR_DEMO_DATA` when set; else the persistent storage of a
Hugging Face Space (`/data`, when the app runs on a Space, `SPACE_ID` set, and the folder is
writable), because a Space's working tree is lost on every restart; else the working tree.
`CIR_DEMO_CACHE`, `CIR_DEMO_INDEXES` and `CIR_DEMO_RUNS` override each folder on its own; a
variable that points at a file is a `DataFolderError` naming it.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SPACE_STORAGE = "/data"  # where Spaces mount persistent storage (`CIR_DEMO_SPACE_STORAGE` overrides, for tests)


class DataFolderError(NotADirectoryError):
    """A data folder (or the variable that names it) points at something that is not a folder."""

    def __str__(self) -> str:
        return self.args[0]


def space_storage() -> Path | None:
    """The Space's persistent storage when running on a Space that has it, else None."""
    if not os.environ.get("SPACE_ID"):
        return None
    path = Path(os.environ.get("CIR_DEMO_SPACE_STORAGE", SPACE_STORAGE))
    return path if path.is_dir() and os.access(path, os.W_OK) else None


def data_root() -> Path:
    """The folder that holds cache/, indexes/ and runs/ unless each is overridden."""
    if os.environ.get("CIR_DEMO_DATA"):
        return _folder("CIR_DEMO_DATA", REPO_ROOT)
    return space_storage() or REPO_ROOT


def _folder(env: str, default: Path) -> Path:
    value = os.environ.get(env)
    path = Path(value) if value else default
    if path.exists() and not path.is_dir():
        where = f"{env}={value}" if value else str(path)
        raise DataFolderError(
            f"{where} is a file, not a folder; "
            + (f"point {env} at a folder or unset it" if value else "move the file away")
        )
    return path


def cache_dir() -> Path:
    """Generated worlds, downloaded images, reranker score caches (never committed)."""
    return _folder("CIR_DEMO_CACHE", data_root() / "cache")


def indexes_dir() -> Path:
    return _folder("CIR_DEMO_INDEXES", data_root() / "indexes")


def assets_dir() -> Path:
    """Small committed weights (safetensors + manifest)."""
    return REPO_ROOT / "assets"


def runs_dir() -> Path:
    return _folder("CIR_DEMO_RUNS", data_root() / "runs")


PREBUILT_ENV = "CIR_DEMO_PREBUILT"  # another prebuilt folder (tests); an empty folder turns them off


def prebuilt_root() -> Path:
    """`indexes/prebuilt/` of the repository, what it ships for the default world (`$CIR_DEMO_PREBUILT`
    overrides it): the world's test part, corpus embeddings, --eval outputs (docs/indexes.md)."""
    value = os.environ.get(PREBUILT_ENV)
    return Path(value) if value else REPO_ROOT / "indexes" / "prebuilt"


def data_folder_problems() -> list[str]:
    """One line per data folder that is not usable as a folder ([] = all fine)."""
    problems = []
    for get in (cache_dir, indexes_dir, runs_dir):
        try:
            get()
        except DataFolderError as exc:
            problems.append(str(exc))
    return list(dict.fromkeys(problems))  # a bad CIR_DEMO_DATA is one problem, not three
