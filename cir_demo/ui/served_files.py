"""This process's one folder of files the page serves (the Report's plot and download copies, the
upload example's images), removed when the process exits: gradio serves files by path, and nothing
under runs/ or the caches is ever handed to it."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

_FOLDER: list[Path] = []


def served_folder() -> Path:
    """The folder, made on first use (again if something removed it)."""
    if not _FOLDER or not _FOLDER[0].is_dir():
        _FOLDER[:] = [Path(tempfile.mkdtemp(prefix="cir-demo-served-"))]
        atexit.register(shutil.rmtree, _FOLDER[0], True)
    return _FOLDER[0]
