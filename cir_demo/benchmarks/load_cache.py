"""Validated benchmarks kept between runs, so a repeated `--eval` on the same files skips validation.

Reading and validating the PinPoint parquet (7,635 rows, every id checked
against a 110k-id corpus) costs about half a CPU second, a third of a whole
`--eval` of a results file. Its outcome depends only on the bytes of the
input files, the paths as given (they appear in warnings) and the loader's
code, so a successful load is stored under the cache folder, keyed by the
sha256 of all of them, and a repeated load replays it: the same queries,
corpus, info and warnings, in the same order. Failed loads are never stored
(their errors are found again every time).

The file is marshal data (the fastest reader in the standard library) after
the sha256 of that data: a damaged or unreadable file is validated again and
rewritten, with one warning.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

from cir_demo.benchmarks.schema import Judgments, Query, ValidationIssue

FORMAT = 1


class BenchmarkCacheWarning(UserWarning):
    """A stored benchmark could not be used or written; the files are validated as usual."""


def cache_key(kind: str, files: Sequence[Path], params: Sequence[Any] = ()) -> str:
    """sha256 over the format, the Python version (marshal's), the code of loader `kind`
    (`cir_demo.benchmarks.<kind>` and every module it imports, `cir_demo.utils.code_hash`) and the
    libraries it reads with, `params` and each file's path and bytes."""
    from cir_demo.utils.stat_memo import code_sha256_by_stats
    from cir_demo.utils.versions import library_versions

    # what `code_hash.code_key` holds, its hash read back while no source file changed (utils/stat_memo.py)
    code = {
        "sha256": code_sha256_by_stats((__name__, f"cir_demo.benchmarks.{kind}")),
        "libraries": library_versions("numpy", "pandas", "pyarrow"),
    }
    h = hashlib.sha256(f"{FORMAT}\0{sys.version_info[:2]}\0{kind}\0".encode())
    h.update(json.dumps(code, sort_keys=True).encode() + b"\0")
    for p in params:
        h.update(repr(p).encode() + b"\0")
    for f in files:
        h.update(str(f).encode() + b"\0")
        if f.is_file():
            with open(f, "rb") as fh:
                h.update(hashlib.file_digest(fh, "sha256").digest())
        else:
            h.update(b"\0absent\0")
    return h.hexdigest()


def cache_path(kind: str, key: str) -> Path:
    """Under $CIR_DEMO_BENCHMARK_CACHE when set (the tests use a temporary one), else <cache>/benchmarks."""
    import os

    from cir_demo.paths import cache_dir

    folder = os.environ.get("CIR_DEMO_BENCHMARK_CACHE")
    return (Path(folder) if folder else cache_dir() / "benchmarks") / f"{kind}-{key[:40]}.marshal"


def _encode(
    queries: Sequence[Query], corpus_ids: Sequence[str], info: dict, issues: Sequence[ValidationIssue]
) -> bytes | None:
    """Plain tuples (judgments stored once and shared again on reading, as the loader shares them)."""
    index: dict[int, int] = {}
    judgments = []
    rows = []
    for q in queries:
        j = q.judgments
        k = index.get(id(j))
        if k is None:
            k = index[id(j)] = len(judgments)
            judgments.append((j.positives, j.negatives, j.n_null_negatives))
        rows.append((q.query_id, q.reference_ids, q.instruction, q.group_id, k, dict(q.meta), q.target_id))
    issues = [(w.level, w.file, w.location, w.field, w.message) for w in issues]
    try:
        return marshal.dumps((judgments, rows, list(corpus_ids), info, issues))
    except ValueError:  # a value marshal cannot hold (not produced by today's loaders): not stored
        return None


def _decode(payload: bytes):
    judgments, rows, corpus_ids, info, issues = marshal.loads(payload)
    shared = [Judgments(p, n, k) for p, n, k in judgments]
    queries = [
        Query(qid, refs, instruction, group, shared[k], meta, target)
        for qid, refs, instruction, group, k, meta, target in rows
    ]
    return queries, corpus_ids, info, [ValidationIssue(*w) for w in issues]


def read(path: Path):
    """(queries, corpus_ids, info, warnings) stored at `path`, or None (absent, or damaged: warned)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        warnings.warn(
            f"stored benchmark {path} cannot be read ({exc}): validating the files again",
            BenchmarkCacheWarning,
            stacklevel=3,
        )
        return None
    digest, payload = raw[:32], raw[32:]
    try:
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("checksum mismatch")
        return _decode(payload)
    except Exception as exc:  # noqa: BLE001 - any damage means: validate again
        warnings.warn(
            f"stored benchmark {path} is damaged ({exc}): validating the files again and rewriting it",
            BenchmarkCacheWarning,
            stacklevel=3,
        )
        return None


def write(path: Path, queries, corpus_ids, info, issues) -> None:
    """Store a successful load (atomic); a cache folder that cannot be written only costs the speed-up."""
    from cir_demo.utils.io import write_bytes_atomic

    payload = _encode(queries, corpus_ids, info, issues)
    if payload is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, hashlib.sha256(payload).digest() + payload)
    except OSError as exc:
        warnings.warn(
            f"cannot store the validated benchmark at {path} ({exc}); the next run validates again",
            BenchmarkCacheWarning,
            stacklevel=3,
        )
