"""The tests' tiny verifier (`cir_demo.testing.explorer.TinyVerifier`) keeps each image's input per
object and per content: its scores against a fresh verifier's (the same seed, nothing kept) for the same
objects, for copies, and for new images that may take a freed image's place in memory."""

from __future__ import annotations

import gc

import numpy as np
from PIL import Image

from cir_demo.rerank import RerankRequest
from cir_demo.testing.explorer import TinyVerifier


def _image(red: int, green: int = 0) -> Image.Image:
    pixels = np.zeros((48, 48, 3), np.uint8)
    pixels[:, :24] = (red, green, 90)
    pixels[8:20, 30:44] = (255 - red, 40, green)
    return Image.fromarray(pixels)


def _fresh(request, candidates) -> np.ndarray:
    return TinyVerifier(seed=0).score_logits(request, candidates)


def test_kept_inputs_score_as_a_fresh_verifier_for_objects_copies_and_reused_places():
    verifier = TinyVerifier(seed=0)
    reference = _image(200)
    request = RerankRequest((reference,), ("ref",), "the same but with <img1> in blue")
    candidates = [_image(r, g) for r, g in ((10, 0), (120, 60), (250, 250))]
    expected = _fresh(request, candidates)
    np.testing.assert_array_equal(verifier.score_logits(request, candidates), expected)
    np.testing.assert_array_equal(verifier.score_logits(request, candidates), expected)  # the same objects
    copies = [c.copy() for c in candidates]
    np.testing.assert_array_equal(verifier.score_logits(request, copies), expected)  # the same contents
    places = set()
    # each freed at once (no cycles: its count drops to 0), so the next is often made where it was
    for step in range(40):
        image = _image(5 * step, 255 - 5 * step)
        places.add(id(image))
        np.testing.assert_array_equal(verifier.score_logits(request, [image]), _fresh(request, [image]))
        del image
    assert len(places) < 40, "no image took a freed one's place: this test shows nothing"
    gc.collect()
    assert len(verifier._pixels_by_object) <= len(candidates) + len(copies) + 1  # what lives, not what was
