"""The corpus encoder opens a store's images in worker processes when the store offers `open_many`
(the world's renderer): the same images, in the same batches, so the same embeddings bit for bit as
opening them one by one in threads."""

from __future__ import annotations

import numpy as np
import pytest

from cir_demo.index import corpus_encode as build_mod
from cir_demo.index.corpus_encode import encode_corpus, opened_batches
from cir_demo.testing.tiny_index import TinyConvRetriever
from cir_demo.world.loader import load_world, render_image, render_images


@pytest.fixture(scope="module")
def tiny_world():
    return load_world(size="tiny", progress=False)


@pytest.fixture()
def two_cpus(monkeypatch, quiet_machine):
    """Workers even on a one-CPU runner or a busy machine (the code path under test)."""
    monkeypatch.setattr(build_mod, "usable_cpus", lambda: 2)


class ThreadsOnly:
    """The same store without `open_many`: images opened one by one in threads."""

    def __init__(self, store):
        self.store = store

    def open(self, image_id):
        return self.store.open(image_id)


def test_render_images_gives_the_pixels_of_render_image(tiny_world):
    ids = list(tiny_world.corpus_ids[:5]) + [tiny_world.queries[0].reference_ids[0]]
    for image_id, img in zip(ids, tiny_world.images.open_many(ids)):
        assert img.mode == "RGB"
        assert np.array_equal(np.asarray(img), np.asarray(render_image(image_id)))
    assert render_images(tiny_world.info["root"], []) == []


def test_worker_opened_corpus_encodes_to_the_same_bits_as_threads(tiny_world, two_cpus):
    ids = list(tiny_world.corpus_ids[:70])  # batches of 16: the last one short
    assert build_mod._opening_workers(tiny_world.images, 5) == 2
    assert build_mod._opening_workers(ThreadsOnly(tiny_world.images), 5) == 0
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as loader:  # an app's loader thread: never forks beside server threads
        assert loader.submit(build_mod._opening_workers, tiny_world.images, 5).result() == 0
    workers = encode_corpus(tiny_world.images, ids, TinyConvRetriever(), batch_size=16, progress=False)
    threads = encode_corpus(ThreadsOnly(tiny_world.images), ids, TinyConvRetriever(), batch_size=16, progress=False)
    assert workers.shape == (70, 16) and np.array_equal(workers, threads)


def test_batches_come_in_order_and_a_failing_batch_is_named(tiny_world, two_cpus):
    ids = list(tiny_world.corpus_ids[:9])
    got = [
        (start, [np.asarray(im) for im in batch])
        for start, batch in opened_batches(tiny_world.images, ids, 2, "encode test")
    ]
    assert [s for s, _ in got] == [0, 2, 4, 6, 8]
    flat = [im for _, batch in got for im in batch]
    assert all(np.array_equal(a, np.asarray(render_image(i))) for a, i in zip(flat, ids)) and len(flat) == 9

    store = ThreadsOnly(tiny_world.images)
    store.open_many = _fails_on_third
    with pytest.raises(RuntimeError, match=rf"encode test: cannot open corpus images {ids[4]!r}..{ids[5]!r}: no"):
        list(opened_batches(store, ids, 2, "encode test"))


def _fails_on_third(image_ids):
    """Run in a worker: the third batch of two fails."""
    from cir_demo.world.loader import load_world

    if image_ids[0] == list(load_world(size="tiny", progress=False).corpus_ids)[4]:
        raise FileNotFoundError("no such scene")
    return [render_image(i) for i in image_ids]


def test_cpu_encoders_get_one_torch_thread_beside_the_render_workers(tiny_world, two_cpus, monkeypatch):
    """The judge's corpus features with one thread beside the renderers are the bits of the
    straightforward path (every image opened, then encoded with two threads)."""
    import torch

    from cir_demo.rerank import load_reranker

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    judge = load_reranker("world-verifier")
    # three batches of 64, the last one short: two render workers, each batch's threads seen (the whole
    # corpus, 874 images, checks nothing more and costs over 10 CPU s in renders and judge encodings)
    ids = list(tiny_world.corpus_ids)[:160]
    threads_seen = []
    encode = judge.encode_images
    monkeypatch.setattr(
        judge,
        "encode_images",
        lambda images, batch_size=None: threads_seen.append(torch.get_num_threads()) or encode(images, batch_size),
    )
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fast = encode_corpus(tiny_world.images, ids, judge, batch_size=64, progress=False)
        assert threads_seen == [1, 1, 1] and torch.get_num_threads() == 2  # set for the pass, then given back
        assert build_mod._opening_workers(tiny_world.images, 3) == 2  # the pass above opened in workers
        plain = encode([tiny_world.images.open(i) for i in ids], 64)
        assert fast.shape == plain.shape == (160, plain.shape[1]) and np.array_equal(fast, plain)
        cases = [
            (ThreadsOnly(tiny_world.images), "cpu", None),  # no render workers
            (tiny_world.images, "cuda", None),  # not a CPU encoder
            (tiny_world.images, "cpu", "2"),
        ]  # the user's choice
        for images, device, omp in cases:
            threads_seen.clear()
            monkeypatch.setattr(judge, "device", device, raising=False)
            if omp:
                monkeypatch.setenv("OMP_NUM_THREADS", omp)
            # two batches: two render workers where the store offers them (one batch would open none)
            assert build_mod._opening_workers(images, 2) == (0 if isinstance(images, ThreadsOnly) else 2)
            assert np.array_equal(encode_corpus(images, ids[:32], judge, batch_size=16, progress=False), plain[:32])
            assert set(threads_seen) == {2}, (device, omp)
    finally:
        torch.set_num_threads(before)


WORKERS_OF_A_KILLED_PARENT = r"""
import os, sys, time
from cir_demo.index import corpus_encode as build
from cir_demo.utils import beside
build.usable_cpus = beside.usable_cpus = lambda: 2
beside.other_work = lambda: 0.0  # a quiet machine, whatever the suite's load

class Blocking:
    def open_many(self, ids):
        os.write(1, b"%d\n" % os.getpid())  # one write: the two workers' lines never interleave
        time.sleep(600)

for _ in build.opened_batches(Blocking(), ["a", "b", "c", "d"], 1, "test"):
    pass
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_opening_workers_end_with_a_killed_parent():
    """A killed (SIGKILL) index build or eval leaves no worker behind: a worker that outlived it stayed
    blocked and kept the build's lock file open, so the next build waited on it for good."""
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", WORKERS_OF_A_KILLED_PARENT], stdout=subprocess.PIPE, text=True)
    workers = []
    try:
        workers = [int(proc.stdout.readline()) for _ in range(2)]  # both workers inside a batch
        assert all(_alive(p) for p in workers)
        proc.kill()
        proc.wait(60)
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in workers), "a worker outlived its killed parent"
    finally:
        proc.kill()
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
