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

Below the process's memo, each answer is also kept on disk for the next process (`disk_folder()`: the
cache folder's code-hash/parsed, or `CIR_DEMO_CODE_MEMO`), under a key of everything that makes it: the
function, its arguments, the file's name (a package's `__init__` resolves relative imports otherwise) and
the sha256 of its bytes, the sha256 of code_hash's and this module's own source, and the running Python
(its `ast`). A file's answer is then computed once per edit, not once per process: a command line, the
app's start and its background run each compute a dozen keys over most of the package's files. An entry
carries the sha256 of its answer; a damaged or unreadable one is a miss, and a folder that cannot be
written only costs the parse.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import threading
import zlib
from pathlib import Path

_LOCK = threading.Lock()
DISK_ENV = "CIR_DEMO_CODE_MEMO"
_DISK_FORMAT = 1  # the layout of an entry (digest, then the zlib-compressed answer)


def _by_source(plain, kept: dict):
    """`plain(*args, path)` kept in `kept` per (its name, args, path, sha256 of the file's bytes).
    A list is kept as a tuple and handed out as a new list each time."""

    def memo(*args):
        path = Path(args[-1])
        source = hashlib.sha256(path.read_bytes()).digest()
        key = (plain.__name__, *args[:-1], str(path), source)
        value = kept.get(key)
        if value is None:
            entry = _disk_entry(plain.__name__, args[:-1], path, source)
            value = _read_entry(entry)
            if value is None:
                value = plain(*args)
                # kept on disk only when the file still holds the bytes the key names (not edited meanwhile)
                if entry is not None and hashlib.sha256(path.read_bytes()).digest() == source:
                    _write_entry(entry, value)
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


def disk_folder() -> Path:
    """Where the answers are kept between processes: `CIR_DEMO_CODE_MEMO` when set, else the cache
    folder's code-hash/parsed (beside the stat memos of cir_demo/utils/stat_memo.py)."""
    folder = os.environ.get(DISK_ENV)
    if folder:
        return Path(folder)
    from cir_demo.paths import cache_dir

    return cache_dir() / "code-hash" / "parsed"


@functools.lru_cache(maxsize=1)
def _code_identity() -> bytes:
    """sha256 of the code that makes and stores an answer: code_hash's source and this module's."""
    from cir_demo.utils import code_hash

    digest = hashlib.sha256()
    for source in (Path(code_hash.__file__), Path(__file__)):
        digest.update(source.read_bytes() + b"\0")
    return digest.digest()


def _disk_entry(name: str, arguments: tuple, path: Path, source: bytes) -> Path | None:
    """The file of one answer, or None where no folder can be named (a data folder variable that
    points at a file: the command says so itself)."""
    try:
        folder = disk_folder()
    except OSError:
        return None
    key = hashlib.sha256(repr((_DISK_FORMAT, sys.version, name, arguments, path.name)).encode())
    key.update(_code_identity() + source)
    digest = key.hexdigest()
    return folder / digest[:2] / digest


def _read_entry(entry: Path | None):
    if entry is None:
        return None
    try:
        data = entry.read_bytes()
        raw = zlib.decompress(data[32:])
    except (OSError, zlib.error):
        return None
    if hashlib.sha256(raw).digest() != data[:32]:
        return None  # damaged: computed again and written over
    kind, body = raw[:1], raw[1:]
    if kind == b"b":
        return body
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def _write_entry(entry: Path, value) -> None:
    from cir_demo.utils.io import write_bytes_atomic

    if isinstance(value, bytes):
        raw = b"b" + value
    elif isinstance(value, list):
        raw = b"j" + json.dumps(value).encode()
    else:
        return
    try:
        write_bytes_atomic(entry, hashlib.sha256(raw).digest() + zlib.compress(raw, 1))
    except OSError:
        pass
