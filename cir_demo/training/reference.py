"""Reference numbers of the committed world models: what they answer on a fixed small slice of the
default world, stored beside the weights (`assets/<model>/reference.json`) so that a changed weight,
or a change in the code that serves it (rendering, preprocessing, tokenising, recipes), shows up as
a changed number (tests/test_world_reference.py recomputes them in seconds).

The slice: the first paraphrase of the first `intents` test intents, and a corpus of the first
`corpus` test-corpus images plus the first `judged` positives and explicit negatives of each of
those queries (metrics still count every positive, as on a corpus that lost some). Numbers:
each retriever's top-`top` ids and scores per query, and its mAP@10 / NegRecall@10 on the slice;
the verifier's yes-no logit margin and P(near miss) for world-CLIP fusion's top `rerank_top` of
each query.

    python -m cir_demo train world-clip --record-reference   # after retraining a model
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SLICE = {"size": "default", "seed": 0, "intents": 12, "corpus": 96, "judged": 3, "top": 5, "rerank_top": 10}
RETRIEVERS = {
    "world-clip": ("world-clip-image", "world-clip-text", "world-clip-fusion", "world-clip-slerp"),
    "world-cir": ("world-cir",),
}
FIRST_STAGE = "world-clip-fusion"  # the verifier reranks its top `rerank_top`
FILE = "reference.json"
TOLERANCE = 1e-4  # float noise (another BLAS, thread count); a retrained weight moves scores by far more


@dataclass
class WorldSlice:
    queries: list
    corpus_ids: list[str]
    images: dict  # image id -> PIL image (references and corpus), rendered as the app renders them


def world_slice(spec: dict = SLICE) -> WorldSlice:
    from cir_demo.world.loader import load_world, render_image

    bench = load_world(size=spec["size"], seed=spec["seed"], progress=False)
    firsts = {}
    for q in bench.queries:
        firsts.setdefault(q.group_id, q)
    queries = list(firsts.values())[: spec["intents"]]
    judged = {i for q in queries for i in (*q.positives[: spec["judged"]], *q.negatives[: spec["judged"]])}
    corpus = sorted(set(bench.corpus_ids[: spec["corpus"]]) | judged)
    ids = sorted(set(corpus) | {r for q in queries for r in q.reference_ids})
    return WorldSlice(queries, corpus, {i: render_image(i) for i in ids})


def _composed(sl: WorldSlice):
    from cir_demo.retrievers.base import ComposedQuery

    return [
        ComposedQuery(tuple(sl.images[r] for r in q.reference_ids), q.instruction, q.query_id, q.reference_ids)
        for q in sl.queries
    ]


def ranked(retriever, sl: WorldSlice) -> tuple[np.ndarray, np.ndarray]:
    """(corpus rows best first, their scores) per query; ties by corpus order."""
    corpus = retriever.encode_images([sl.images[i] for i in sl.corpus_ids])
    scores = retriever.encode_queries(_composed(sl)) @ corpus.T
    order = np.argsort(-scores, axis=1, kind="stable")
    return order, np.take_along_axis(scores, order, axis=1)


def retriever_numbers(retriever, sl: WorldSlice, top: int) -> dict:
    from cir_demo.metrics.pinpoint import evaluate

    order, scores = ranked(retriever, sl)
    run = {q.query_id: [sl.corpus_ids[j] for j in row[:10]] for q, row in zip(sl.queries, order)}
    per_query = {
        q.query_id: {"ids": [sl.corpus_ids[j] for j in row[:top]], "scores": _rounded(s[:top])}
        for q, row, s in zip(sl.queries, order, scores)
    }
    metrics, _ = evaluate(run, sl.queries)
    return {**{k: round(float(metrics[k]), 6) for k in ("mAP@10", "NegRecall@10")}, "queries": per_query}


def verifier_numbers(reranker, candidates: dict[str, list[str]], sl: WorldSlice) -> dict:
    """The yes-no margin and P(near miss) of each query's `candidates`."""
    from cir_demo.rerank import RerankRequest

    out = {}
    for q in sl.queries:
        ids = candidates[q.query_id]
        request = RerankRequest(tuple(sl.images[r] for r in q.reference_ids), q.reference_ids, q.instruction)
        scores = reranker.score(request, ids, [sl.images[i] for i in ids])
        # the margin, not P(yes): P(yes) of a clear no rounds to 0 and would hide a change
        out[q.query_id] = {
            "ids": ids,
            "margin": _rounded([s.logit_yes - s.logit_no for s in scores]),
            "p_near": _rounded([s.p_near for s in scores]),
        }
    return {"first_stage": FIRST_STAGE, "queries": out}


def _rounded(values) -> list[float]:
    return [round(float(v), 6) for v in values]


def reference_numbers(
    model: str,
    sl: WorldSlice,
    spec: dict = SLICE,
    loaded: dict | None = None,
    candidates: dict[str, list[str]] | None = None,
) -> dict:
    """The numbers of committed world model `model` on the slice. `loaded`: name -> an already
    loaded retriever or reranker to use instead of loading it (tests pass modified copies).
    `candidates` (the verifier): query id -> the ids to score, as recorded (a first-stage tie
    broken the other way on another machine must not change the pairs); default: world-CLIP
    fusion's top `rerank_top`."""
    from cir_demo.rerank import load_reranker
    from cir_demo.retrievers.registry import load_retriever

    loaded = loaded or {}

    def get(name):
        if name not in loaded:
            loaded[name] = load_reranker(name) if name == "world-verifier" else load_retriever(name, device="cpu")
        return loaded[name]

    if model in RETRIEVERS:
        return {name: retriever_numbers(get(name), sl, spec["top"]) for name in RETRIEVERS[model]}
    if candidates is None:
        order, _ = ranked(get(FIRST_STAGE), sl)
        candidates = {
            q.query_id: [sl.corpus_ids[j] for j in row[: spec["rerank_top"]]] for q, row in zip(sl.queries, order)
        }
    return {"world-verifier": verifier_numbers(get("world-verifier"), candidates, sl)}


def reference_path(model: str) -> Path:
    from cir_demo.paths import assets_dir

    return assets_dir() / model / FILE


def record_reference(model: str, sl: WorldSlice | None = None) -> Path:
    """Compute and write `assets/<model>/reference.json` (atomically); its path."""
    from cir_demo.utils.io import write_json_atomic

    manifest = json.loads((reference_path(model).parent / "manifest.json").read_text(encoding="utf-8"))
    numbers = reference_numbers(model, sl or world_slice())
    path = reference_path(model)
    write_json_atomic(
        path, {"model": model, "slice": SLICE, "files": manifest["files"], "tolerance": TOLERANCE, "numbers": numbers}
    )
    return path


def id_differences(ids: list, scores: list, got_ids: list, tolerance: float, where: str = "") -> list[str]:
    """Where top-k `got_ids` differ from the expected `ids`: each run of places whose expected `scores`
    tie within `tolerance` must hold the same ids in any order; the last run, at the cut, may also
    hold other images of that score (one just below the top k may tie with it)."""
    if len(ids) != len(got_ids):
        return [f"{where}: {len(ids)} ids, got {len(got_ids)}"]
    out, start = [], 0
    for end in range(1, len(ids) + 1):
        if end < len(ids) and abs(scores[end] - scores[end - 1]) <= tolerance:
            continue
        if end < len(ids) and sorted(map(str, ids[start:end])) != sorted(map(str, got_ids[start:end])):
            out.append(f"{where}[{start}:{end}]: expected {ids[start:end]!r}, got {got_ids[start:end]!r}")
        start = end
    return out


def differences(expected, got, tolerance: float = TOLERANCE, where: str = "") -> list[str]:
    """'path: expected X, got Y' for every number further apart than `tolerance` and every other
    value (ids, names) that differs. Top-k ids are compared in order, except that images whose
    expected scores tie within `tolerance` may swap places (`id_differences`)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        if set(expected) != set(got):
            return [f"{where}: keys {sorted(expected)} != {sorted(got)}"]
        if "ids" in expected and "scores" in expected:
            return differences(expected["scores"], got["scores"], tolerance, f"{where}.scores") + id_differences(
                expected["ids"], expected["scores"], got["ids"], tolerance, f"{where}.ids"
            )
        return [d for k in expected for d in differences(expected[k], got[k], tolerance, f"{where}.{k}")]
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return [f"{where}: {len(expected)} values, got {len(got)}"]
        return [d for i, (e, g) in enumerate(zip(expected, got)) for d in differences(e, g, tolerance, f"{where}[{i}]")]
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)) and not isinstance(expected, bool):
        return [] if abs(expected - got) <= tolerance else [f"{where}: expected {expected}, got {got}"]
    return [] if expected == got else [f"{where}: expected {expected!r}, got {got!r}"]
