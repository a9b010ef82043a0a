"""A tiny REAL retriever and benchmark for the index tests (tests/test_index_*.py).

The model is a seeded, randomly initialised conv net (two convolutions, ReLU,
mean pooling, L2 normalisation): real torch inference, deterministic, fast on
CPU. Images are drawn procedurally from their id, so every id has its own image.
"""

from __future__ import annotations

import hashlib

import numpy as np
from PIL import Image

from cir_demo.benchmarks.schema import Benchmark, CallableImageStore, Judgments, Query
from cir_demo.retrievers.base import Retriever

IMAGE_SIZE = 24


def render_image(image_id: str) -> Image.Image:
    """A deterministic RGB image for `image_id`: a random background and two coloured boxes."""
    seed = int.from_bytes(hashlib.sha256(image_id.encode()).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    arr = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    arr[:] = rng.integers(0, 256, 3)
    for _ in range(2):
        y, x = rng.integers(0, IMAGE_SIZE - 6, 2)
        h, w = rng.integers(3, 8, 2)
        arr[y : y + h, x : x + w] = rng.integers(0, 256, 3)
    return Image.fromarray(arr, "RGB")


class TinyConvRetriever(Retriever):
    """Seeded random conv net -> mean pooling -> unit vectors. Counts the images it encodes."""

    def __init__(self, dim: int = 16, seed: int = 0, name: str = "tiny-conv", fail_after: int | None = None):
        import torch

        self.name, self.dim, self.device = name, dim, "cpu"
        self.spec = {
            "family": "test-tiny-conv",
            "dim": dim,
            "seed": seed,
            "image_size": IMAGE_SIZE,
            "weights_sha256": f"seed-{seed}",
            "versions": {"torch": torch.__version__},
        }
        gen = torch.Generator().manual_seed(seed)
        self.w1 = torch.randn(8, 3, 3, 3, generator=gen) * 0.5
        self.w2 = torch.randn(dim, 8, 3, 3, generator=gen) * 0.5
        self.images_encoded = 0
        self.fail_after = fail_after  # raise once this many images were encoded (interrupted builds)

    def encode_images(self, images, batch_size=None) -> np.ndarray:
        import torch
        import torch.nn.functional as F

        if self.fail_after is not None and self.images_encoded + len(images) > self.fail_after:
            raise RuntimeError("simulated failure in the middle of encoding")
        if not len(images):
            return np.zeros((0, self.dim), dtype=np.float32)
        x = (
            torch.from_numpy(
                np.stack([np.asarray(im.resize((IMAGE_SIZE, IMAGE_SIZE)), dtype=np.float32) for im in images])
            ).permute(0, 3, 1, 2)
            / 255.0
            - 0.5
        )
        with torch.no_grad():
            h = F.relu(F.conv2d(x, self.w1, stride=2))
            h = F.conv2d(h, self.w2, stride=2).mean(dim=(2, 3))
            h = F.normalize(h, dim=1)
        self.images_encoded += len(images)
        return h.numpy().astype(np.float32)

    def encode_queries(self, queries, batch_size=None) -> np.ndarray:
        # Image-only composition (mean of reference embeddings): enough for index tests.
        out = []
        for q in queries:
            e = self.encode_images(list(q.reference_images)).mean(axis=0)
            out.append(e / np.linalg.norm(e))
        return np.asarray(out, dtype=np.float32).reshape(len(queries), self.dim)


def tiny_benchmark(n: int = 50, name: str = "tinybench", prefix: str = "img") -> Benchmark:
    ids = [f"{prefix}{i:04d}" for i in range(n)]
    queries = [
        Query(
            query_id=f"q{i}",
            reference_ids=(ids[i],),
            instruction="make it red",
            group_id=f"g{i}",
            judgments=Judgments(positives=(ids[(i + 1) % n],)),
        )
        for i in range(min(3, n))
    ]
    return Benchmark(
        name=name,
        metric_family="pinpoint",
        queries=queries,
        corpus_ids=ids,
        images=CallableImageStore(render_image, prefix="tiny"),
    )


# --------------------------------------------------------------------------- tests of the helpers
