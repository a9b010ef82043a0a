"""Tiny real models for the explorer and UI tests: a randomly initialised open_clip model
registered under four recipes, a small randomly initialised torch verifier registered as a
reranker backend, and an `ExplorerService` over the tiny world built on them."""

from __future__ import annotations

import hashlib
import weakref
from pathlib import Path

import numpy as np

from cir_demo.explorer import ServiceConfig, build_service
from cir_demo.rerank import LogitPairReranker
from cir_demo.utils.code_hash import code_key

TINY_RECIPES = {"fusion": "early_fusion", "image": "image_only", "text": "text_only", "slerp": "slerp"}
VERIFIER = "tiny-test-verifier"


class TinyVerifier(LogitPairReranker):
    """A real (tiny, randomly initialised) torch model judging (references, instruction, candidate):
    a small CNN over the stacked 32 px images plus a hashed bag of instruction words."""

    @classmethod
    def weights(cls, **kw) -> list:
        return []  # initialised from its seed: nothing to fetch

    def __init__(self, seed: int = 0):
        import torch

        torch.manual_seed(seed)
        self.torch = torch
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(9, 8, 3, stride=2),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 2),
        ).eval()
        self.words = torch.nn.EmbeddingBag(64, 2, mode="mean").eval()
        digest = hashlib.sha256()
        for name, tensor in sorted({**self.net.state_dict(), **self.words.state_dict()}.items()):
            digest.update(name.encode())
            digest.update(tensor.numpy().tobytes())
        self.spec = {
            "backend": VERIFIER,
            "seed": seed,
            "weights_sha256": digest.hexdigest(),
            "code": code_key((__name__,), ("torch", "numpy", "pillow")),
        }

    def _pixels(self, image):
        """The 32 px input of `image`, kept per content: the tests score the same few hundred images
        thousands of times, and the resize is most of a score's CPU. Most of those calls hand over an image
        object scored before (a query's references with each candidate, a list's candidates once per
        paraphrase), so its input is kept per object too while the object lives, and digesting its pixels
        (a third of a score's CPU) is done once per object. Nothing changes an image in place after it is
        loaded (the loaders hand out images that nothing draws on)."""
        by_object = self.__dict__.setdefault("_pixels_by_object", {})
        key = id(image)
        held = by_object.get(key)
        if held is not None and held[0]() is image:
            return held[1]
        pixels = self._pixels_by_content(image)

        def forget(ref, key=key):  # the object is gone: its id may be another's next
            if by_object.get(key, (None,))[0] is ref:
                by_object.pop(key, None)  # another thread may have forgotten it meanwhile

        try:
            by_object[key] = (weakref.ref(image, forget), pixels)
        except TypeError:  # not weakly referenceable: kept per content only
            pass
        return pixels

    def _pixels_by_content(self, image):
        memo = self.__dict__.setdefault("_pixel_memo", {})
        key = _pixels_key(image)
        if key is None or key not in memo:
            arr = np.asarray(image.convert("RGB").resize((32, 32)), dtype=np.float32) / 255.0
            if key is None:
                return self.torch.from_numpy(arr).permute(2, 0, 1)
            if len(memo) >= 4096:  # ~50 MB at most
                memo.clear()
            memo[key] = self.torch.from_numpy(arr).permute(2, 0, 1)
        return memo[key]

    def score_logits(self, request, candidate_images):
        torch = self.torch
        refs = [self._pixels(r) for r in request.reference_images]
        ref = torch.cat([refs[0], refs[-1]])
        x = torch.stack([torch.cat([ref, self._pixels(c)]) for c in candidate_images])
        ids = [int(hashlib.md5(w.encode()).hexdigest(), 16) % 64 for w in request.instruction.lower().split()] or [0]
        with torch.inference_mode():
            text = self.words(torch.tensor([ids]))
            return (self.net(x) + text).double().numpy()


def _pixels_key(image) -> bytes | None:
    """A PIL image's identity by content (mode, size, pixels), None for anything else. SHA-256: OpenSSL
    computes it with the CPU's SHA instructions where they exist (half BLAKE2's CPU on a 160 px image
    here), and every candidate of every score is keyed."""
    if not hasattr(image, "tobytes") or not hasattr(image, "mode"):
        return None
    digest = hashlib.sha256(f"{image.mode}{image.size}".encode())
    digest.update(image.tobytes())
    return digest.digest()


def register_tiny_models(folder: Path) -> list[str]:
    """Register the tiny open_clip model under four recipes and the tiny verifier; returns retriever names."""
    from cir_demo.rerank import register_backend
    from cir_demo.retrievers import registry
    from cir_demo.testing.tiny_retrievers import build_tiny_open_clip, tiny_open_clip_config

    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / "cir-demo-tiny-clip-seed0.safetensors"
    if not weights.is_file():
        weights = build_tiny_open_clip(folder, seed=0)
    names = []
    for suffix, recipe in TINY_RECIPES.items():
        cfg = tiny_open_clip_config(weights, f"tiny-ui-{suffix}", recipe)
        registry.register_config(cfg, replace=True)
        names.append(cfg["name"])
    register_backend(VERIFIER, f"{TinyVerifier.__module__}:TinyVerifier")
    return names


def unregister_tiny_models(names) -> None:
    from cir_demo.rerank import BACKENDS
    from cir_demo.retrievers import registry

    for n in names:
        registry.unregister(n)
    BACKENDS.pop(VERIFIER, None)


def build_tiny_service(names, reranker=VERIFIER, limit_groups=20):
    return build_service(
        ServiceConfig(
            benchmark="world",
            benchmark_kwargs={"size": "tiny"},
            retrievers=tuple(names),
            reranker=reranker,
            warm_thumbnails=False,
            limit_groups=limit_groups,
        )
    )
