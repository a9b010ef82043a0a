"""The one `library_versions`: installed versions of libraries, from package metadata (nothing
imported) or from the imported modules' `__version__` (which keeps local build tags such as
torch's `+cu130`: what a model actually ran with)."""

from __future__ import annotations

import contextlib
import functools
import importlib
from importlib import metadata

# import name -> distributions that provide it, first found wins
DISTRIBUTIONS = {
    "faiss": ("faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "faiss-gpu-cu11", "faiss"),
    "open_clip": ("open_clip_torch", "open-clip-torch"),
}


def library_versions(*names: str, imported: bool = False) -> dict[str, str | None]:
    """{name: version or None} for import names (`cir_demo` gives the project's own). `imported`:
    import each module and read its `__version__` instead of the package metadata."""
    out: dict[str, str | None] = {}
    for name in names:
        if name == "cir_demo" or imported:
            out[name] = getattr(importlib.import_module(name), "__version__", None)
            continue
        out[name] = next(filter(None, map(distribution_version, DISTRIBUTIONS.get(name, (name,)))), None)
    return out


@functools.lru_cache(maxsize=None)
def distribution_version(dist: str) -> str | None:
    """An installed distribution's version, or None; read once per process: the app checks the shipped
    outputs' libraries at install and at every page view (dozens of metadata reads each time),
    and what this process has imported does not change when a package is upgraded under it."""
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version(dist)
    return None
