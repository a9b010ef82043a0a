"""The run's picture memo (render_memo.py) as threads of one process use it: an API call and another, or
a run's reranker and its first stages, may render the same scene at the same moment. Each must get the
picture, and the memo must end with that one file and no temporary one."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
from PIL import Image
from render_memo import install


def test_two_threads_storing_one_scene_at_once_both_get_its_picture(tmp_path, monkeypatch):
    def render(scene, size=8):
        return Image.fromarray(np.full((size, size, 3), len(scene), np.uint8))

    loader = SimpleNamespace(render_scene=render, RENDER_SIZE=8)
    install(loader, lambda: tmp_path)
    # both threads reach the rename with their picture written before either renames
    both = threading.Barrier(2, timeout=60)
    replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (both.wait(), replace(a, b))[1])
    with ThreadPoolExecutor(2) as pool:  # a failure in either thread is raised by its result()
        got = [f.result() for f in [pool.submit(loader.render_scene, "scene") for _ in range(2)]]
    got = [np.asarray(g) for g in got]
    assert all(np.array_equal(g, np.full((8, 8, 3), 5, np.uint8)) for g in got)
    monkeypatch.setattr(os, "replace", replace)
    files = sorted(p.name for p in (tmp_path / "renders").iterdir())
    assert len(files) == 1 and not files[0].startswith(".")
    assert np.array_equal(np.asarray(loader.render_scene("scene")), got[0])  # read back from that file
