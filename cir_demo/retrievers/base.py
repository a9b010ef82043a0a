"""The retriever interface every model adapter implements.

A `Retriever` maps corpus images and composed queries (one or two reference
images plus a modification text) into one L2-normalised space, so the score of
an image for a query is a dot product. A `RankingOnlyRetriever` has no encoder:
it answers `rank(query_id, k)` from rankings computed elsewhere.

Both carry `spec`, a JSON-serialisable description (family, model, weights,
recipe and params, preprocessing, library versions) that goes into every index
manifest and results file; `spec_hash()` identifies it.

This module imports no heavy library; `default_device` imports torch lazily.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from cir_demo.utils import specs

if TYPE_CHECKING:  # PIL is light, but keep the import surface minimal
    import PIL.Image

# Spec keys left out of `spec_hash`: they describe the environment, not the
# embedding function (a library patch release must not orphan every index).
SPEC_HASH_EXCLUDED_KEYS = ("versions",)


@dataclass(frozen=True)
class ComposedQuery:
    """One composed query: 1 or 2 reference images plus a modification text."""

    reference_images: tuple["PIL.Image.Image", ...]
    text: str
    query_id: str | None = None
    reference_ids: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "reference_images", tuple(self.reference_images))
        object.__setattr__(self, "reference_ids", tuple(self.reference_ids))
        where = f"query {self.query_id!r}" if self.query_id is not None else "query"
        if not 1 <= len(self.reference_images) <= 2:
            raise ValueError(f"{where}: needs 1 or 2 reference images, got {len(self.reference_images)}")
        if self.reference_ids and len(self.reference_ids) != len(self.reference_images):
            raise ValueError(
                f"{where}: {len(self.reference_ids)} reference_ids for {len(self.reference_images)} reference images"
            )
        if not isinstance(self.text, str):
            raise TypeError(f"{where}: text must be a str, got {type(self.text).__name__}")


def canonical_spec_json(spec: dict, exclude: Sequence[str] = SPEC_HASH_EXCLUDED_KEYS) -> str:
    """The spec as canonical JSON (sorted keys, no whitespace), top-level `exclude` keys dropped."""
    return specs.canonical_spec_json(spec, exclude)


def spec_hash(spec: dict, exclude: Sequence[str] = SPEC_HASH_EXCLUDED_KEYS) -> str:
    """sha256 (hex) of the canonical JSON spec; library versions are excluded by default."""
    return specs.spec_hash(spec, exclude)


class Retriever(abc.ABC):
    """Encodes corpus images and composed queries into one L2-normalised space.

    Subclasses set `name`, `spec`, `dim`, `device` and implement the two
    encoders; both return float32 arrays of shape (n, dim) with unit rows.
    `progress` turns on tqdm bars for long encodes.
    """

    name: str
    spec: dict
    dim: int
    device: str
    progress: bool = False
    # Vectors per query. 1 for every retriever except post-merge ones (the
    # text proxy's "postmerge"), which rank once per variant and merge the
    # rankings by max score (`recipes.postmerge_max`); for those
    # `encode_queries` raises and `encode_query_variants` is the way in.
    query_variants: int = 1

    @abc.abstractmethod
    def encode_images(self, images: Sequence["PIL.Image.Image"], batch_size: int | None = None) -> np.ndarray:
        """(n, dim) float32, L2-normalised rows."""

    @abc.abstractmethod
    def encode_queries(self, queries: Sequence[ComposedQuery], batch_size: int | None = None) -> np.ndarray:
        """(n, dim) float32, L2-normalised rows."""

    def encode_query_variants(self, queries: Sequence[ComposedQuery], batch_size: int | None = None) -> np.ndarray:
        """(n, query_variants, dim) float32, unit rows; one variant unless `query_variants` > 1."""
        return self.encode_queries(queries, batch_size)[:, None, :]

    def spec_hash(self) -> str:
        return spec_hash(self.spec)

    @property
    def image_spec(self) -> dict | None:
        """What determines `encode_images` alone, or None when unknown.

        Retrievers that share an image tower (the recipes of one CLIP, a combiner
        over its features) return the same dict, so their corpus embeddings are
        computed once (`cir_demo.index.embedding_cache`); None means never share.
        """
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim}, device={self.device!r})"


class RankingOnlyRetriever(abc.ABC):
    """A retriever without an encoder: rankings were computed elsewhere.

    `rank` returns (image ids best first, scores aligned with them); files that
    carry no scores get descending rank-based scores (see the implementation).
    """

    name: str
    spec: dict

    @abc.abstractmethod
    def rank(self, query_id: str, k: int) -> tuple[list[str], list[float]]:
        """The top `k` image ids for `query_id` and their scores, best first."""

    @abc.abstractmethod
    def query_ids(self) -> list[str]:
        """Query ids this retriever can answer, in file order."""

    def spec_hash(self) -> str:
        return spec_hash(self.spec)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def is_ranking_only(retriever: Any) -> bool:
    """True for retrievers that can only `rank`, not encode."""
    return isinstance(retriever, RankingOnlyRetriever)


def resolve_path(path: str | Path) -> Path:
    """Config paths: relative ones are relative to the repository root (where assets/ lives)."""
    from cir_demo.paths import REPO_ROOT

    p = Path(path).expanduser()
    return p if p.is_absolute() else REPO_ROOT / p


def default_device() -> str:
    """ "cuda" when torch sees a GPU, else "cpu" (torch imported only here)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# --------------------------------------------------------------------------- helpers for adapters
def batches(items: Sequence, batch_size: int) -> Iterator[Sequence]:
    """Consecutive slices of at most `batch_size` items."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for start in range(0, len(items), batch_size):
        yield items[start : start + batch_size]


def check_embeddings(emb: np.ndarray, n: int, dim: int, what: str, atol: float = 1e-3) -> np.ndarray:
    """Validate an encoder's output: shape (n, dim), finite, unit rows; returns it as float32."""
    emb = np.asarray(emb, dtype=np.float32)
    if emb.shape != (n, dim):
        raise ValueError(f"{what}: expected embeddings of shape ({n}, {dim}), got {emb.shape}")
    if not np.isfinite(emb).all():
        raise ValueError(f"{what}: embeddings contain NaN or inf")
    if n and not np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=atol):
        raise ValueError(f"{what}: embeddings are not L2-normalised")
    return emb


# --------------------------------------------------------------------------- image markers
# PinPoint two-image instructions name their images with <img1>/<img2>. A text
# encoder has never seen those tokens, so by default they become plain words.
_MARKER_WORDS = {"1": "the first image", "2": "the second image"}
MARKER_STYLES = ("words", "strip", "keep")


def render_markers(text: str, style: str = "words") -> str:
    """Rewrite <img1>/<img2> markers for a text encoder.

    "words": "the first image" / "the second image" (default);
    "strip": drop them; "keep": leave the text unchanged (for models or
    prompts that are told what the markers mean). Whitespace is collapsed.
    """
    import re

    if style == "keep":
        return text
    if style not in MARKER_STYLES:
        raise ValueError(f"marker_style must be one of {MARKER_STYLES}, got {style!r}")
    pattern = re.compile(r"<\s*img\s*([12])\s*>", re.IGNORECASE)
    if style == "words":
        out = pattern.sub(lambda m: _MARKER_WORDS[m.group(1)], text)
    else:
        out = pattern.sub(" ", text)
    return re.sub(r"\s+", " ", out).strip()
