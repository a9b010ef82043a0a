"""Training-free ways to turn image and text embeddings into one query vector.

All functions are pure, NumPy in / NumPy out, and work on a single vector
(shape (d,)) or a batch of rows (shape (n, d)). Outputs are float32 with unit
rows. The recipes are the PinPoint paper's CLIP baselines: image only, text
only, early fusion (normalised weighted sum) and SLERP, plus mean pooling of
two reference images for methods without native multi-image composition.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

# Rows whose norm falls below this cannot be normalised meaningfully.
_ZERO_NORM = 1e-12
# Below this angle (radians) SLERP's sin(omega) division is unstable; the
# normalised linear interpolation agrees with SLERP to O(omega^2) there.
_SLERP_LINEAR_BELOW = 1e-4


def l2_normalize(x: np.ndarray, what: str = "embedding") -> np.ndarray:
    """Unit-length rows (float32); a zero or non-finite row is an error naming its index."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim not in (1, 2):
        raise ValueError(f"{what}: expected shape (d,) or (n, d), got {arr.shape}")
    norms = np.linalg.norm(arr, axis=-1, keepdims=True)
    bad = ~np.isfinite(norms[..., 0]) | (norms[..., 0] < _ZERO_NORM)
    if np.any(bad):
        rows = np.flatnonzero(np.atleast_1d(bad))[:5].tolist()
        raise ValueError(f"{what}: cannot L2-normalise zero or non-finite rows {rows}")
    return (arr / norms).astype(np.float32)


def _pair(img_emb: np.ndarray, txt_emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = l2_normalize(img_emb, "image embedding").astype(np.float64)
    b = l2_normalize(txt_emb, "text embedding").astype(np.float64)
    if a.shape != b.shape:
        raise ValueError(f"image embedding shape {a.shape} != text embedding shape {b.shape}")
    return a, b


def image_only(img_emb: np.ndarray) -> np.ndarray:
    """The (normalised) reference image embedding; the text is ignored."""
    return l2_normalize(img_emb, "image embedding")


def text_only(txt_emb: np.ndarray) -> np.ndarray:
    """The (normalised) text embedding; the reference image is ignored."""
    return l2_normalize(txt_emb, "text embedding")


def early_fusion(img_emb: np.ndarray, txt_emb: np.ndarray, text_weight: float = 0.8) -> np.ndarray:
    """normalise((1 - w) * img/|img| + w * txt/|txt|), w = `text_weight` (PinPoint default 0.8)."""
    if not 0.0 <= text_weight <= 1.0:
        raise ValueError(f"text_weight must be in [0, 1], got {text_weight}")
    a, b = _pair(img_emb, txt_emb)
    return l2_normalize((1.0 - text_weight) * a + text_weight * b, "early fusion (image and text cancel out)")


def slerp(img_emb: np.ndarray, txt_emb: np.ndarray, t: float) -> np.ndarray:
    """Spherical interpolation between the normalised embeddings: t=0 -> image, t=1 -> text.

    Near-parallel pairs fall back to normalised linear interpolation (the
    limit of SLERP); exactly opposite pairs have no unique great circle and
    are an error.
    """
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"slerp t must be in [0, 1], got {t}")
    a, b = _pair(img_emb, txt_emb)
    cos = np.clip(np.sum(a * b, axis=-1, keepdims=True), -1.0, 1.0)
    omega = np.arccos(cos)
    if np.any(np.pi - omega < _SLERP_LINEAR_BELOW):
        raise ValueError("slerp: image and text embeddings are opposite; the interpolation path is undefined")
    sin_omega = np.sin(omega)
    linear = omega < _SLERP_LINEAR_BELOW
    safe_sin = np.where(linear, 1.0, sin_omega)
    wa = np.where(linear, 1.0 - t, np.sin((1.0 - t) * omega) / safe_sin)
    wb = np.where(linear, t, np.sin(t * omega) / safe_sin)
    return l2_normalize(wa * a + wb * b, "slerp")


def mean_of_references(img_embs: Sequence[np.ndarray]) -> np.ndarray:
    """normalise(mean_i img_i/|img_i|): the paper's two-reference baseline."""
    if len(img_embs) == 0:
        raise ValueError("mean_of_references: needs at least one reference embedding")
    normed = [l2_normalize(e, f"reference embedding {i}").astype(np.float64) for i, e in enumerate(img_embs)]
    shapes = {e.shape for e in normed}
    if len(shapes) != 1:
        raise ValueError(f"mean_of_references: reference embeddings differ in shape: {sorted(shapes)}")
    return l2_normalize(np.mean(normed, axis=0), "mean of references (references cancel out)")


def mean_of_texts(txt_embs: np.ndarray) -> np.ndarray:
    """Pre-merge of text variants: (n, v, d) -> (n, d), normalise each, average, renormalise."""
    arr = np.asarray(txt_embs)
    if arr.ndim != 3:
        raise ValueError(f"mean_of_texts: expected shape (n, variants, d), got {arr.shape}")
    return mean_of_references([arr[:, j] for j in range(arr.shape[1])])


def postmerge_max(
    variant_rankings: Sequence[tuple[Sequence[str], Sequence[float]]], k: int
) -> tuple[list[str], list[float]]:
    """Post-merge of per-variant rankings: an image's score is its best score over variants.

    Exact with respect to a full-corpus max-merge when each variant list is
    that variant's own top-k: an image in the merged top-k is in the top-k of
    the variant that gives it its best score. Ties keep first-seen order.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    best: dict[str, float] = {}
    for v, (ids, scores) in enumerate(variant_rankings):
        if len(ids) != len(scores):
            raise ValueError(f"postmerge_max: variant {v} has {len(ids)} ids but {len(scores)} scores")
        for image_id, score in zip(ids, scores):
            s = float(score)
            if image_id not in best or s > best[image_id]:
                best[image_id] = s
    order = sorted(best.items(), key=lambda kv: -kv[1])[:k]  # stable: ties keep first-seen order
    return [i for i, _ in order], [s for _, s in order]


def postmerge_scores(variant_scores: np.ndarray, how: str = "max") -> np.ndarray:
    """(n, v, m) per-variant scores -> (n, m) merged scores (max, or mean)."""
    arr = np.asarray(variant_scores, dtype=np.float32)
    if arr.ndim != 3:
        raise ValueError(f"postmerge_scores: expected shape (n, variants, m), got {arr.shape}")
    if how == "max":
        return arr.max(axis=1)
    if how == "mean":
        return arr.mean(axis=1)
    raise ValueError(f"postmerge_scores: how must be 'max' or 'mean', got {how!r}")


# --------------------------------------------------------------------------- recipe table
# name -> (needs image, needs text, allowed params with defaults)
RECIPES: dict[str, tuple[bool, bool, dict[str, float]]] = {
    "image_only": (True, False, {}),
    "text_only": (False, True, {}),
    "early_fusion": (True, True, {"text_weight": 0.8}),
    "slerp": (True, True, {"t": 0.8}),
}


def recipe_params(recipe: str, params: dict | None, where: str = "recipe") -> dict[str, float]:
    """Defaults merged with `params`; unknown recipe or parameter is an error naming `where`."""
    from cir_demo.utils.names import lookup

    _, _, defaults = lookup("recipe", recipe, RECIPES)
    params = dict(params or {})
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(
            f"{where}: recipe {recipe!r} takes parameters {sorted(defaults) or 'none'}, got unknown {unknown}"
        )
    out = dict(defaults)
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: recipe parameter {key!r} must be a number, got {value!r}")
        out[key] = float(value)
    return out


def combine(recipe: str, params: dict, img_emb: np.ndarray | None, txt_emb: np.ndarray | None) -> np.ndarray:
    """Apply a named recipe to (already reference-merged) image and text embeddings."""
    if recipe == "image_only":
        return image_only(img_emb)
    if recipe == "text_only":
        return text_only(txt_emb)
    if recipe == "early_fusion":
        return early_fusion(img_emb, txt_emb, text_weight=params["text_weight"])
    if recipe == "slerp":
        return slerp(img_emb, txt_emb, t=params["t"])
    raise ValueError(f"unknown recipe {recipe!r}; known: {sorted(RECIPES)}")


def recipe_needs(recipe: str) -> tuple[bool, bool]:
    """(needs image embedding, needs text embedding)."""
    from cir_demo.utils.names import lookup

    needs_image, needs_text, _ = lookup("recipe", recipe, RECIPES)
    return needs_image, needs_text
