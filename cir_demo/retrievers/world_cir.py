"""world-CIR: the offline world's composed-retrieval model (a Combiner over world-CLIP features).

Corpus images are world-CLIP image embeddings (the same vectors as `world-clip-image`, so the
two can share an index); a query is `Combiner(ref1, ref2, text)` with ref2 = ref1 for one-image
queries and <img1>/<img2> rendered as words. Weights: `assets/world-cir/world_cir.safetensors`
(config "pretrained"); the world-CLIP it was trained on is named in the config params and
checked against the sha256 in `assets/world-cir/manifest.json`.

torch and open_clip are imported only inside functions.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from cir_demo.retrievers.base import ComposedQuery, check_embeddings, render_markers, resolve_path
from cir_demo.retrievers.dual_encoder import EncoderRetriever
from cir_demo.utils.code_hash import code_key

FAMILY = "world_cir"
PARAMS = {
    "clip_model": "world-clip",
    "clip_weights": "assets/world-clip/world_clip.safetensors",
    "clip_model_config": "assets/world-clip/model_config.json",
    "batch_size": 64,
    "marker_style": "words",
}


def validate(config: dict, where: str) -> None:
    """Family check (called by the registry): combiner weights must be a .safetensors file."""
    pretrained = config.get("pretrained")
    if not isinstance(pretrained, str) or not pretrained.endswith(".safetensors"):
        raise ValueError(f"{where}: key 'pretrained' must be the world-CIR .safetensors file, got {pretrained!r}")
    for key in ("clip_model", "clip_weights", "clip_model_config"):
        if key in config["params"] and not isinstance(config["params"][key], str):
            raise ValueError(f"{where}: key 'params.{key}' must be a string")


def weights(config: dict) -> list:
    from cir_demo.utils.needs import LocalFile

    return [LocalFile(config["pretrained"], "world-CIR weights")]


class WorldCirRetriever(EncoderRetriever):
    def __init__(
        self,
        name: str,
        encoder,
        combiner,
        spec: dict,
        batch_size: int = 64,
        marker_style: str = "words",
        progress: bool = False,
        image_spec: dict | None = None,
    ):
        self._set_encoder(name, encoder, spec, batch_size, marker_style, progress)
        self._image_spec = image_spec
        self.combiner = combiner

    @property
    def image_spec(self) -> dict | None:
        """The world-CLIP image tower's spec, equal to `world-clip-*`'s, so the corpus is encoded once."""
        return self._image_spec

    def encode_queries(self, queries: Sequence[ComposedQuery], batch_size: int | None = None) -> np.ndarray:
        from cir_demo.models.world_cir import combine_numpy

        queries = list(queries)
        if not queries:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self.encode_references(queries, batch_size)
        first, last, pos = [], [], 0
        for q in queries:
            first.append(pos)
            last.append(pos + len(q.reference_images) - 1)
            pos += len(q.reference_images)
        texts = [render_markers(q.text, self.marker_style) for q in queries]
        txt = self.encode_text_batches(texts, batch_size)
        out = combine_numpy(self.combiner, emb[first], emb[last], txt)
        return check_embeddings(out, len(queries), self.dim, f"{self.name}: queries")


def load(config: dict, device: str, progress: bool = False, **_: Any) -> WorldCirRetriever:
    from safetensors.torch import load_file

    from cir_demo.retrievers import openclip
    from cir_demo.models.world_cir import combiner_from_state
    from cir_demo.utils.io import sha256_file

    name = config["name"]
    where = f"retriever {name!r}"
    params = {**PARAMS, **(config.get("params") or {})}
    weights = resolve_path(config["pretrained"])
    if not weights.is_file():
        raise FileNotFoundError(
            f"{where}: world-CIR weights not found: {weights} (train: python -m cir_demo train world-cir)"
        )
    encoder, clip_spec = openclip.load_encoder(
        params["clip_model"], params["clip_weights"], params["clip_model_config"], device, "fp32", where=where
    )
    digest = sha256_file(weights)
    manifest_path = weights.parent / "manifest.json"
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        trained_on = (manifest.get("clip") or {}).get("weights_sha256")
        if trained_on and trained_on != clip_spec["weights"]["sha256"]:
            raise ValueError(
                f"{manifest_path}: field 'clip.weights_sha256' says world-CIR was trained on other world-CLIP "
                f"weights ({trained_on[:12]}...) than {params['clip_weights']} "
                f"({clip_spec['weights']['sha256'][:12]}...): retrain world-CIR"
            )
        if manifest.get("files", {}).get(weights.name) not in (None, digest):
            raise ValueError(f"{manifest_path}: field 'files.{weights.name}' does not match {weights}")
    combiner = combiner_from_state(load_file(str(weights)))
    spec = {
        "name": name,
        "family": FAMILY,
        "weights": {"path": config["pretrained"], "sha256": digest},
        "combiner": {"dim": combiner.dim, "hidden": combiner.hidden},
        "clip": {k: clip_spec[k] for k in ("model", "weights", "model_config", "preprocess", "dim") if k in clip_spec},
        "reference_merge": "combiner(ref1, ref2 = ref1 for one image, text)",
        "marker_style": params["marker_style"],
        "versions": openclip.library_versions(),
        "code": code_key((__name__,), ("torch", "numpy", "pillow", "open_clip")),
    }
    return WorldCirRetriever(
        name,
        encoder,
        combiner,
        spec,
        batch_size=params["batch_size"],
        marker_style=params["marker_style"],
        progress=progress,
        image_spec={"family": openclip.FAMILY, **clip_spec},
    )
