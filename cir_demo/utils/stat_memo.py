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
