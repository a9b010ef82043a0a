"""A value computed from files (a hash over their contents), kept on disk for the next process while the
files stat the same. Its own module, not `code_hash`: every cache key hashes `code_hash`'s code, so an
edit there would make every cached and shipped file stale."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable, Sequence


def memo_by_stats(name: str, paths: Sequence[Path], compute: Callable[[], str]) -> str:
    """`compute()` (a hash over the contents of `paths`), kept in the cache folder under `name` with the
    path, size and modification time (ns) of each of `paths`: a later process whose files all stat the
    same reads it back instead of parsing them again (the shipped outputs' code check, ~200 syntax trees,
    0.8 CPU s on every app start, beside the first visitor's page view). Any edit changes a file's
    modification time, so a changed file is always hashed again; an unreadable or unwritable memo only
    costs the computation."""
    import json
    import os

    from cir_demo.paths import cache_dir
    from cir_demo.utils.io import write_json_atomic

    stats = hashlib.sha256()
    for path in paths:
        st = os.stat(path)
        stats.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    memo = cache_dir() / "code-hash" / f"{name}.json"
    try:
        data = json.loads(memo.read_text(encoding="utf-8"))
        if data.get("stats") == stats.hexdigest() and isinstance(data.get("sha256"), str):
            return data["sha256"]
    except (OSError, ValueError, AttributeError):
        pass
    value = compute()
    try:
        write_json_atomic(memo, {"stats": stats.hexdigest(), "sha256": value})
    except OSError:
        pass
    return value


def code_sha256_by_stats(roots: Sequence[str]) -> str:
    """`code_hash.code_sha256(roots)`, kept by `memo_by_stats` over every source file of the package (which
    of them the roots reach, and their syntax trees, depend on nothing else but the Python version, part of
    the memo's name with the roots and the package's folder): a repeated `--eval` of a results file reads it
    back instead of parsing a dozen syntax trees (0.25-0.5 CPU s, a fifth of the whole run)."""
    import sys

    from cir_demo.utils.code_hash import PACKAGE_DIR, code_sha256

    roots = tuple(sorted(set(roots)))
    paths = sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)
    name = hashlib.sha256(repr((roots, str(PACKAGE_DIR), sys.version)).encode()).hexdigest()[:20]
    return memo_by_stats(f"code-{name}", paths, lambda: code_sha256(roots))
