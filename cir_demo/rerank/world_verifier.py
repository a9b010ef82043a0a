"""The world verifier backend: a small cross-encoder trained by this project on the offline world.

`load_reranker("world-verifier")` loads `assets/world-verifier/world_verifier.safetensors`, the
world-CLIP it was trained on (named in the asset manifest, sha256 checked) and scores each
candidate as (logit_yes, logit_no); P(relevant) = sigmoid(logit_yes - logit_no). It uses no text
prompt; `spec["description"]` (and `prompt_text`) says what it reads instead. Fast on a CPU
(see bench/bench_world_models.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cir_demo.rerank.base import LogitPairReranker, RerankRequest

DEFAULT_WEIGHTS = "assets/world-verifier/world_verifier.safetensors"


class WorldVerifierReranker(LogitPairReranker):
    backend = "world-verifier"

    def __init__(self, weights: str | Path = DEFAULT_WEIGHTS, device: str = "cpu", batch_size: int = 64,
                 marker_style: str = "words"):
        from safetensors import safe_open
        from safetensors.torch import load_file

        from cir_demo.retrievers import openclip
        from cir_demo.retrievers.base import resolve_path
        from cir_demo.training.world_verifier import DESCRIPTION, verifier_from_state
        from cir_demo.utils.io import sha256_file

        path = resolve_path(weights)
        if not path.is_file():
            raise FileNotFoundError(f"world verifier: weights not found: {path} "
                                    f"(train: python -m cir_demo train world-verifier)")
        manifest_path = path.parent / "manifest.json"
        if not manifest_path.is_file():
            raise FileNotFoundError(f"world verifier: {path} needs its manifest at {manifest_path}")
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        digest = sha256_file(path)
        if manifest.get("files", {}).get(path.name) != digest:
            raise ValueError(f"{manifest_path}: field 'files.{path.name}' does not match the sha256 of {path}")
        clip = manifest.get("clip") or {}
        for key in ("path", "weights_sha256", "model_name"):
            if key not in clip:
                raise ValueError(f"{manifest_path}: missing field 'clip.{key}'")
        clip_dir = resolve_path(clip["path"])
        self.encoder, clip_spec = openclip.load_encoder(
            clip["model_name"], str(clip_dir / "world_clip.safetensors"), str(clip_dir / "model_config.json"),
            device, "fp32", where="world verifier")
        if clip_spec["weights"]["sha256"] != clip["weights_sha256"]:
            raise ValueError(f"{manifest_path}: field 'clip.weights_sha256' does not match {clip_dir}: "
                             f"the verifier was trained on other world-CLIP weights; retrain it")
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        layers, heads = int(meta.get("layers", 3)), int(meta.get("heads", 4))
        self.model = verifier_from_state(load_file(str(path)), layers, heads)
        self.batch_size = int(batch_size)
        self.marker_style = marker_style
        self.description = DESCRIPTION
        self.spec = {
            "backend": self.backend,
            "model": "world-verifier",
            "weights": {"path": str(weights), "sha256": digest},
            "clip_weights_sha256": clip_spec["weights"]["sha256"],
            "architecture": {"width": self.model.width, "layers": layers, "heads": heads, "dim": self.model.dim},
            "score": "sigmoid(logit_yes - logit_no) from the [CLS] token's two logits",
            "description": DESCRIPTION,  # no "prompt": this backend reads no text prompt
            "marker_style": marker_style,
            "image_preprocess": clip_spec["preprocess"],
        }

    def prompt_text(self, request: RerankRequest) -> str:
        return self.description

    def features(self, request: RerankRequest, candidate_images: Sequence[Any]):
        """Frozen world-CLIP embeddings: (ref1, ref2, text) each (1, d), candidates (n, d)."""
        from cir_demo.retrievers.base import render_markers
        from cir_demo.retrievers.dual_encoder import encode_in_batches

        images = list(request.reference_images) + list(candidate_images)
        emb = encode_in_batches(images, self.encoder.encode_image_batch, self.batch_size, self.encoder.dim,
                                "world verifier: images")
        n_ref = len(request.reference_images)
        text = self.encoder.encode_text_batch([render_markers(request.instruction, self.marker_style)])
        return emb[:1], emb[n_ref - 1:n_ref], text, emb[n_ref:]

    def logits_from_features(self, ref1: np.ndarray, ref2: np.ndarray, text: np.ndarray, cands: np.ndarray) -> np.ndarray:
        import torch

        n = len(cands)
        rep = lambda a: torch.from_numpy(np.repeat(np.asarray(a, np.float32), n, axis=0))  # noqa: E731
        with torch.inference_mode():
            logits = self.model(rep(ref1), rep(ref2), rep(text), torch.from_numpy(np.asarray(cands, np.float32)))
        return logits.numpy().astype(np.float64)

    def score_logits(self, request: RerankRequest, candidate_images: Sequence[Any]) -> np.ndarray:
        if not candidate_images:
            return np.zeros((0, 2))
        return self.logits_from_features(*self.features(request, candidate_images))
