"""Thumbnail and pixel stores and the warmer process (cir_demo/explorer/images.py)."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
from PIL import Image

from cir_demo.explorer import PixelCachedStore, ThumbnailStore, warm_thumbnails
from cir_demo.explorer.images import _warm_main


def test_thumbnail_store_caches_in_memory_and_on_disk(tmp_path):
    calls = []

    def open_image(image_id):
        calls.append(image_id)
        if image_id == "missing":
            raise FileNotFoundError(image_id)
        return Image.new("RGB", (300, 200), "green")

    db = tmp_path / "thumbs.sqlite"
    store = ThumbnailStore(open_image, db, 64)
    got = store.get_many(["a", "b", "missing", "a"])
    assert got["missing"] is None and calls == ["a", "b", "missing"]
    img = Image.open(io.BytesIO(base64.b64decode(got["a"].split(",", 1)[1])))
    assert img.size == (64, 43)
    assert store.get("a") == got["a"] and len(calls) == 3  # memory hit
    fresh = ThumbnailStore(open_image, db, 64)  # a restart: read from the file
    assert fresh.get_many(["a", "b"]) == {"a": got["a"], "b": got["b"]} and len(calls) == 3
    assert (
        warm_thumbnails(
            type("B", (), {"images": type("S", (), {"open": staticmethod(open_image)})()})(),
            db,
            64,
            image_ids=["a", "c"],
        )
        == 1
    )  # only the missing one is rendered


def test_image_warmer_fills_reference_tile_and_pixel_files(tiny_setup, tmp_path):
    """The warmer's entry point (run in-process here) opens each image once and stores references at
    their size, corpus tiles at theirs and lossless pixels of both, up to `limit` images per job; the
    pixel cache then serves exactly the rendered pixels. The first 24 of the tiny corpus's 874 images
    (rendering and storing them all would cost far more and show nothing more)."""
    import sqlite3

    from cir_demo.benchmarks.registry import load_benchmark

    refs_db, tiles_db, pixels_db = (str(tmp_path / f"{n}.sqlite") for n in ("refs", "tiles", "pixels"))
    png = {"db_path": pixels_db, "kind": "png"}
    payload = {
        "benchmark": "world",
        "kwargs": {"size": "tiny"},
        "limit_groups": 3,
        "limit": 24,
        "nice": False,
        "jobs": [
            {"what": "references", "targets": [{"db_path": refs_db, "kind": "jpeg", "size": 40, "quality": 80}, png]},
            {"what": "corpus", "targets": [{"db_path": tiles_db, "kind": "jpeg", "size": 24, "quality": 80}, png]},
        ],
    }
    _warm_main(json.dumps(payload))
    bench = load_benchmark("world", size="tiny").limit(3)
    refs = {r for q in bench.queries for r in q.reference_ids}

    def stored(path):
        with sqlite3.connect(path) as db:
            return {i: Image.open(io.BytesIO(b)).size for i, b in db.execute("SELECT image_id, data FROM blobs")}

    corpus = list(bench.corpus_ids)[:24]
    assert len(refs) < 24 < len(bench.corpus_ids)  # every reference, the corpus cut at the limit
    assert set(stored(refs_db)) == refs
    tiles = stored(tiles_db)
    assert set(tiles) == set(corpus) and set(tiles.values()) == {(24, 24)}
    assert set(stored(pixels_db)) == refs | set(corpus)
    cached = PixelCachedStore(bench.images, pixels_db)
    for image_id in [corpus[0], corpus[-1], sorted(refs)[0]]:
        assert np.array_equal(np.asarray(cached.open(image_id)), np.asarray(bench.images.open(image_id)))
    assert cached.counts == {"cached": 3, "opened": 0}


def test_a_warmer_whose_app_is_gone_renders_nothing(tiny_setup, tmp_path):
    """The app names itself in the warmer's payload: a warmer that starts after its app stopped (adopted by
    another process) opens no image, where reading its parent at start would let it render the corpus."""
    import os

    tiles = tmp_path / "tiles.sqlite"
    target = {"db_path": str(tiles), "kind": "jpeg", "size": 24, "quality": 80}
    payload = dict(benchmark="world", kwargs={"size": "tiny"}, limit_groups=1, limit=2, nice=False)
    payload["jobs"] = [{"what": "corpus", "targets": [target]}]
    _warm_main(json.dumps({**payload, "parent": os.getppid() + 1_000_000}))  # no such pid: its app is gone
    assert not tiles.exists()
    _warm_main(json.dumps({**payload, "parent": os.getppid()}))  # the same payload, its app alive
    assert tiles.exists()


def test_the_warmer_process_is_reaped_when_done(tiny_setup, tmp_path):
    """A finished warmer leaves no zombie behind for the app's lifetime."""
    import sys
    import time
    from pathlib import Path

    import pytest

    from cir_demo.explorer import ServiceConfig
    from cir_demo.explorer.images import start_image_warmer

    if not sys.platform.startswith("linux"):
        pytest.skip("reads the process state from /proc")
    config = ServiceConfig(benchmark="world", benchmark_kwargs={"size": "tiny"}, limit_groups=1)
    proc = start_image_warmer(
        config,
        [
            {
                "what": "references",
                "targets": [{"db_path": str(tmp_path / "refs.sqlite"), "kind": "jpeg", "size": 24, "quality": 80}],
            }
        ],
        limit=2,
    )
    stat = Path(f"/proc/{proc.pid}/stat")
    deadline = time.monotonic() + 120
    while stat.exists() and time.monotonic() < deadline:  # a zombie keeps its /proc entry until reaped
        time.sleep(0.2)
    assert not stat.exists(), "the finished warmer stayed a zombie"
    assert proc.wait(10) == 0
