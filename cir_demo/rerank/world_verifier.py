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
        from cir_demo.training.world_verifier import DESCRIPTION, DESCRIPTION_POOLED_ONLY, verifier_from_state
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
            # the manifest's (repo-relative) path, so the spec equals the world-CLIP retrievers'
            clip["model_name"], f"{clip['path']}/world_clip.safetensors", f"{clip['path']}/model_config.json",
            device, "fp32", where="world verifier")
        if clip_spec["weights"]["sha256"] != clip["weights_sha256"]:
            raise ValueError(f"{manifest_path}: field 'clip.weights_sha256' does not match {clip_dir}: "
                             f"the verifier was trained on other world-CLIP weights; retrain it")
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        layers, heads = int(meta.get("layers", 3)), int(meta.get("heads", 4))
        text_layers = int(meta.get("text_layers", 1))
        self.model = verifier_from_state(load_file(str(path)), layers, heads, text_layers)
        self.reads_tokens = bool(self.model.vocab_size)
        self.name = "world-verifier"
        self.dim = int(self.encoder.dim)
        self.image_spec = {"family": openclip.FAMILY, **clip_spec}  # equal to world-CLIP retrievers' image spec
        self._known: dict[str, np.ndarray] = {}  # image id -> world-CLIP embedding, for ids fixed by their id
        self._remember: frozenset[str] = frozenset()
        self._texts: dict[str, np.ndarray] = {}
        self.batch_size = int(batch_size)
        self.marker_style = marker_style
        self.description = DESCRIPTION if self.reads_tokens else DESCRIPTION_POOLED_ONLY
        self.spec = {
            "backend": self.backend,
            "model": "world-verifier",
            "weights": {"path": str(weights), "sha256": digest},
            "clip_weights_sha256": clip_spec["weights"]["sha256"],
            "architecture": {"width": self.model.width, "layers": layers, "heads": heads, "dim": self.model.dim,
                             "instruction_reader": ({"text_layers": text_layers, "vocab_size": self.model.vocab_size}
                                                    if self.reads_tokens else None)},
            "score": "sigmoid(logit_yes - logit_no) from the [CLS] token's two logits",
            "description": self.description,  # no "prompt": this backend reads no text prompt
            "marker_style": marker_style,
            "image_preprocess": clip_spec["preprocess"],
        }

    def prompt_text(self, request: RerankRequest) -> str:
        return self.description

    # -- precomputed image embeddings
    def encode_images(self, images: Sequence[Any], batch_size: int | None = None) -> np.ndarray:
        """world-CLIP image embeddings (n, dim), as the world-CLIP retrievers compute them."""
        from cir_demo.retrievers.dual_encoder import encode_in_batches

        return encode_in_batches(list(images), self.encoder.encode_image_batch, batch_size or self.batch_size,
                                 self.dim, "world verifier: images")

    def use_image_embeddings(self, ids: Sequence[str], embeddings: np.ndarray, remember_ids: Sequence[str] = ()) -> None:
        """Serve these images' embeddings from `embeddings` (rows in `ids` order; e.g. a benchmark's
        corpus, encoded once and shared with the world-CLIP indexes) instead of encoding them for
        every query. Images in `remember_ids` (e.g. the benchmark's reference images) are encoded
        on first use and kept. Only ids whose image is fixed by the id belong here: never uploads."""
        embeddings = np.asarray(embeddings, np.float32)
        if embeddings.shape != (len(ids), self.dim):
            raise ValueError(f"world verifier: embeddings of shape {embeddings.shape} for {len(ids)} ids of dim {self.dim}")
        self._known.update(zip(map(str, ids), embeddings))
        self._remember = frozenset(map(str, remember_ids))

    def needs_image(self, image_id: str) -> bool:
        return str(image_id) not in self._known

    def _image_embeddings(self, ids: Sequence[str | None], images: Sequence[Any]) -> np.ndarray:
        """Embeddings of images given by id and/or pixels: known ids from the table, the rest
        encoded in one batch (and kept when their id is in the remember set)."""
        out = np.zeros((len(images), self.dim), np.float32)
        todo = []
        for i, (image_id, image) in enumerate(zip(ids, images)):
            known = self._known.get(image_id) if image_id is not None else None
            if known is not None:
                out[i] = known
            elif image is None:
                raise ValueError(f"world verifier: no image and no precomputed embedding for {image_id!r}")
            else:
                todo.append(i)
        if todo:
            emb = self.encode_images([images[i] for i in todo])
            out[todo] = emb
            for i, e in zip(todo, emb):
                if ids[i] in self._remember:
                    self._known[ids[i]] = e
        return out

    def _instruction_tokens(self, instructions: Sequence[str]):
        """world-CLIP token ids (q, L) of the instructions, markers rendered as for the text embedding,
        or None for a verifier that reads only the pooled text embedding."""
        from cir_demo.retrievers.base import render_markers

        if not self.reads_tokens:
            return None
        return self.encoder.tokenizer([render_markers(t, self.marker_style) for t in instructions]).cpu()

    def _text_embeddings(self, instructions: Sequence[str]) -> np.ndarray:
        from cir_demo.retrievers.base import render_markers

        rendered = [render_markers(t, self.marker_style) for t in instructions]
        missing = list(dict.fromkeys(t for t in rendered if t not in self._texts))
        for start in range(0, len(missing), self.batch_size):
            part = missing[start:start + self.batch_size]
            self._texts.update(zip(part, self.encoder.encode_text_batch(part)))
        if len(self._texts) > 50_000:  # a long-running app: keep memory bounded
            self._texts = {t: self._texts[t] for t in rendered}
        return np.stack([self._texts[t] for t in rendered]) if rendered else np.zeros((0, self.dim), np.float32)

    def features(self, request: RerankRequest, candidate_images: Sequence[Any], candidate_ids: Sequence[str] | None = None):
        """Frozen world-CLIP embeddings: (ref1, ref2, text) each (1, d), candidates (n, d), and the
        instruction's token ids (1, L) (None for a verifier without an instruction reader)."""
        n_ref = len(request.reference_images)
        ids = list(request.reference_ids) + list(candidate_ids if candidate_ids is not None else [None] * len(candidate_images))
        emb = self._image_embeddings(ids, list(request.reference_images) + list(candidate_images))
        text = self._text_embeddings([request.instruction])
        return emb[:1], emb[n_ref - 1:n_ref], text, emb[n_ref:], self._instruction_tokens([request.instruction])

    def logits_from_features(self, ref1: np.ndarray, ref2: np.ndarray, text: np.ndarray, cands: np.ndarray,
                             tokens=None) -> np.ndarray:
        import torch

        n = len(cands)
        rep = lambda a: torch.from_numpy(np.repeat(np.asarray(a, np.float32), n, axis=0))  # noqa: E731
        with torch.inference_mode():
            instruction = self.model.encode_instruction(tokens).repeat_interleave(n, 0) if tokens is not None else None
            logits = self.model(rep(ref1), rep(ref2), rep(text), torch.from_numpy(np.asarray(cands, np.float32)),
                                instruction)
        return logits.numpy().astype(np.float64)

    def score_logits(self, request: RerankRequest, candidate_images: Sequence[Any]) -> np.ndarray:
        if not candidate_images:
            return np.zeros((0, 2))
        return self.logits_from_features(*self.features(request, candidate_images))

    def score(self, request: RerankRequest, candidate_ids: Sequence[str], candidate_images: Sequence[Any]):
        return self.score_batch([(request, candidate_ids, candidate_images)])[0]

    def score_batch(self, items):
        """All candidates of all queries in one forward pass (rows are independent)."""
        import torch

        from cir_demo.rerank.base import scores_from_logits

        items = [(request, list(ids), list(images)) for request, ids, images in items]
        for _, ids, images in items:
            self._check_lengths(ids, images)
        ids_all: list[str | None] = []
        images_all: list[Any] = []
        ref_rows, counts = [], []
        for request, ids, images in items:
            start = len(ids_all)
            ids_all += list(request.reference_ids) + ids
            images_all += list(request.reference_images) + images
            ref_rows.append((start, start + len(request.reference_ids) - 1))
            counts.append(len(ids))
        emb = self._image_embeddings(ids_all, images_all)
        instructions = [request.instruction for request, _, _ in items]
        text = self._text_embeddings(instructions)
        tokens = self._instruction_tokens(instructions)
        rows = [(q, start + len(items[q][0].reference_ids) + j) for q, (start, _) in enumerate(ref_rows)
                for j in range(counts[q])]
        if not rows:
            return [[] for _ in items]
        query_of = np.array([q for q, _ in rows])
        first = np.array([ref_rows[q][0] for q in query_of])
        last = np.array([ref_rows[q][1] for q in query_of])
        cand = np.array([r for _, r in rows])
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.float32))  # noqa: E731
        with torch.inference_mode():
            instruction = None
            if tokens is not None:  # read once per query, then one row per candidate
                instruction = self.model.encode_instruction(tokens)[torch.from_numpy(query_of)]
            logits = self.model(t(emb[first]), t(emb[last]), t(text[query_of]), t(emb[cand]),
                                instruction).numpy().astype(np.float64)
        out, pos = [], 0
        for (_, ids, _), n in zip(items, counts):
            out.append(scores_from_logits(ids, logits[pos:pos + n]) if n else [])
            pos += n
        return out
