"""The world's renderer as the loader calls it (`render_scene(scene, size)`: the corpus opened for an
encode, thumbnails, a reranker's candidates, training pixels), its pictures kept for the whole test run
in a folder of the run: the tests encode the tiny world's corpus in a dozen fresh data folders and
processes (forked workers that open the images included), and rendering is most of an encode's CPU.
A picture is a function of the scene (every field of the frozen `Scene` is in its repr), the size and
the renderer's code and libraries (`pixels_fingerprint`'s code key, computed from the code the
process runs), which name its file; reading it back gives the same RGB pixels. Installed by
conftest.py in the test processes, and by test_cache_keys.py's clone runs in theirs (the clone's
renderer code is keyed by its own text)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable


def install(loader, folder: Callable[[], Path | None]) -> None:
    """Wrap `loader.render_scene` (cir_demo.world.loader of the running code); `folder()` gives the
    folder of the pictures, or None where the test renders every time."""
    import numpy as np
    from PIL import Image

    from cir_demo.utils.io import atomic_path

    plain = loader.render_scene
    code: list[str] = []

    def render_scene(scene, size=loader.RENDER_SIZE):
        memo = folder()
        if memo is None:
            return plain(scene, size)
        if not code:
            from cir_demo.utils.code_hash import code_key

            code.append(code_key(("cir_demo.world.render",), ("numpy", "pillow")))
        name = hashlib.sha256(f"{code[0]}\0{int(size)}\0{scene!r}".encode()).hexdigest()[:32]
        path = Path(memo) / "renders" / f"{name}.npy"
        try:
            return Image.fromarray(np.load(path, allow_pickle=False))
        except (OSError, ValueError):  # not rendered yet in this run (or being written)
            image = plain(scene, size)
            # a temporary name of its own, renamed: a reader never sees half a file, and two threads of a
            # process rendering the same scene at once (two API calls) never take each other's file
            with atomic_path(path) as part, open(part, "wb") as f:
                np.save(f, np.asarray(image))
            return image

    loader.render_scene = render_scene
