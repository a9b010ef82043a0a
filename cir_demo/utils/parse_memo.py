"""Each source file parsed once per process for the code hash, whatever the number of keys computed.

`code_hash.code_sha256` walks and parses the modules one set of roots reaches, and its memo is per set
of roots: a process that computes a dozen keys (each retriever's encoder, the FAISS index, the renderer,
the judge, the shipped outputs' code) parses the same files again for each. `install()` has code_hash's
two parsing functions, `code_text` and `_imported_names`, keep their answer for each (path, sha256 of the
source bytes) in this process: the same results, an edited file parsed again (its bytes differ).

Installed by the entry points (app.py, `python -m cir_demo`) and the tests, not written into code_hash:
every cache key holds code_hash's own code, so an edit there would make every cached and shipped file
stale. Install it before a module binds `code_text` by name (cir_demo/world/shipped.py,
cir_demo/index/prebuilt_run.py), as the entry points do first thing.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

_LOCK = threading.Lock()


def _by_source(plain, kept: dict):
    """`plain(*args, path)` kept in `kept` per (its name, args, path, sha256 of the file's bytes).
    A list is kept as a tuple and handed out as a new list each time."""

    def memo(*args):
        path = Path(args[-1])
        key = (plain.__name__, *args[:-1], str(path), hashlib.sha256(path.read_bytes()).digest())
        value = kept.get(key)
        if value is None:
            value = plain(*args)
            value = kept[key] = tuple(value) if isinstance(value, list) else value
        return list(value) if isinstance(value, tuple) else value  # a caller may extend a list it got

    memo.cache_clear = kept.clear  # either function's: both forget every parse
    memo.__wrapped__ = plain
    memo.__name__ = plain.__name__
    return memo


def install() -> None:
    """Wrap code_hash's parsing functions in this process (again: nothing more)."""
    from cir_demo.utils import code_hash

    with _LOCK:
        if not installed():
            kept: dict = {}
            code_hash.code_text = _by_source(code_hash.code_text, kept)
            code_hash._imported_names = _by_source(code_hash._imported_names, kept)


def installed() -> bool:
    from cir_demo.utils import code_hash

    return getattr(code_hash.code_text, "__wrapped__", None) is not None
