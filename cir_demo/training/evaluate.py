"""Held-out metrics of the world models, on the world's *test* split only.

- world-CLIP text-to-image Recall@10 over the held-out test captions: a hit is any test-corpus
  image whose scene graph matches the caption (`caption_hits`), since many images share one.
- mAP@10 / NegRecall@10 on the world test benchmark for each world-CLIP recipe and world-CIR,
  by brute-force ranking of the whole test corpus (exact dot products).
- The verifier: world-CLIP fusion top-20 before and after reranking.

Nothing here is used for training or model selection; the trainers call it once at the end
and write the numbers into the asset manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

RECALL_K = 10
METRIC_KEYS = ("mAP@10", "NegRecall@10", "mAP@10_noNeg", "recall@10")
# The zero-shot world-CLIP recipes, with the registry's default parameters.
RECIPES = {
    "image": ("image_only", {}),
    "text": ("text_only", {}),
    "fusion": ("early_fusion", {"text_weight": 0.8}),
    "slerp": ("slerp", {"t": 0.8}),
}


@dataclass
class TestData:
    """The world test benchmark with its model-input pixels (uint8, cached)."""

    bench: object
    world: object
    corpus_pixels: np.ndarray
    ref_ids: list[str]
    ref_pixels: np.ndarray

    @property
    def ref_row(self) -> dict[str, int]:
        return {r: i for i, r in enumerate(self.ref_ids)}

    def query_texts(self) -> list[str]:
        from cir_demo.retrievers.base import render_markers

        return [render_markers(q.instruction, "words") for q in self.bench.queries]


def load_test_data(size: str = "default", seed: int = 0, progress: bool = True, split: str = "test") -> TestData:
    """`split`: "test" or "compositional" (one corpus; the reference caches are told apart by their ids)."""
    from cir_demo.training.data import world_pixels
    from cir_demo.world.loader import load_world, open_world

    bench = load_world(size=size, seed=seed, split=split, progress=False)
    world = open_world(size=size, seed=seed, progress=False)
    ref_ids = sorted({r for q in bench.queries for r in q.reference_ids})
    return TestData(
        bench,
        world,
        world_pixels(world, bench.corpus_ids, "test-corpus", progress=progress),
        ref_ids,
        world_pixels(world, ref_ids, "test-refs", progress=progress),
    )


# --------------------------------------------------------------------------- pure helpers
def top_k(query_vecs: np.ndarray, corpus_vecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by dot product: (indices, scores), best first; ties broken by lower corpus index."""
    scores = np.asarray(query_vecs, np.float32) @ np.asarray(corpus_vecs, np.float32).T
    k = min(k, scores.shape[1])
    # lexsort on (index, -score) gives a deterministic tie order
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(scores, order, axis=1)


def merged_references(ref_emb: np.ndarray, ref_row: dict[str, int], queries) -> np.ndarray:
    """Per query: its reference embedding, or the normalised mean of its two (the adapter's merge)."""
    from cir_demo.retrievers.recipes import l2_normalize

    out = np.stack([np.mean([ref_emb[ref_row[r]] for r in q.reference_ids], axis=0) for q in queries])
    return l2_normalize(out, "merged references")


def run_from_topk(queries, corpus_ids: Sequence[str], idx: np.ndarray) -> dict[str, list[str]]:
    return {q.query_id: [corpus_ids[j] for j in row] for q, row in zip(queries, idx)}


def run_metrics(run: dict, queries) -> dict[str, float]:
    from cir_demo.metrics.pinpoint import evaluate

    agg, _ = evaluate(run, queries)
    return {k: round(float(agg[k]), 4) for k in METRIC_KEYS}


def caption_recall(
    caption_emb: np.ndarray, corpus_emb: np.ndarray, hit_sets: Sequence[set[int]], k: int = RECALL_K
) -> float:
    """Fraction of captions with at least one matching image among their top `k`."""
    idx, _ = top_k(caption_emb, corpus_emb, k)
    return float(np.mean([bool(hits.intersection(row.tolist())) for row, hits in zip(idx, hit_sets)]))


# --------------------------------------------------------------------------- model-level evaluations
def clip_embeddings(
    model, tokenizer, test: TestData, progress: bool = True, cache_key: str | None = None
) -> dict[str, np.ndarray]:
    """world-CLIP embeddings of the test corpus, references and query texts; cached on disk
    under the world's pixel cache when `cache_key` (the weights' sha256) is given."""
    from cir_demo.training.data import cached_array
    from cir_demo.training.world_clip import ENCODE_CODE, ENCODE_LIBRARIES, encode_pixels, encode_texts

    def corpus():
        return encode_pixels(model, test.corpus_pixels, progress=progress, desc="encode test corpus")

    checksum = test.world.manifest["checksum"]
    return {
        "corpus": (
            cached_array(checksum, f"test-corpus-emb-{cache_key}", corpus, ENCODE_CODE, ENCODE_LIBRARIES)
            if cache_key
            else corpus()
        ),
        "refs": encode_pixels(model, test.ref_pixels),
        "texts": encode_texts(model, tokenizer, test.query_texts()),
    }


def evaluate_world_clip(
    model, tokenizer, test: TestData, size: str, seed: int, emb: dict | None = None, progress: bool = True
) -> dict:
    """Caption Recall@10 and the four zero-shot recipes' test metrics."""
    from cir_demo.retrievers import recipes
    from cir_demo.training.world_clip import encode_texts
    from cir_demo.world.loader import caption_hits, load_test_captions

    emb = emb or clip_embeddings(model, tokenizer, test, progress)
    caps = load_test_captions(size=size, seed=seed)
    hit_sets = [{int(h[5:]) for h in caption_hits(c, test.world)} for c in caps]
    cap_emb = encode_texts(model, tokenizer, [c.text for c in caps])
    out = {
        "caption_recall@10": round(caption_recall(cap_emb, emb["corpus"], hit_sets), 4),
        "n_test_captions": len(caps),
    }
    queries = test.bench.queries
    refs = merged_references(emb["refs"], test.ref_row, queries)
    for short, (recipe, params) in RECIPES.items():
        q = recipes.combine(recipe, params, refs, emb["texts"])
        idx, _ = top_k(q, emb["corpus"], 10)
        out[f"world-clip-{short}"] = run_metrics(run_from_topk(queries, test.bench.corpus_ids, idx), queries)
    return out


def rerank_top_block(idx: np.ndarray, margins: np.ndarray) -> np.ndarray:
    """Reorder each row of `idx` (first-stage order) by descending margin; ties keep first-stage order."""
    order = np.argsort(-np.asarray(margins), axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1)


def evaluate_reranked_fusion(
    score_fn: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], test: TestData, emb: dict, top_n: int = 20
) -> dict:
    """world-CLIP fusion top-`top_n` before/after reranking with `score_fn(refs (q, r, d) , text_idx (q,),
    cand_idx (q, n)) -> margins (q, n)` (logit_yes - logit_no)."""
    from cir_demo.retrievers import recipes

    queries = test.bench.queries
    refs = merged_references(emb["refs"], test.ref_row, queries)
    q = recipes.combine("early_fusion", {"text_weight": 0.8}, refs, emb["texts"])
    idx, _ = top_k(q, emb["corpus"], top_n)
    before = run_metrics(run_from_topk(queries, test.bench.corpus_ids, idx), queries)
    margins = score_fn(idx)
    after = run_metrics(run_from_topk(queries, test.bench.corpus_ids, rerank_top_block(idx, margins)), queries)
    return {"top_n": top_n, "before": before, "after": after}
