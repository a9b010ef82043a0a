"""Shared pieces of the adapters that run a model repository's own code
(BGE-VL / MMRet, GME): the explicit opt-in, clear errors when that code does not
run under this project's transformers, and the per-reference composition."""

from __future__ import annotations

import io
from typing import Any, Callable, Sequence

import numpy as np

from cir_demo.retrievers import recipes
from cir_demo.retrievers.base import ComposedQuery, Retriever, batches, check_embeddings, render_markers
from cir_demo.utils.code_hash import code_key


def require_opt_in(config: dict, trust_remote_code: bool) -> None:
    if not trust_remote_code:
        raise PermissionError(
            f"retriever {config['name']!r} runs code downloaded from {config.get('model')}; "
            f"pass trust_remote_code=True (CLI: --trust-remote-code) to allow it"
        )


def remote_code_failure(config: dict, stage: str, exc: BaseException) -> RuntimeError:
    """A clear error for a failure inside the repository's code, naming the transformers pin."""
    import transformers

    pin = config.get("transformers_pin") or {}
    want = pin.get("tested") or pin.get("spec") or "the version on its model card"
    if isinstance(exc, OSError) and stage == "loading":  # download / cache problem, not the code
        return RuntimeError(
            f"retriever {config['name']!r}: could not fetch {config.get('model')} from the Hugging Face Hub "
            f"or the local cache ({type(exc).__name__}: {exc}). Check the network (or HF_HUB_OFFLINE) and the "
            f"model id; note that its code is documented for transformers {want}."
        )
    return RuntimeError(
        f"retriever {config['name']!r}: the remote code of {config.get('model')} failed while {stage} "
        f"({type(exc).__name__}: {exc}). Its model card documents transformers {want}; this project "
        f"runs transformers {transformers.__version__}, whose internals that code may not match. Run it in a "
        f"separate environment (pip install 'transformers=={want.lstrip('=<>~!')}') and load the rankings here "
        f"as a 'precomputed' retriever; see docs/retrievers.md."
    )


def as_file(img) -> io.BytesIO:
    """A PIL image as an in-memory PNG file: the repositories' code opens paths with
    PIL.Image.open, which accepts file objects too."""
    buf = io.BytesIO()
    (img if img.mode == "RGB" else img.convert("RGB")).save(buf, format="PNG")
    buf.seek(0)
    return buf


def to_numpy(emb: Any) -> np.ndarray:
    import torch

    if isinstance(emb, torch.Tensor):
        emb = torch.nn.functional.normalize(emb.detach().float(), dim=-1).cpu().numpy()
    return np.asarray(emb, dtype=np.float32)


class NativeComposedRetriever(Retriever):
    """A model that embeds (image, text) pairs itself. Two-reference queries: the
    normalised mean of the composed embeddings of (reference i, text) -- the paper's
    mean pooling for methods without native multi-image composition."""

    def __init__(
        self,
        name: str,
        spec: dict,
        device: str,
        dim: int,
        batch_size: int,
        marker_style: str,
        encode_image_batch: Callable[[Sequence], np.ndarray],
        encode_pair_batch: Callable[[Sequence, Sequence[str]], np.ndarray],
        progress: bool = False,
    ):
        self.name, self.spec, self.device, self.dim = name, spec, device, dim
        self.batch_size, self.marker_style, self.progress = batch_size, marker_style, progress
        self._encode_image_batch, self._encode_pair_batch = encode_image_batch, encode_pair_batch

    def _run(
        self, items: Sequence, fn: Callable[[Sequence], np.ndarray], batch_size: int | None, what: str
    ) -> np.ndarray:
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        chunks = batches(items, batch_size or self.batch_size)
        if self.progress:
            from tqdm.auto import tqdm

            chunks = tqdm(chunks, desc=f"{self.name}: {what}", unit="batch")
        import torch

        with torch.inference_mode():
            out = np.concatenate([fn(chunk) for chunk in chunks], axis=0)
        return check_embeddings(out, len(items), self.dim, f"{self.name}: {what}")

    def encode_images(self, images, batch_size: int | None = None) -> np.ndarray:
        return self._run(list(images), self._encode_image_batch, batch_size, "images")

    def encode_queries(self, queries: Sequence[ComposedQuery], batch_size: int | None = None) -> np.ndarray:
        pairs = [(img, render_markers(q.text, self.marker_style)) for q in queries for img in q.reference_images]
        emb = self._run(
            pairs,
            lambda chunk: self._encode_pair_batch([p[0] for p in chunk], [p[1] for p in chunk]),
            batch_size,
            "queries",
        )
        out, pos = [], 0
        for q in queries:
            k = len(q.reference_images)
            out.append(recipes.mean_of_references(list(emb[pos : pos + k])))
            pos += k
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        return check_embeddings(np.stack(out), len(queries), self.dim, f"{self.name}: queries")


def guarded(config: dict, fn: Callable, stage: str) -> Callable:
    """`fn` with any failure inside the repository's code reported by `remote_code_failure` (`stage`: what
    it was doing)."""

    def run(*args):
        try:
            return fn(*args)
        except Exception as exc:
            raise remote_code_failure(config, stage, exc) from exc

    return run


def native_retriever(
    config: dict,
    family: str,
    p: dict,
    precision: str,
    device: str,
    encode_images: Callable,
    encode_pairs: Callable,
    progress: bool,
    composition: str,
    **model_spec,
) -> NativeComposedRetriever:
    """The NativeComposedRetriever of a repository's encoders (`p`: the config's params over the family's
    defaults): the embedding size read off one grey 64 px image; `model_spec` goes into the spec beside the
    model id."""
    import torch
    import transformers
    from PIL import Image

    with torch.inference_mode():
        dim = int(encode_images([Image.new("RGB", (64, 64), (128, 128, 128))]).shape[1])
    spec = {
        "name": config["name"],
        "family": family,
        "model": config["model"],
        **model_spec,
        "weights": {"hub": config["model"]},
        "composition": composition,
        "reference_merge": "mean_of_composed_embeddings",
        "marker_style": p["marker_style"],
        "precision": precision,
        "dim": dim,
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        "code": code_key((__name__,), ("torch", "numpy", "pillow", "transformers")),
    }
    return NativeComposedRetriever(
        config["name"],
        spec,
        device,
        dim,
        int(p["batch_size"]),
        p["marker_style"],
        encode_images,
        encode_pairs,
        progress,
    )
