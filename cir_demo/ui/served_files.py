"""This process's one folder of files the page serves (the Report's plot and download copies, the
upload example's images, the API's images), removed when the process exits: gradio serves files by path, and
nothing under runs/ or the caches is ever handed to it.

The folder lies inside gradio's own file cache (`GRADIO_TEMP_DIR`, else `<tmp>/gradio`): gradio hands out
a file there as it is, where it would hash every byte of any other file and copy it into that cache at
every answer that names it (a page load names the Report's downloads, a world run's ~15 MB: the largest
part of a page load's server CPU, on gradio's one event-loop thread; docs/benchmarks.md)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

_FOLDER: list[Path] = []


def gradio_cache() -> Path:
    """The folder gradio copies answered files into and serves them from (as gradio names it)."""
    from gradio.utils import get_upload_folder

    return Path(get_upload_folder())


def served_folder() -> Path:
    """The folder, made on first use (again if something removed it)."""
    if not _FOLDER or not _FOLDER[0].is_dir():
        root = gradio_cache()
        root.mkdir(parents=True, exist_ok=True)
        _FOLDER[:] = [Path(tempfile.mkdtemp(prefix="cir-demo-served-", dir=root))]
        atexit.register(shutil.rmtree, _FOLDER[0], True)
    return _FOLDER[0]
