"""The world verifier backend: the world judge (`cir_demo/models/world_judge.py`), trained by this project.

`load_reranker("world-verifier")` loads `assets/world-verifier/` (weights, tokenizer, manifest; sha256
checked) and answers "does this candidate satisfy the instruction applied to the reference image(s)?"
from the pixels of the references and the candidate and the words of the instruction, as
(logit_yes, logit_no); P(yes) = sigmoid(logit_yes - logit_no), calibrated on held-out train intents.
It reads no text prompt; `spec["description"]` (and `prompt_text`) says what it reads instead.
A judge with a near-miss answer also gives P(near miss) per candidate, and reranking orders by
P(yes) - penalty * P(near) - w * first-stage rank (both chosen on the train split's two validation
splits, from the manifest's `ranking`): a near miss is the costliest wrong answer, as PinPoint's
NegRecall counts it, and a first stage that ranks well keeps part of its order.

Costs: an image's features (the CNN, pooled patch tokens) are computed once and kept (a benchmark's
corpus comes from the shared embedding cache, `image_spec`); a query's probes (references + words)
once per query; each candidate costs two small cross-attention blocks.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cir_demo.rerank.base import LogitPairReranker, RerankRequest
from cir_demo.utils.code_hash import code_key
from cir_demo.utils.lru import LRU

DEFAULT_WEIGHTS = "assets/world-verifier/world_judge.safetensors"
TOKENIZER_FILE = "tokenizer/tokenizer.json"
MANIFEST_FORMAT = "cir_demo.world_model/1"
DESCRIPTION = (
    "world judge: no text prompt; reads the pixels of the reference image(s) and the candidate "
    "(a small CNN's 4x4 patch tokens at 64 px) and the instruction's words (<img1>/<img2> rendered "
    "as words); learned probes read the words and the reference patches jointly, then cross-attend "
    "to the candidate's patches, ending in (logit_yes, logit_no), calibrated"
)
JUDGE_LIBRARIES = ("torch", "numpy", "safetensors", "tokenizers", "pillow")
FEATURE_LIBRARIES = ("torch", "numpy", "pillow")
# queries whose probes are kept: every query of an eval's two world splits (7,644), which it reranks
# once per retriever, so each query's probes are encoded once (6 x 96 floats each)
_PROBE_MEMO = 16384
_PROBE_BATCHES = 512  # batches of queries whose probes are kept: an eval's pass over the world is 174


def ranking_text(penalty: float, rank_weight: float) -> str:
    """The served reranking key in words (rank: the candidate's 0-based first-stage rank)."""
    key = "P(yes)" + (f" - {penalty:g} * P(near miss)" if penalty else "")
    return key + (f" - {rank_weight:g} * first-stage rank" if rank_weight else "")


def read_judge_manifest(weights: Path) -> tuple[dict, str]:
    """The judge's manifest, checked against its weights and tokenizer files: (manifest, weights sha256)."""
    from cir_demo.integrity import check_record

    if not weights.is_file():
        raise FileNotFoundError(
            f"world verifier: weights not found: {weights} "
            f"(restore: git checkout {weights.parent}; or train: python -m cir_demo train world-verifier)"
        )
    manifest_path = weights.parent / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"world verifier: {weights} needs its manifest at {manifest_path}")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    files = manifest.get("files") or {}
    for name in (weights.name, TOKENIZER_FILE):
        if name not in files:
            raise ValueError(f"{manifest_path}: missing field 'files.{name}'")
        problem = check_record(weights.parent / name, files[name], verify=True)
        if problem:
            raise ValueError(
                f"world verifier: {problem}; restore it: git checkout {weights.parent} "
                f"(or retrain: python -m cir_demo train world-verifier)"
            )
    if "architecture" not in manifest:
        raise ValueError(f"{manifest_path}: missing field 'architecture'")
    record = files[weights.name]
    return manifest, record if isinstance(record, str) else record["sha256"]


class WorldVerifierReranker(LogitPairReranker):
    backend = "world-verifier"
    # rows of a batch depend only on that batch (the probes memo is locked; the corpus keys/values are
    # built once under the lock) and on no torch thread count (tests/test_eval_threads.py)
    parallel_batches = True

    @classmethod
    def weights(cls, **kw) -> list:
        from cir_demo.utils.needs import LocalFile

        return [LocalFile(str(kw.get("weights") or DEFAULT_WEIGHTS), "world verifier weights")]

    def __init__(
        self,
        weights: str | Path = DEFAULT_WEIGHTS,
        device: str = "cpu",
        batch_size: int = 256,
        marker_style: str = "words",
    ):
        from safetensors.torch import load_file

        from cir_demo.models.preprocess import PREPROCESS
        from cir_demo.models.world_judge import FEATURES, JudgeArch, feature_dim, load_tokenizer
        from cir_demo.models.world_judge_net import judge_from_state
        from cir_demo.retrievers.base import resolve_path

        path = resolve_path(weights)
        manifest, digest = read_judge_manifest(path)
        self.arch = JudgeArch.from_json(manifest["architecture"])
        self.model = judge_from_state(load_file(str(path)), self.arch)
        ranking = manifest.get("ranking") or {}
        for field in ("near_miss_penalty", "first_stage_rank_weight"):
            value = ranking.get(field, 0.0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(
                    f"{path.parent / 'manifest.json'}: field 'ranking.{field}' must be a number >= 0, got {value!r}"
                )
        self.near_miss_penalty = float(ranking.get("near_miss_penalty", 0.0)) if self.model.near is not None else 0.0
        self.first_stage_rank_weight = float(ranking.get("first_stage_rank_weight", 0.0))
        self.tokenizer = load_tokenizer(path.parent / TOKENIZER_FILE)
        self.name = "world-verifier"
        self.dim = feature_dim(self.arch)
        self.batch_size = int(batch_size)
        self.marker_style = marker_style
        self.description = DESCRIPTION
        self.preprocess = dict(manifest.get("preprocess") or PREPROCESS)
        # The code and libraries that compute the features and scores: this module and what it imports
        # (the judge's network among them), so a changed judge never reuses cached features or scores
        self.code = code_key((__name__,), JUDGE_LIBRARIES)
        # The embedding cache key of the image features (shared by every caller of this judge): the code
        # that computes them (`features_of_images` and what it reaches), not the scoring code around it,
        # so the shipped corpus features stay valid when only the scoring changes.
        self.image_spec = {
            "family": "world-judge",
            "weights_sha256": digest,
            "preprocess": self.preprocess,
            "code": code_key(("cir_demo.models.world_judge",), FEATURE_LIBRARIES),
            "features": FEATURES,  # stored (indexes/prebuilt) as int8 codes and scales
        }
        self._lock = threading.Lock()
        self._probe_lock = threading.Lock()  # the probes memos, shared by batches scored at once
        self._row: dict[str, int] = {}  # image id -> row of self._feats
        self._feats = np.zeros((0, self.dim), np.float32)
        self._memory = None  # cross-attention keys/values of every row of self._feats, built on first use
        self._remember: frozenset[str] = frozenset()
        self._remembered: dict[str, np.ndarray] = {}  # features of images in the remember set, on first use
        self._probes: OrderedDict = OrderedDict()
        self._probe_batches = LRU(_PROBE_BATCHES)  # (query keys of one batch) -> its (probes, properties)
        self.spec = {
            "backend": self.backend,
            "model": "world-judge",
            "weights": {"path": str(weights), "sha256": digest},
            "architecture": self.arch.to_json(),
            "score": "sigmoid(logit_yes - logit_no), calibrated on held-out train intents",
            "near_miss_penalty": self.near_miss_penalty,
            "first_stage_rank_weight": self.first_stage_rank_weight,
            "ranking": ranking_text(self.near_miss_penalty, self.first_stage_rank_weight),
            "description": self.description,  # no "prompt": this backend reads no text prompt
            "marker_style": marker_style,
            "image_preprocess": self.preprocess,
            "code": self.code,
        }

    def prompt_text(self, request: RerankRequest) -> str:
        return self.description

    # -- image features
    def encode_images(self, images: Sequence[Any], batch_size: int | None = None) -> np.ndarray:
        """(n, dim) unit-row image features from PIL images (or uint8 arrays)."""
        from cir_demo.models.world_judge import features_of_images

        return features_of_images(self.model, images, self.preprocess, batch_size or self.batch_size)

    def use_image_embeddings(
        self, ids: Sequence[str], embeddings: np.ndarray, remember_ids: Sequence[str] = ()
    ) -> None:
        """Serve these images' features from `embeddings` (rows in `ids` order; e.g. a benchmark's corpus
        from the shared embedding cache) instead of computing them per query. Images in
        `remember_ids` (e.g. the benchmark's reference images) are computed on first use and kept.
        Only ids whose image is fixed by the id belong here: never uploads."""
        embeddings = np.asarray(embeddings, np.float32)
        if embeddings.shape != (len(ids), self.dim):
            raise ValueError(
                f"world verifier: features of shape {embeddings.shape} for {len(ids)} ids of dim {self.dim}"
            )
        with self._lock:  # scoring reads without the lock: the rows must exist before their ids do
            self._feats = np.ascontiguousarray(embeddings)
            self._memory = None
            self._remember = frozenset(map(str, remember_ids))
            self._row = {str(i): r for r, i in enumerate(ids)}
            self._probe_batches = LRU(_PROBE_BATCHES)  # references' features may come from the table now

    def remember(self, image_ids: Sequence[str]) -> None:
        """Also keep the features of these images once computed (e.g. another split's reference images).
        Only ids whose image is fixed by the id belong here: never uploads."""
        with self._lock:
            self._remember = self._remember | frozenset(map(str, image_ids))

    def needs_image(self, image_id: str) -> bool:
        return str(image_id) not in self._row and str(image_id) not in self._remembered

    def _features(self, ids: Sequence[str | None], images: Sequence[Any]) -> np.ndarray:
        """Features of images given by id and/or pixels: known ids from the table, the rest computed in
        one batch (and kept when their id is in the remember set)."""
        out = np.zeros((len(images), self.dim), np.float32)
        todo = []
        for i, (image_id, image) in enumerate(zip(ids, images)):
            row = self._row.get(image_id) if image_id is not None else None
            if row is not None:
                out[i] = self._feats[row]
            elif image_id is not None and image_id in self._remembered:
                out[i] = self._remembered[image_id]
            elif image is None:
                raise ValueError(f"world verifier: no image and no precomputed features for {image_id!r}")
            else:
                todo.append(i)
        if todo:
            # an id's image is fixed by the id: each id once (a query's paraphrases share their references)
            first: dict = {}
            for i in todo:
                first.setdefault(ids[i] if ids[i] is not None else ("pixels", i), i)
            unique = list(first.values())
            feats = self.encode_images([images[i] for i in unique])
            row_of = {key: n for n, key in enumerate(first)}
            for i in todo:
                out[i] = feats[row_of[ids[i] if ids[i] is not None else ("pixels", i)]]
            with self._lock:  # kept apart from the corpus table, whose keys/values stay valid
                self._remembered.update((ids[i], feats[n]) for n, i in enumerate(unique) if ids[i] in self._remember)
        return out

    def _known_memory(self):
        """Keys/values of every corpus image, built once (6,809 images: well under a second, 84 MB)."""
        import torch

        with self._lock:
            if self._memory is None or self._memory[0][0].shape[0] != len(self._feats):
                with torch.inference_mode():
                    parts = [
                        self.model.candidate_memory(torch.from_numpy(self._feats[s : s + 2048]))
                        for s in range(0, len(self._feats), 2048)
                    ]
                    self._memory = (
                        [
                            (torch.cat([p[b][0] for p in parts]), torch.cat([p[b][1] for p in parts]))
                            for b in range(len(parts[0]))
                        ]
                        if parts
                        else None
                    )
            return self._memory

    def _words(self, instructions: Sequence[str]):
        import torch

        from cir_demo.models.world_judge import encode_words
        from cir_demo.retrievers.base import render_markers

        rendered = [render_markers(t, self.marker_style) for t in instructions]
        return torch.from_numpy(encode_words(self.tokenizer, rendered, self.arch.context_length))

    def _query_probes(self, requests: Sequence[RerankRequest]):
        """((q, probes, width), (q, n_props) reference-1 properties or None) for each request; memoised
        for requests whose references are known ids."""
        with self._probe_lock:
            return self._probes_of(requests)

    def _probes_of(self, requests: Sequence[RerankRequest]):
        import torch

        keys = [self._probe_key(r) for r in requests]
        out: list = [self._probes.get(k) if k is not None else None for k in keys]
        todo = [i for i, p in enumerate(out) if p is None]
        if todo:
            # a batch of queries met before (the next retriever's reranking of the same queries) takes
            # its probes from then: whole batches only, as a row's last bits depend on its batch
            batch = tuple(keys[i] for i in todo) if all(keys[i] is not None for i in todo) else None
            probes, props = self._probe_batches.get(batch) or self._encode_probes([requests[i] for i in todo])
            if batch is not None:
                self._probe_batches.put(batch, (probes, props))
            for n, i in enumerate(todo):
                out[i] = (probes[n], props[n] if props is not None else None)
                if keys[i] is not None:
                    self._probes[keys[i]] = out[i]
            while len(self._probes) > _PROBE_MEMO:
                self._probes.popitem(last=False)
        if not out:
            return torch.zeros(0), None
        props = torch.stack([p for _, p in out]) if self.model.near is not None else None
        return torch.stack([pr for pr, _ in out]), props

    def _probe_key(self, request: RerankRequest):
        """What a request's probes are kept under; None when a reference may be an upload (an id neither
        in the table nor to be remembered), whose probes are computed with their batch every time."""
        ids = request.reference_ids
        if all(i in self._row or i in self._remembered or i in self._remember for i in ids):
            return (ids, request.instruction)
        return None

    def _encode_probes(self, requests: Sequence[RerankRequest]):
        """(probes, reference-1 properties or None) of these requests, computed as one batch."""
        import torch

        ids, images = [], []
        for r in requests:
            ids += [r.reference_ids[0], r.reference_ids[-1]]
            images += [r.reference_images[0], r.reference_images[-1]]
        feats = torch.from_numpy(self._features(ids, images))
        two = torch.tensor([len(r.reference_ids) > 1 for r in requests])
        with torch.inference_mode():
            probes = self.model.encode_query(
                feats[0::2], feats[1::2], two, self._words([r.instruction for r in requests])
            )
            props = self.model.attribute_probs(feats[0::2]) if self.model.near is not None else None
        return probes, props

    # -- scoring
    def prepare_batch(self, items) -> None:
        """The probes of each forward pass `_logits` makes for these items, computed now. Batches scored at
        once (lanes) would otherwise take the probe memo in the order their threads run: a reference that
        two batches share is encoded with the first one's images, and its features' last bits (so those of
        every probe built on them) follow from that batch. In batch order they are one lane's bits."""
        requests = [request for request, _, _ in items]
        step = self._queries_per_pass()
        for s in range(0, len(requests), step):
            part = requests[s : s + step]
            if all(self._probe_key(r) is not None for r in part):  # a pass with an upload is computed whole
                self._query_probes(part)

    def _queries_per_pass(self) -> int:
        return max(1, self.batch_size // 8)

    def score_logits(self, request: RerankRequest, candidate_images: Sequence[Any]) -> np.ndarray:
        if not candidate_images:
            return np.zeros((0, 2))
        return self._logits([(request, [None] * len(candidate_images), list(candidate_images))])

    def score(self, request: RerankRequest, candidate_ids: Sequence[str], candidate_images: Sequence[Any]):
        return self.score_batch([(request, candidate_ids, candidate_images)])[0]

    def score_batch(self, items):
        """All candidates of all queries at once (rows are independent)."""
        from cir_demo.rerank.base import scores_from_logits

        items = [(request, list(ids), list(images)) for request, ids, images in items]
        for _, ids, images in items:
            self._check_lengths(ids, images)
        logits = self._logits(items)
        scores = scores_from_logits([i for _, ids, _ in items for i in ids], logits)  # rows are independent
        out, pos = [], 0
        for _, ids, _ in items:
            out.append(scores[pos : pos + len(ids)])
            pos += len(ids)
        return out

    def _logits(self, items) -> np.ndarray:
        import torch

        n_pairs = sum(len(ids) for _, ids, _ in items)
        width = 3 if self.model.near is not None else 2  # (yes, no[, near])
        if not n_pairs:
            return np.zeros((0, width))
        out = np.zeros((n_pairs, width), np.float64)
        step = self._queries_per_pass()
        pos = 0
        for s in range(0, len(items), step):
            chunk = items[s : s + step]
            probes, props = self._query_probes([request for request, _, _ in chunk])
            query_of = np.concatenate([np.full(len(ids), q) for q, (_, ids, _) in enumerate(chunk)])
            known = [self._row.get(i) if i is not None else None for _, ids, _ in chunk for i in ids]
            images = [img for _, _, imgs in chunk for img in imgs]
            with torch.inference_mode():
                if all(r is not None for r in known):
                    memory, index = self._known_memory(), torch.tensor(known, dtype=torch.long)
                else:  # uploads or images outside the known table: their features now
                    ids = [i for _, ids, _ in chunk for i in ids]
                    memory = self.model.candidate_memory(torch.from_numpy(self._features(ids, images)))
                    index = torch.arange(len(ids))
                q = torch.from_numpy(query_of)
                logits = self.model.logits(probes[q], memory, index, props[q] if props is not None else None)
            out[pos : pos + len(query_of)] = logits.numpy()
            pos += len(query_of)
        return out
