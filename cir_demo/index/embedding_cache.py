"""Corpus embeddings kept for reuse: the data folder's embedding cache (keyed by the image tower, the
corpus ids and the benchmark's content, each file with its record), else the repository's prebuilt
rows, else the corpus encoded and cached; several encoders' missing caches filled in one pass."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Sequence

import numpy as np

from cir_demo.index.corpus_encode import encode_corpus, encode_corpus_with, say, say_once
from cir_demo.index.manifest import benchmark_index_name, corpus_checksum, corpus_fingerprint
from cir_demo.index.prebuilt import image_encoder, read_prebuilt


def embedding_cache_path(benchmark, retriever, ids: Sequence[str]) -> Path | None:
    """Where corpus embeddings of `retriever`'s image tower are kept for reuse, or None.

    Keyed by the image spec (`Retriever.image_spec`), the corpus ids and the
    benchmark's content fingerprint, so retrievers that share an image tower (the
    recipes of one CLIP) encode a corpus once, and a changed world never reuses them.
    """
    image_spec = getattr(retriever, "image_spec", None)
    if not image_spec:
        return None
    import hashlib

    from cir_demo.paths import cache_dir
    from cir_demo.retrievers.base import spec_hash

    h = hashlib.sha256()
    h.update(spec_hash(image_spec).encode())
    h.update(corpus_checksum(ids).encode())
    h.update(str(corpus_fingerprint(benchmark)).encode())
    return cache_dir() / "embeddings" / benchmark_index_name(benchmark) / f"{h.hexdigest()[:32]}.npy"


def stored_corpus_embeddings(benchmark, ids: Sequence[str], encoder, decode: bool = True) -> np.ndarray | None:
    """The corpus rows of `encoder`'s image tower when they are stored and intact: the embedding cache
    of the data folder, else the repository's prebuilt ones (`cir_demo.index.prebuilt`); None when
    they would have to be encoded. Says why when a stored file is refused. decode=False: not prebuilt
    rows that are stored compressed (the judge's codes), which take a moment to decode."""
    path = embedding_cache_path(benchmark, encoder, ids)
    if path is not None and path.exists():
        xb, problem = _read_embedding_cache(path, (len(ids), int(encoder.dim)))
        if xb is not None:
            return xb
        say(f"{problem}; encoding the corpus again")
    if not decode:
        tower = image_encoder(encoder)
        if tower is not None and tower.packed:
            return None
    return _prebuilt_rows(benchmark, encoder, ids)


def _prebuilt_rows(benchmark, encoder, ids: Sequence[str]) -> np.ndarray | None:
    """The repository's prebuilt rows of `encoder`'s image tower, or None (saying why when refused).
    Rows decoded from compressed codes are kept in the embedding cache: decoded once per data folder."""
    xb, reasons = read_prebuilt(benchmark, encoder, ids)
    if reasons:
        say_once(
            f"prebuilt corpus embeddings for {encoder.name} not used ({'; '.join(reasons)[:500]}); "
            "encoding the corpus (rebuild them: python -m cir_demo index prebuilt)"
        )
    path = embedding_cache_path(benchmark, encoder, ids)
    if xb is not None and path is not None and image_encoder(encoder).packed:
        try:
            _write_embedding_cache(path, xb)
        except OSError as exc:  # an optimisation: decoded again next time
            say(f"warning: embedding cache {path} not written ({exc.strerror or exc}); continuing without it")
    return xb


def cached_encode_corpus(
    benchmark, ids: Sequence[str], retriever, batch_size: int = 64, progress: bool = True
) -> np.ndarray:
    """`encode_corpus`, reusing embeddings another retriever with the same image tower computed, or
    the prebuilt ones committed with the repository."""
    xb = stored_corpus_embeddings(benchmark, ids, retriever)
    if xb is not None:
        return xb
    path = embedding_cache_path(benchmark, retriever, ids)
    xb = encode_corpus(
        benchmark.images,
        ids,
        retriever,
        batch_size=batch_size,
        progress=progress,
        desc=f"encode {benchmark.name} with {retriever.name}",
    )
    if path is not None:
        try:
            _write_embedding_cache(path, xb)
        except OSError as exc:  # an optimisation: the index is still built
            say(f"warning: embedding cache {path} not written ({exc.strerror or exc}); continuing without it")
    return xb


def prefetch_corpus_embeddings(
    benchmark, ids: Sequence[str], encoders: Sequence, batch_size: int = 64, progress: bool = True
) -> list[str]:
    """Encode the corpus once for every encoder (one per image spec) whose embedding cache is missing or
    damaged, opening each image once, and write their caches; returns the names encoded. Only worth it
    for two or more: a retriever's image tower and a reranker's image features on a first run."""
    from concurrent.futures import ThreadPoolExecutor

    towers: dict = {}  # embedding cache path -> (encoder, what is wrong with the cache there)
    seen: set = set()
    for encoder in encoders:
        path = embedding_cache_path(benchmark, encoder, ids)
        if path is None or path in seen:
            continue
        seen.add(path)
        problem = _read_embedding_cache(path, (len(ids), int(encoder.dim)))[1] if path.exists() else None
        if problem or not path.exists():
            towers[path] = (encoder, problem)
    # the towers' prebuilt files read side by side (decompressing and hashing release the GIL); the prebuilt
    # rows are read again when used
    with ThreadPoolExecutor(max(1, min(2, len(towers)))) as pool:
        prebuilt = list(pool.map(lambda e: _prebuilt_rows(benchmark, e, ids), [e for e, _ in towers.values()]))
    todo = [(e, path, problem) for (path, (e, problem)), rows in zip(towers.items(), prebuilt) if rows is None]
    if len(todo) < 2:
        return []
    for _, _, problem in todo:
        if problem:
            say(f"{problem}; encoding the corpus again")
    outs = encode_corpus_with(
        benchmark.images,
        ids,
        [e for e, _, _ in todo],
        batch_size=batch_size,
        progress=progress,
        desc=f"encode {benchmark.name} for {', '.join(e.name for e, _, _ in todo)}",
    )
    for (encoder, path, _), xb in zip(todo, outs):
        try:
            _write_embedding_cache(path, xb)
        except OSError as exc:
            say(f"warning: embedding cache {path} not written ({exc.strerror or exc}); continuing without it")
    return [e.name for e, _, _ in todo]


def _record_path(path: Path) -> Path:
    return path.with_suffix(".json")


def _write_embedding_cache(path: Path, xb: np.ndarray) -> None:
    """The .npy and, beside it, its record (size, sha256, shape), written after it."""
    from cir_demo.integrity import file_record
    from cir_demo.utils.io import atomic_path, write_json_atomic

    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, xb)
    write_json_atomic(_record_path(path), {**file_record(path), "shape": list(xb.shape)})


def _read_embedding_cache(path: Path, shape: tuple[int, int]) -> tuple[np.ndarray | None, str]:
    """(embeddings, "") when the cache file matches its record and `shape`, else (None, why)."""
    import json

    from cir_demo.integrity import check_record

    try:
        record = json.loads(_record_path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:  # written before records existed: trusted if it loads whole, then recorded
        record = None
    except (OSError, ValueError) as exc:
        return None, f"damaged: {_record_path(path)}: unreadable record ({type(exc).__name__})"
    if record is not None:
        problem = (
            check_record(path, record, verify=True)
            if isinstance(record, dict)
            else f"damaged: {_record_path(path)}: not a JSON object"
        )
        if problem:
            return None, problem
    try:
        xb = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        return None, f"damaged: {path}: unreadable ({exc})"
    if xb.shape != shape or xb.dtype != np.float32:
        return None, f"damaged: {path}: holds {xb.dtype} {xb.shape}, expected float32 {shape}"
    if record is None:
        with contextlib.suppress(OSError):
            from cir_demo.integrity import file_record
            from cir_demo.utils.io import write_json_atomic

            write_json_atomic(_record_path(path), {**file_record(path), "shape": list(xb.shape)})
    return xb, ""
