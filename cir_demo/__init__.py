"""cir_demo: a Composed Image Retrieval failure explorer.

In a notebook (README, "In a notebook"; `cir_demo/notebook.py`):

    import cir_demo as cd
    bench = cd.load_benchmark("cirr", root="cirr/")
    ev = cd.evaluate(bench, {"A": "a.json", "B": "b.trec"})

The API loads on first use, so `import cir_demo` stays cheap (no pandas, torch or numpy).
"""

__version__ = "0.9.0"

__all__ = ["Evaluation", "evaluate", "load_benchmark", "__version__"]
_NOTEBOOK = ("Evaluation", "evaluate", "load_benchmark")


def __getattr__(name: str):
    if name in _NOTEBOOK:
        # by name, not an import statement: every code key holds this file (utils/code_hash.py), and
        # an import here would put the whole package, which the notebook API reaches, into each of them
        import importlib

        return getattr(importlib.import_module("cir_demo.notebook"), name)
    raise AttributeError(f"module 'cir_demo' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_NOTEBOOK])
