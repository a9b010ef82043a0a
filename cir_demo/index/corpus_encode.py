"""Encoding a benchmark's corpus with image encoders: the corpus ids checked, the images opened (in
worker processes or threads) while the batch before is encoded, one pass for several encoders, and the
one line said for work the user did not ask for (a rebuild, a re-encode)."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from cir_demo.utils.beside import spare_core, usable_cpus  # usable_cpus: its callers import it from here


def require_encoder(retriever) -> None:
    """TypeError unless `retriever` can encode images (ranking-only retrievers have no index)."""
    missing = [a for a in ("name", "spec", "dim", "encode_images", "spec_hash") if not hasattr(retriever, a)]
    if missing:
        raise TypeError(
            f"{type(retriever).__name__} cannot build an index (a ranking-only retriever?): "
            f"it lacks {', '.join(missing)}"
        )


def corpus_ids_of(benchmark) -> list[str]:
    """The corpus ids to encode; ValueError when there is no image store or an id repeats."""
    ids = list(benchmark.corpus_ids)
    if benchmark.images is None:
        raise ValueError(f"benchmark {benchmark.name!r} has no image store: its corpus cannot be encoded")
    seen: set[str] = set()
    for pos, image_id in enumerate(ids):
        if image_id in seen:
            raise ValueError(f"benchmark {benchmark.name!r}: corpus id {image_id!r} appears twice (position {pos})")
        seen.add(image_id)
    return ids


def _open_one(images, image_id: str, what: str):
    try:
        return images.open(image_id)
    except Exception as exc:
        raise RuntimeError(f"{what}: cannot open corpus image {image_id!r}: {exc}") from exc


def encode_corpus(
    images,
    ids: Sequence[str],
    retriever,
    batch_size: int = 64,
    progress: bool = True,
    desc: str | None = None,
    position: int | None = None,
    loader_threads: int = 2,
) -> np.ndarray:
    """(len(ids), dim) float32 unit rows: `retriever.encode_images` over `images.open(id)` in batches.

    `loader_threads` threads open (decode, render) the next batch's images while
    the current batch is encoded; image decoding and the world's renderer
    release the GIL for much of their work.
    """
    return encode_corpus_with(images, ids, [retriever], batch_size, progress, desc, position, loader_threads)[0]


def encode_corpus_with(
    images,
    ids: Sequence[str],
    encoders: Sequence,
    batch_size: int = 64,
    progress: bool = True,
    desc: str | None = None,
    position: int | None = None,
    loader_threads: int = 2,
) -> list[np.ndarray]:
    """`encode_corpus` for several image encoders in one pass: each image is opened (rendered) once."""
    from tqdm.auto import tqdm

    from cir_demo.retrievers.base import check_embeddings
    from cir_demo.utils.oom import OomBackoff

    for encoder in encoders:
        require_encoder(encoder)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if isinstance(loader_threads, bool) or not isinstance(loader_threads, int) or loader_threads < 1:
        raise ValueError(f"loader_threads must be a positive integer, got {loader_threads!r}")
    ids = list(ids)
    outs = [np.empty((len(ids), int(e.dim)), dtype=np.float32) for e in encoders]
    what = desc or f"encode with {', '.join(e.name for e in encoders)}"
    backoffs = [OomBackoff(batch_size, what) for _ in encoders]  # out of GPU memory: half the batch, then say
    workers = _opening_workers(images, -(-len(ids) // batch_size))
    with (
        tqdm(total=len(ids), unit="img", desc=what, disable=not progress, position=position) as bar,
        one_thread_beside_workers(workers, encoders),
    ):
        for start, batch in opened_batches(images, ids, batch_size, what, loader_threads):
            batch_ids = ids[start : start + batch_size]
            for encoder, out, backoff in zip(encoders, outs, backoffs):
                emb = backoff(batch, lambda chunk, bs, e=encoder: e.encode_images(chunk, batch_size=bs))
                out[start : start + len(batch_ids)] = check_embeddings(
                    emb,
                    len(batch_ids),
                    int(encoder.dim),
                    f"retriever {encoder.name!r} on images {batch_ids[0]!r}..{batch_ids[-1]!r}",
                )
            bar.update(len(batch_ids))
    return outs


def opened_batches(images, ids: Sequence[str], batch_size: int, what: str, loader_threads: int = 2):
    """(start, images) of each batch of `ids`, in order, opened while the ones before are used: in
    worker processes, one batch each, when the store can open a batch there (`open_many`: the world's
    renderer holds the GIL for most of its work) and there are two CPUs or more; otherwise the next
    batch in `loader_threads` threads."""
    from collections import deque

    starts = list(range(0, len(ids), batch_size))
    workers = _opening_workers(images, len(starts))
    if workers > 1:
        import multiprocessing
        import os
        from concurrent.futures import ProcessPoolExecutor

        from cir_demo.utils.procs import end_with_parent

        pool = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("fork"),
            initializer=end_with_parent,
            initargs=(os.getpid(),),
        )
        submit = lambda s: [pool.submit(images.open_many, ids[s : s + batch_size])]  # noqa: E731
        ahead = workers + 1  # after taking one: every worker busy while the main process encodes it
    else:
        pool = ThreadPoolExecutor(max_workers=loader_threads)
        submit = lambda s: [pool.submit(_open_one, images, i, what) for i in ids[s : s + batch_size]]  # noqa: E731
        ahead = 2  # after taking one: the next one opening while this one is encoded
    pending: deque = deque()
    with pool:
        try:
            for n, start in enumerate(starts):
                while len(pending) < ahead and n + len(pending) < len(starts):
                    pending.append(submit(starts[n + len(pending)]))
                futures = pending.popleft()
                yield (
                    start,
                    (
                        _batch_result(futures[0], ids[start : start + batch_size], what)
                        if workers > 1
                        else [f.result() for f in futures]
                    ),
                )
        finally:
            for f in (f for futures in pending for f in futures):  # a failure must not wait for them
                f.cancel()


@contextlib.contextmanager
def one_thread_beside_workers(workers: int, encoders: Sequence):
    """One torch thread for CPU encoders while `workers` render processes keep every core busy (unless
    OMP_NUM_THREADS says otherwise): a second thread there only spins for a core the renderers need
    (the world judge's corpus features took 2.8 times the CPU with two threads as with one, on a busy
    2-core machine). The features are the same bits either way (tests/test_corpus_workers.py)."""
    import os
    import sys

    on_cpu = all(str(getattr(e, "device", "cpu") or "cpu").startswith("cpu") for e in encoders)
    uses_torch = "torch" in sys.modules  # an encoder that uses torch has imported it
    if workers < max(2, usable_cpus()) or not on_cpu or not uses_torch or "OMP_NUM_THREADS" in os.environ:
        yield
        return
    from cir_demo.utils.threads import torch_threads

    with torch_threads(1):
        yield


def _batch_result(future, batch_ids: Sequence[str], what: str) -> list:
    try:
        return future.result()
    except Exception as exc:
        raise RuntimeError(f"{what}: cannot open corpus images {batch_ids[0]!r}..{batch_ids[-1]!r}: {exc}") from exc


def _opening_workers(images, n_batches: int) -> int:
    """Worker processes that `opened_batches` opens `n_batches` batches in (0 or 1: none)."""
    import multiprocessing
    import threading

    # fork (Linux): a spawned worker would import the caller's main script again, which a script
    # without a __main__ guard does not survive; the workers only render (no torch, no threads).
    # Only from the main thread (`--eval`, scripts): an app's loader thread runs beside server threads
    # whose locks a forked child could inherit held, so it opens in threads instead.
    if (
        getattr(images, "open_many", None) is None
        or "fork" not in multiprocessing.get_all_start_methods()
        or threading.current_thread() is not threading.main_thread()
        or not spare_core()  # other work fills the machine: a worker only takes turns with it
    ):
        return 0
    return min(usable_cpus(), n_batches)


def say(message: str) -> None:
    """One line on stderr for work the user did not ask for (a rebuild, a re-encode)."""
    import sys

    print(message, file=sys.stderr, flush=True)


_SAID: set[str] = set()


def say_once(message: str) -> None:
    """`say`, once per process (a refused file is looked at by every retriever that shares it)."""
    if message not in _SAID:
        _SAID.add(message)
        say(message)
