"""A dual encoder (image tower + text tower) composed with a training-free recipe.

The CLIP-family adapters (open_clip, transformers CLIP/SigLIP) only implement
`DualEncoder` (two batch functions); `DualEncoderRetriever` adds batching,
progress bars, two-reference merging, <img1>/<img2> handling and the recipe.
"""

from __future__ import annotations

import abc
import threading
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from cir_demo.utils.lru import LRU

from cir_demo.retrievers import recipes
from cir_demo.retrievers.base import ComposedQuery, Retriever, batches, check_embeddings, render_markers, spec_hash


class TextMemo:
    """Text embeddings of recent texts, shared by every recipe of one encoder (fusion, slerp and
    text-only embed the same instruction with the same tower). Keyed by the encoder's identity (its
    image spec: model, weights, precision) and the text; bounded, oldest dropped first."""

    def __init__(self, capacity: int = 20_000):
        self.capacity = capacity
        self._rows: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, encoder_key: str, texts: list[str], encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        with self._lock:
            found = {t: self._rows[(encoder_key, t)] for t in dict.fromkeys(texts) if (encoder_key, t) in self._rows}
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            fresh = encode(missing)
            with self._lock:
                for t, row in zip(missing, fresh):
                    self._rows[(encoder_key, t)] = row
                    found[t] = row
                while len(self._rows) > self.capacity:
                    self._rows.popitem(last=False)
        return np.stack([found[t] for t in texts])


TEXT_MEMO = TextMemo()


def _pixels_digest(image: Any) -> bytes | None:
    """A PIL image's identity by content (mode, size, pixels); None for anything else."""
    import hashlib

    if not hasattr(image, "tobytes") or not hasattr(image, "mode"):
        return None
    h = hashlib.blake2b(f"{image.mode}{image.size}".encode(), digest_size=16)
    h.update(image.tobytes())
    return h.digest()


def reference_batch_key(tower: str, batch_size: int, images: Sequence[Any]) -> tuple | None:
    """`REFERENCE_MEMO`'s key of one call's reference images: the image tower, the batch size, each image's
    pixels and which entries are the very same object (`encode_in_batches` encodes those once), so that
    equal keys mean the very same batches; None when an image is not a PIL image."""
    of_object: dict[int, bytes | None] = {}  # the paraphrases of one intent share their image objects
    digests = [
        of_object[id(img)] if id(img) in of_object else of_object.setdefault(id(img), _pixels_digest(img))
        for img in images
    ]
    if any(d is None for d in digests):
        return None
    first: dict[int, int] = {}
    return (tower, batch_size, tuple(digests), tuple(first.setdefault(id(img), len(first)) for img in images))


# Embeddings of recent query batches (reference images, query texts), shared by every retriever of one
# encoder: the world-CLIP recipes and world-CIR encode the same references and texts in the same batches in
# an eval run. Whole batches, never rows: on a CPU a row's last bits depend on the rows batched with it, so
# only a repeat of the very same batches may reuse them (outputs stay byte-identical).
REFERENCE_MEMO = LRU(256)


def _through_memo(key: tuple | None, encode: Callable[[], np.ndarray]) -> np.ndarray:
    emb = REFERENCE_MEMO.get(key) if key is not None else None
    if emb is None:
        emb = encode()
        if key is not None:
            emb.setflags(write=False)  # shared with the next retriever of this encoder
            REFERENCE_MEMO.put(key, emb)
    return emb


class DualEncoder(abc.ABC):
    """Two batch encoders into one space; both return (n, dim) float32 unit rows."""

    dim: int
    device: str

    @abc.abstractmethod
    def encode_image_batch(self, images: Sequence[Any]) -> np.ndarray: ...

    @abc.abstractmethod
    def encode_text_batch(self, texts: Sequence[str]) -> np.ndarray: ...


def encode_in_batches(
    items: Sequence[Any],
    encode_batch: Callable[[Sequence[Any]], np.ndarray],
    batch_size: int,
    dim: int,
    what: str,
    progress: bool = False,
) -> np.ndarray:
    """Concatenate `encode_batch` over consecutive batches (tqdm bar when `progress`).

    Repeats are encoded once: equal strings, and the very same image object (paraphrases of
    one intent share their reference images, which the engine hands out from one cache).
    """
    if len(items) == 0:
        return np.zeros((0, dim), dtype=np.float32)
    keys = [item if isinstance(item, str) else id(item) for item in items]
    first: dict[Any, int] = {}
    rows = [first.setdefault(key, len(first)) for key in keys]
    if len(first) < len(items):
        unique = list({key: item for key, item in zip(keys, items)}.values())
        out = encode_in_batches(unique, encode_batch, batch_size, dim, what, progress)
        return out[np.asarray(rows)]
    chunks = batches(items, batch_size)
    if progress:
        from tqdm.auto import tqdm

        chunks = tqdm(chunks, total=-(-len(items) // batch_size), desc=what, unit="batch")
    out = np.concatenate([np.asarray(encode_batch(chunk), dtype=np.float32) for chunk in chunks], axis=0)
    return check_embeddings(out, len(items), dim, what)


# Spec keys that only shape the query side of a dual encoder.
QUERY_ONLY_SPEC_KEYS = ("name", "description", "recipe", "params", "reference_merge", "marker_style", "versions")


class EncoderRetriever(Retriever):
    """A retriever whose corpus side is an encoder's image tower: the attributes and `encode_images` it shares
    with every such retriever (a dual encoder with a recipe, a combiner over one)."""

    def _set_encoder(self, name: str, encoder, spec: dict, batch_size: int, marker_style: str, progress: bool):
        self.name = name
        self.encoder = encoder
        self.spec = spec
        self.dim = int(encoder.dim)
        self.device = encoder.device
        self.batch_size = int(batch_size)
        self.marker_style = marker_style
        self.progress = progress

    def encode_images(self, images: Sequence[Any], batch_size: int | None = None) -> np.ndarray:
        return encode_in_batches(
            list(images),
            self.encoder.encode_image_batch,
            batch_size or self.batch_size,
            self.dim,
            f"{self.name}: images",
            self.progress,
        )

    @property
    def _tower_key(self) -> str | None:
        """The encoder's identity for `REFERENCE_MEMO` (None: unknown, nothing shared)."""
        tower = self.image_spec
        return f"{spec_hash(tower)}@{self.device}" if tower else None

    def encode_references(self, queries: Sequence[ComposedQuery], batch_size: int | None = None) -> np.ndarray:
        """(total references, dim): the queries' reference images in order, `encode_images` through
        `REFERENCE_MEMO` (another retriever of this encoder may have encoded these very batches)."""
        flat = [img for q in queries for img in q.reference_images]
        tower = self._tower_key
        key = reference_batch_key(tower, batch_size or self.batch_size, flat) if tower else None
        return _through_memo(key, lambda: self.encode_images(flat, batch_size))

    def encode_text_batches(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """(n, dim): `encode_in_batches` of the text tower (each text once) through `REFERENCE_MEMO`."""
        unique = list(dict.fromkeys(texts))
        bs = batch_size or self.batch_size
        key = ("texts", self._tower_key, bs, tuple(unique)) if self._tower_key else None
        rows = _through_memo(
            key,
            lambda: encode_in_batches(
                unique, self.encoder.encode_text_batch, bs, self.dim, f"{self.name}: texts", self.progress
            ),
        )
        row_of = {t: i for i, t in enumerate(unique)}
        return rows[[row_of[t] for t in texts]] if len(unique) < len(texts) else rows


class DualEncoderRetriever(EncoderRetriever):
    """Retriever = dual encoder + recipe (image_only, text_only, early_fusion, slerp).

    Two reference images are merged as normalise(mean of their normalised
    embeddings) before the recipe; <img1>/<img2> markers in the text are
    rendered with `marker_style` (see `base.render_markers`).
    """

    def __init__(
        self,
        name: str,
        encoder: DualEncoder,
        recipe: str,
        recipe_params: dict[str, float],
        spec: dict,
        batch_size: int = 32,
        marker_style: str = "words",
        progress: bool = False,
    ):
        self._set_encoder(name, encoder, spec, batch_size, marker_style, progress)
        self.recipe = recipe
        self.recipe_params = dict(recipe_params)
        self.needs_image, self.needs_text = recipes.recipe_needs(recipe)

    # -- corpus side
    @property
    def image_spec(self) -> dict:
        """The image tower alone: every recipe of one encoder shares corpus embeddings."""
        return {k: v for k, v in self.spec.items() if k not in QUERY_ONLY_SPEC_KEYS}

    def encode_texts(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """Plain text embeddings (texts used as given, no marker rendering); recent ones from `TEXT_MEMO`."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)

        return TEXT_MEMO.encode(self._encoder_key, texts, lambda missing: self.encode_text_batches(missing, batch_size))

    @property
    def _encoder_key(self) -> str:
        key = getattr(self, "_encoder_key_cache", None)
        if key is None:
            key = self._encoder_key_cache = spec_hash(self.image_spec)
        return key

    # -- query side
    def reference_embeddings(self, queries: Sequence[ComposedQuery], batch_size: int | None = None) -> np.ndarray:
        """(n, dim): each query's reference image, or the normalised mean of its two."""
        emb = self.encode_references(queries, batch_size)
        out, pos = [], 0
        for q in queries:
            k = len(q.reference_images)
            out.append(recipes.mean_of_references(list(emb[pos : pos + k])))
            pos += k
        return np.stack(out) if out else np.zeros((0, self.dim), dtype=np.float32)

    def query_texts(self, queries: Sequence[ComposedQuery]) -> list[str]:
        return [render_markers(q.text, self.marker_style) for q in queries]

    def encode_queries(self, queries: Sequence[ComposedQuery], batch_size: int | None = None) -> np.ndarray:
        queries = list(queries)
        if not queries:
            return np.zeros((0, self.dim), dtype=np.float32)
        img = self.reference_embeddings(queries, batch_size) if self.needs_image else None
        txt = self.encode_texts(self.query_texts(queries), batch_size) if self.needs_text else None
        out = recipes.combine(self.recipe, self.recipe_params, img, txt)
        return check_embeddings(out, len(queries), self.dim, f"{self.name}: queries")


def torch_precision(precision: str, device: str) -> str:
    """fp16 only on CUDA (CPU half matmuls are slow and lossy); else fp32."""
    if precision not in ("fp32", "fp16"):
        raise ValueError(f"precision must be 'fp32' or 'fp16', got {precision!r}")
    return "fp16" if precision == "fp16" and str(device).startswith("cuda") else "fp32"


def features_tensor(output: Any, what: str):
    """The embedding tensor from a `get_*_features` return value.

    transformers 5 returns a `BaseModelOutputWithPooling` whose
    `pooler_output` holds the projected embedding; older versions return
    the tensor itself. Both are accepted.
    """
    import torch

    if isinstance(output, torch.Tensor):
        return output
    for field in ("pooler_output", "image_embeds", "text_embeds"):
        value = getattr(output, field, None)
        if isinstance(value, torch.Tensor):
            return value
    raise TypeError(f"{what}: cannot find an embedding tensor in a {type(output).__name__} output")


def retriever_from_config(
    config: dict,
    family: str,
    param_defaults: dict,
    load_encoder: Callable,
    library_versions: Callable[[], dict],
    progress: bool = False,
) -> DualEncoderRetriever:
    """The DualEncoderRetriever a validated registry config describes: the family's own options
    (`param_defaults`) come out of `params`, the rest are the recipe's (checked before any weights load);
    `load_encoder(options, where)` returns the encoder and its spec."""
    name = config["name"]
    params = dict(config.get("params") or {})
    options = {k: params.pop(k, default) for k, default in param_defaults.items()}
    where = f"retriever {name!r}"
    rparams = recipes.recipe_params(config["recipe"], params, where=where)
    encoder, enc_spec = load_encoder(options, where)
    spec = {
        "name": name,
        "family": family,
        **enc_spec,
        "recipe": config["recipe"],
        "params": rparams,
        "reference_merge": "mean_of_references",
        "marker_style": options["marker_style"],
        "versions": library_versions(),
    }
    return DualEncoderRetriever(
        name,
        encoder,
        config["recipe"],
        rparams,
        spec,
        batch_size=options["batch_size"],
        marker_style=options["marker_style"],
        progress=progress,
    )
