"""Import gradio without its type-stub writer.

On every import, gradio's ComponentMeta rewrites the .pyi stub beside each component's source
(parsing the source with `ast` and rendering a jinja template per event): most of an import's CPU
time, paid again at every start of a Space (docs/benchmarks.md, "Costs behind code choices"). The stubs serve editors
only; nothing at run time reads them. `install()` swaps that writer for a no-op as the module is
loaded, before any component class is created; if gradio renames it, gradio imports as it would
anyway.

`refuse_ipython()` (for `python app.py`, a script and never an IPython session): gradio imports IPython
when it is installed, at its import and again at launch, only to ask whether it runs in a notebook
(a share of every cold start). In a process that has not imported IPython the answer is no either
way, so IPython is refused there and gradio takes its "not installed" path.

`headless_matplotlib()` (also for `python app.py`): gradio asks matplotlib for its backend around every
event it processes, on the server's event loop; with no backend named, matplotlib resolves one by
importing pyplot (on a cold start, inside the first visitor's first event). A server has no
display, so it names the one that resolution picks there anyway (agg), unless the user named one."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

_MODULE = "gradio.component_meta"
_WRITER = "create_or_modify_pyi"


def _no_stubs(*_args, **_kwargs) -> None:
    return None


class _WithoutStubWriter(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            if callable(getattr(module, _WRITER, None)):
                setattr(module, _WRITER, _no_stubs)

        loader.exec_module = exec_module
        return spec


class _RefuseIPython(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname == "IPython" or fullname.startswith("IPython."):
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (python app.py runs outside IPython)", name=fullname
            )
        return None


def refuse_ipython() -> bool:
    """Refuse IPython's import in this process from now on; False when it is imported already (a notebook)."""
    if "IPython" in sys.modules:
        return False
    if not any(isinstance(f, _RefuseIPython) for f in sys.meta_path):
        sys.meta_path.insert(0, _RefuseIPython())
    return True


def install() -> bool:
    """Skip the stub writer in gradio's next import; False when gradio is already imported (too late)."""
    if _MODULE in sys.modules:
        return False
    if not any(isinstance(f, _WithoutStubWriter) for f in sys.meta_path):
        sys.meta_path.insert(0, _WithoutStubWriter())
    return True


def headless_matplotlib() -> bool:
    """Name matplotlib's non-interactive backend (agg) for this process and its children, unless a backend
    is named already or matplotlib is imported (too late to matter); True when named here."""
    if "MPLBACKEND" in os.environ or "matplotlib" in sys.modules:
        return False
    os.environ["MPLBACKEND"] = "agg"
    return True
