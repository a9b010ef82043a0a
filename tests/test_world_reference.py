"""The committed weights reproduce their reference numbers: each world model (assets/world-*), served
as the app serves it, answers on a fixed slice of the default world what `assets/<model>/reference.json`
recorded (`python -m cir_demo train MODEL --record-reference`), within float noise; and a weight
changed by a little is caught."""

from __future__ import annotations

import json

import pytest

import torch

from cir_demo.training import reference as ref

MODELS = ("world-clip", "world-cir", "world-verifier")


@pytest.fixture(scope="module", autouse=True)
def _threads(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def world_slice(default_world, tmp_path_factory):
    """The slice of the default world (conftest.py's, built once per session, linked into a cache
    of this module's own)."""
    from conftest import linked_default_world

    mp = pytest.MonkeyPatch()
    mp.setenv(
        "CIR_DEMO_CACHE", str(linked_default_world(default_world, tmp_path_factory.mktemp("reference") / "cache"))
    )
    yield ref.world_slice()
    mp.undo()


@pytest.fixture(scope="module")
def loaded():
    return {}  # models loaded once for the module


def stored(model: str) -> dict:
    return json.loads(ref.reference_path(model).read_text(encoding="utf-8"))


def _candidates(model: str) -> dict | None:
    if model != "world-verifier":
        return None
    return {qid: q["ids"] for qid, q in stored(model)["numbers"]["world-verifier"]["queries"].items()}


@pytest.mark.parametrize("model", MODELS)
def test_committed_weights_reproduce_their_reference_numbers(model, world_slice, loaded):
    record = stored(model)
    manifest = json.loads((ref.reference_path(model).parent / "manifest.json").read_text(encoding="utf-8"))
    assert record["files"] == manifest["files"], f"{model}: reference.json was recorded for other weights"
    assert record["slice"] == ref.SLICE and [q.query_id for q in world_slice.queries] == list(
        next(iter(record["numbers"].values()))["queries"]
    )
    got = ref.reference_numbers(model, world_slice, loaded=loaded, candidates=_candidates(model))
    diffs = ref.differences(record["numbers"], got, record["tolerance"], model)
    assert not diffs, f"{len(diffs)} numbers differ; first ones: {diffs[:5]}"


def _nudged(module):
    """A copy of a torch module with one weight matrix changed by about 1%."""
    import copy

    module = copy.deepcopy(module)
    name, weight = next((n, p) for n, p in module.named_parameters() if p.ndim == 2)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        weight.add_(torch.randn(weight.shape, generator=gen) * 0.01 * weight.abs().mean())
    return module


def test_a_slightly_changed_weight_is_caught(world_slice, loaded):
    import copy

    from cir_demo.rerank import load_reranker
    from cir_demo.retrievers.registry import load_retriever

    cir = copy.copy(loaded.get("world-cir") or load_retriever("world-cir", device="cpu"))
    cir.combiner = _nudged(cir.combiner)
    got = ref.reference_numbers("world-cir", world_slice, loaded={"world-cir": cir})
    diffs = ref.differences(stored("world-cir")["numbers"], got, ref.TOLERANCE)
    assert any(".scores[" in d for d in diffs), diffs[:3]

    judge = copy.copy(loaded.get("world-verifier") or load_reranker("world-verifier"))
    judge.model = _nudged(judge.model)
    got = ref.reference_numbers(
        "world-verifier", world_slice, loaded={"world-verifier": judge}, candidates=_candidates("world-verifier")
    )
    diffs = ref.differences(stored("world-verifier")["numbers"], got, ref.TOLERANCE)
    assert any(".margin[" in d for d in diffs), diffs[:3]


def test_differences_hand_built():
    a = {"r": {"mAP@10": 0.5, "queries": {"q1": {"ids": ["x", "y"], "scores": [0.9, 0.9]}}}}
    tie_swapped = {"r": {"mAP@10": 0.50005, "queries": {"q1": {"ids": ["y", "x"], "scores": [0.9, 0.90001]}}}}
    assert ref.differences(a, tie_swapped, 1e-4) == []
    moved = {"r": {"mAP@10": 0.5, "queries": {"q1": {"ids": ["x", "y"], "scores": [0.9, 0.8]}}}}
    assert ref.differences(a, moved, 1e-4, "m") == ["m.r.queries.q1.scores[1]: expected 0.9, got 0.8"]
    # another top 2 with the same scores: the ids are compared, not only the scores
    top = {"ids": ["x", "y", "z"], "scores": [0.9, 0.8, 0.7]}
    assert ref.differences(top, {"ids": ["w", "y", "z"], "scores": [0.9, 0.8, 0.7]}, 1e-4, "t") == [
        "t.ids[0:1]: expected ['x'], got ['w']"
    ]
    assert ref.differences(top, {"ids": ["y", "x", "z"], "scores": [0.9, 0.8, 0.7]}, 1e-4, "t") == [
        "t.ids[0:1]: expected ['x'], got ['y']",
        "t.ids[1:2]: expected ['y'], got ['x']",
    ]
    tied = {"ids": ["x", "y", "z"], "scores": [0.9, 0.9, 0.7]}  # x and y tie: either order; z at the cut
    assert ref.differences(tied, {"ids": ["y", "x", "q"], "scores": [0.9, 0.9, 0.7]}, 1e-4, "t") == []
    assert ref.differences({"ids": ["x"], "margin": [1.0]}, {"ids": ["z"], "margin": [1.0]}, 1e-4, "v") == [
        "v.ids[0]: expected 'x', got 'z'"
    ]
    assert ref.differences({"a": 1}, {"b": 1}, 1e-4, "k") == ["k: keys ['a'] != ['b']"]
    assert ref.differences([1.0], [1.0, 2.0], 1e-4, "n") == ["n: 1 values, got 2"]
