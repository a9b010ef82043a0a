"""The world judge (the world-verifier backend) against oracles: scoring a batch equals scoring each
candidate alone from its pixels, precomputed features equal features from pixels, the pooling and the
calibration against hand computations, and inference that reads pixels and words only."""

import ast
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cir_demo.models.world_judge import (
    GRID,
    N_TOKENS,
    JudgeArch,
    feature_dim,
    pool_tokens,
)
from cir_demo.models.world_judge_net import build_judge
from cir_demo.paths import REPO_ROOT
from cir_demo.rerank import RerankRequest, load_reranker

TINY = JudgeArch(
    channels=(4, 4, 8, 8, 8, 8, 8),
    feat_dim=8,
    width=16,
    heads=2,
    query_layers=1,
    cand_layers=2,
    probes=3,
    vocab_size=305,
    context_length=48,
)
# with the attribute reader and the near-miss answer (three properties of 3, 4 and 2 values)
TINY_NEAR = JudgeArch(**{**TINY.to_json(), "channels": TINY.channels, "attr_classes": (3, 4, 2), "near_head": 8})
NEAR_PENALTY = 0.5


def _save_judge(out, arch, ranking=None):
    """A randomly initialised tiny judge saved as the trainer saves one (weights, tokenizer, manifest)."""
    from safetensors.torch import save_file

    from cir_demo.utils.io import sha256_file

    torch.manual_seed(0)
    model = build_judge(arch).eval()
    with torch.no_grad():  # non-trivial batch-norm statistics
        for m in model.image.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        if model.near is not None:  # P(near) spread over (0, 1), as a trained answer's
            model.near[-1].weight.mul_(40.0)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "world_judge.safetensors"))
    (out / "tokenizer").mkdir()
    shutil.copyfile(REPO_ROOT / "assets/world-clip/tokenizer/tokenizer.json", out / "tokenizer/tokenizer.json")
    manifest = {
        "model": "world-verifier",
        "architecture": arch.to_json(),
        "files": {
            "world_judge.safetensors": sha256_file(out / "world_judge.safetensors"),
            "tokenizer/tokenizer.json": sha256_file(out / "tokenizer/tokenizer.json"),
        },
    }
    if ranking is not None:
        manifest["ranking"] = ranking
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    return _save_judge(tmp_path_factory.mktemp("judge"), TINY)


@pytest.fixture(scope="module")
def near_judge_dir(tmp_path_factory):
    return _save_judge(tmp_path_factory.mktemp("near-judge"), TINY_NEAR, {"near_miss_penalty": NEAR_PENALTY})


@pytest.fixture(scope="module")
def judge(judge_dir, one_torch_thread):
    return load_reranker("world-verifier", weights=str(judge_dir / "world_judge.safetensors"))


def _images(n, seed=0):
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (160, 160, 3), dtype=np.uint8)) for _ in range(n)]


def test_pool_tokens_is_mean_and_max_of_each_cell():
    feats = torch.randn(2, GRID * GRID, 3)
    got = pool_tokens(feats).numpy()
    grid = feats.numpy().reshape(2, GRID, GRID, 3)
    k = GRID // int(math.sqrt(N_TOKENS))
    for i in range(2):
        for t in range(N_TOKENS):
            r, c = divmod(t, int(math.sqrt(N_TOKENS)))
            cell = grid[i, r * k : (r + 1) * k, c * k : (c + 1) * k].reshape(-1, 3)
            np.testing.assert_allclose(got[i, t], np.concatenate([cell.mean(0), cell.max(0)]), atol=1e-6)


def test_features_are_unit_rows_and_precomputed_equal_pixels(judge):
    ims = _images(4)
    feats = judge.encode_images(ims)
    assert feats.shape == (4, feature_dim(TINY))
    np.testing.assert_allclose(np.linalg.norm(feats, axis=1), 1.0, atol=1e-5)
    request = RerankRequest((ims[0],), ("ref-a",), "Same item but in red")
    from_pixels = [s.logit_yes for s in judge.score(request, ["c1", "c2", "c3"], ims[1:])]
    judge.use_image_embeddings(["c1", "c2", "c3", "ref-a"], judge.encode_images(ims[1:] + ims[:1]))
    assert not judge.needs_image("c2") and judge.needs_image("other")
    known = [
        s.logit_yes
        for s in judge.score(
            RerankRequest((None,), ("ref-a",), "Same item but in red"), ["c1", "c2", "c3"], [None, None, None]
        )
    ]
    np.testing.assert_allclose(known, from_pixels, atol=1e-5)


@pytest.mark.parametrize("which", ["judge_dir", "near_judge_dir"])
def test_batched_scoring_equals_each_candidate_alone(which, request, one_torch_thread):
    """Oracle: one batch over several queries (one- and two-image, shared candidates, known and
    unknown ids) gives each pair the logits (and P(near miss)) of scoring that candidate alone from pixels."""
    judge_dir = request.getfixturevalue(which)
    fresh = load_reranker("world-verifier", weights=str(judge_dir / "world_judge.safetensors"))
    ims = _images(8, seed=1)
    fresh.use_image_embeddings(["k0", "k1", "k2"], fresh.encode_images(ims[:3]), remember_ids=["r0"])
    items = [
        (RerankRequest((ims[3],), ("r0",), "Same mug but not red"), ["k0", "k1", "x"], [None, None, ims[4]]),
        (
            RerankRequest((ims[3], ims[5]), ("r0", "r1"), "The <img1> item in the colour of <img2>"),
            ["k2", "k0"],
            [None, None],
        ),
        (RerankRequest((ims[6],), ("r2",), "Same mug but not red"), ["k1"], [None]),
    ]
    batched = fresh.score_batch(items)
    alone = load_reranker("world-verifier", weights=str(judge_dir / "world_judge.safetensors"))
    pixels_of = {"k0": ims[0], "k1": ims[1], "k2": ims[2], "x": ims[4]}
    for (request, ids, _), scores in zip(items, batched):
        assert [s.candidate_id for s in scores] == ids
        for cid, s in zip(ids, scores):
            one = alone.score(request, [cid], [pixels_of[cid]])[0]
            assert s.logit_yes == pytest.approx(one.logit_yes, abs=1e-4)
            assert s.logit_no == pytest.approx(one.logit_no, abs=1e-4)
            if which == "near_judge_dir":
                assert s.p_near is not None and s.p_near == pytest.approx(one.p_near, abs=1e-5)
            else:
                assert s.p_near is None
    # the two-image query reads its second image: swapping it changes the answer
    swapped = alone.score(RerankRequest((ims[3], ims[7]), ("r0", "r9"), items[1][0].instruction), ["k2"], [ims[2]])
    assert abs(swapped[0].logit_yes - batched[1][0].logit_yes) > 1e-6


def test_a_batch_of_queries_met_again_reads_its_probes_and_scores_bit_for_bit(
    near_judge_dir, one_torch_thread, monkeypatch
):
    """Memo against no memo: the same batch of queries scored again (the next retriever's reranking, its
    per-query probes evicted meanwhile) reads the batch's probes and gives exactly the logits a fresh judge
    computes; a different batch of the same queries is encoded afresh."""

    def judge_with_counter():
        judge = load_reranker("world-verifier", weights=str(near_judge_dir / "world_judge.safetensors"))
        ims = _images(6, seed=4)
        judge.use_image_embeddings(["k0", "k1", "k2"], judge.encode_images(ims[:3]), remember_ids=["r0", "r1"])
        encode, calls = judge._encode_probes, []
        monkeypatch.setattr(judge, "_encode_probes", lambda reqs: calls.append(len(reqs)) or encode(reqs))
        items = [
            (RerankRequest((ims[3],), ("r0",), "Same mug but not red"), ["k0", "k1"], [None, None]),
            (RerankRequest((ims[3], ims[4]), ("r0", "r1"), "The <img1> item in the colour of <img2>"), ["k2"], [None]),
            (RerankRequest((ims[4],), ("r1",), "Same mug but in blue"), ["k1", "k2"], [None, None]),
        ]
        return judge, items, calls

    judge, items, calls = judge_with_counter()
    first = judge._logits(items)
    judge._probes.clear()  # evicted per query, as a pass over more queries than the memo holds does
    again = judge._logits(items)
    assert calls == [3] and np.array_equal(first, again)
    fresh_judge, _, _ = judge_with_counter()
    assert np.array_equal(fresh_judge._logits(items), first)  # the oracle: the batch computed afresh
    judge._probes.clear()
    judge._logits(items[:2])
    assert calls == [3, 2]


def test_two_lanes_give_one_lanes_bits_when_the_second_chunk_is_scored_first(one_torch_thread):
    """Lanes against one lane, with the committed judge: two chunks of queries that share a reference
    (r0), the first chunk's lane held until the second chunk's lane has scored, give every pair exactly
    the logits and P(near miss) of one lane on a fresh judge (the oracle). r0 is encoded alone with the
    first chunk and beside two other references with the second, which gives its features other last
    bits (checked first): a judge that encodes a shared reference with whichever batch reaches it first
    gives r0, and every probe built on it, the second chunk's bits here."""
    import threading
    from types import SimpleNamespace

    from cir_demo.rerank import rerank_run

    ims = _images(7, seed=9)
    pictures = dict(zip(["k0", "k1", "k2", "r0", "r2", "r3"], ims))
    judge = load_reranker("world-verifier")  # encode_images keeps nothing: the one-lane run's fresh judge too
    alone, beside = judge.encode_images([pictures["r0"]])[0], judge.encode_images([ims[4], ims[3], ims[5]])[1]
    assert not np.array_equal(alone, beside)  # what makes the order tell
    queries = [  # chunks of two: [q0 q1] [q2 q3]
        SimpleNamespace(query_id="q0", reference_ids=("r0",), instruction="Same mug but in blue"),
        SimpleNamespace(query_id="q1", reference_ids=("r0",), instruction="Same mug but not red"),
        SimpleNamespace(
            query_id="q2", reference_ids=("r2", "r0"), instruction="The <img1> item in the colour of <img2>"
        ),
        SimpleNamespace(query_id="q3", reference_ids=("r3",), instruction="Same mug but in green"),
    ]
    run = {q.query_id: ["k0", "k1", "k2"] for q in queries}

    def rerank(judge, lanes: int, second_first: bool):
        judge.use_image_embeddings(["k0", "k1", "k2"], judge.encode_images(ims[:3]), remember_ids=["r0", "r2", "r3"])
        done, order, score_batch = threading.Event(), [], judge.score_batch

        def held(items):
            first = items[0][0].reference_ids == ("r0",)
            if first and second_first:
                assert done.wait(60), "the second chunk's lane never scored"
            out = score_batch(items)
            order.append("first" if first else "second")
            done.set()
            return out

        judge.score_batch = held
        ranked = rerank_run(
            queries, run, pictures.__getitem__, judge, top_n=3, progress=False, chunk_size=2, lanes=lanes
        )
        return {
            q: [(it.candidate_id, it.logit_yes, it.logit_no, it.p_near) for it in its]
            for q, its in ranked.items.items()
        }, order

    one, one_order = rerank(judge, 1, second_first=False)
    two, two_order = rerank(load_reranker("world-verifier"), 2, second_first=True)
    assert one_order == ["first", "second"] and two_order == ["second", "first"]
    assert all(p is not None for its in one.values() for _, *p in its)
    assert two == one


def test_remembered_references_are_encoded_once_across_reranking_passes(near_judge_dir, one_torch_thread, monkeypatch):
    """References named by `remember` (another split's, added after the corpus table) are encoded on
    first use and then read back; an id never named is encoded on every pass (it may be an upload)."""
    judge = load_reranker("world-verifier", weights=str(near_judge_dir / "world_judge.safetensors"))
    ims = _images(5, seed=6)
    judge.use_image_embeddings(["k0", "k1"], judge.encode_images(ims[:2]), remember_ids=["r0"])
    judge.remember(["r1"])
    encode, encoded = judge.encode_images, []
    monkeypatch.setattr(judge, "encode_images", lambda images, **kw: encoded.append(len(images)) or encode(images))
    for instruction in ("Same mug but blue", "Same mug but red"):  # two passes, different queries
        for ref, image in (("r1", ims[2]), ("rX", ims[3])):
            judge._probes.clear()
            judge.score(RerankRequest((image,), (ref,), instruction), ["k0", "k1"], [None, None])
    assert encoded == [1, 1, 1]  # r1 once; rX (never remembered) on each of its two queries
    assert "r1" in judge._remembered and "rX" not in judge._remembered


def test_near_miss_answer_matches_the_training_path_and_orders_the_rerank(near_judge_dir, one_torch_thread):
    """The served (yes, no, near) logits equal the model's training path (`forward` on features),
    and `rerank` orders the top block by P(yes) - penalty * P(near), computed here by hand."""
    from cir_demo.rerank import rerank

    judge = load_reranker("world-verifier", weights=str(near_judge_dir / "world_judge.safetensors"))
    assert judge.near_miss_penalty == NEAR_PENALTY and judge.spec["near_miss_penalty"] == NEAR_PENALTY
    ims = _images(7, seed=3)
    request = RerankRequest((ims[0],), ("ref",), "Same item but with <img1> in blue")
    ids = [f"c{i}" for i in range(6)]
    scores = judge.score(request, ids, ims[1:])
    feats = torch.from_numpy(judge.encode_images(ims))
    words = judge._words([request.instruction])
    with torch.inference_mode():
        logits = judge.model(
            feats[:1].expand(6, -1),
            feats[:1].expand(6, -1),
            torch.zeros(6, dtype=torch.bool),
            words.expand(6, -1),
            feats[1:],
        ).numpy()
    assert logits.shape == (6, 3)
    for s, (ly, ln, lnear) in zip(scores, logits):
        assert s.logit_yes - s.logit_no == pytest.approx(float(ly - ln), abs=1e-4)
        assert s.p_near == pytest.approx(1 / (1 + math.exp(-float(lnear))), abs=1e-5)
    items = rerank(request, ids, None, lambda i: ims[1 + ids.index(i)], judge, top_n=6)
    key = {s.candidate_id: (s.p_yes - NEAR_PENALTY * s.p_near) for s in scores}
    by_p_yes = sorted(ids, key=lambda c: -next(s.p_yes for s in scores if s.candidate_id == c))
    assert by_p_yes != sorted(ids, key=lambda c: -key[c])  # the case tells the two orders apart
    assert [it.candidate_id for it in items] == sorted(ids, key=lambda c: -key[c])
    assert all(
        it.p_near == pytest.approx(next(s.p_near for s in scores if s.candidate_id == it.candidate_id)) for it in items
    )


def test_first_stage_rank_weight_from_the_manifest_orders_the_rerank(tmp_path, one_torch_thread):
    """A manifest's `ranking.first_stage_rank_weight` is served: the spec names it and `rerank` orders
    by P(yes) - penalty * P(near) - w * first-stage rank, computed here by hand; a bad value is refused."""
    from cir_demo.rerank import rerank

    weight = 0.05
    (tmp_path / "ranked").mkdir(), (tmp_path / "bad").mkdir()
    folder = _save_judge(
        tmp_path / "ranked", TINY_NEAR, {"near_miss_penalty": NEAR_PENALTY, "first_stage_rank_weight": weight}
    )
    judge = load_reranker("world-verifier", weights=str(folder / "world_judge.safetensors"))
    assert judge.spec["first_stage_rank_weight"] == weight and "first-stage rank" in judge.spec["ranking"]
    ims = _images(9, seed=4)
    request = RerankRequest((ims[0],), ("ref",), "Same item but with <img1> in red")
    ids = [f"c{i}" for i in range(8)]
    scores = {s.candidate_id: s for s in judge.score(request, ids, ims[1:])}
    key = {c: scores[c].p_yes - NEAR_PENALTY * scores[c].p_near - weight * r for r, c in enumerate(ids)}
    items = rerank(request, ids, None, lambda i: ims[1 + ids.index(i)], judge, top_n=8)
    assert [it.candidate_id for it in items] == sorted(ids, key=lambda c: -key[c])
    bad = _save_judge(tmp_path / "bad", TINY_NEAR, {"first_stage_rank_weight": -1})
    with pytest.raises(ValueError, match=r"ranking.first_stage_rank_weight.*>= 0"):
        load_reranker("world-verifier", weights=str(bad / "world_judge.safetensors"))


def test_damaged_weights_name_the_file_and_the_fix(judge_dir, tmp_path):
    bad = tmp_path / "judge"
    shutil.copytree(judge_dir, bad)
    with open(bad / "world_judge.safetensors", "r+b") as f:
        f.truncate(100)
    with pytest.raises(ValueError, match=r"damaged: .*world_judge.safetensors: .*git checkout"):
        load_reranker("world-verifier", weights=str(bad / "world_judge.safetensors"))


def test_calibration_recovers_temperature_and_bias_and_folds_into_the_head():
    from cir_demo.training.world_judge import calibrate, fold_calibration

    rng = np.random.default_rng(0)
    margins = rng.normal(0, 3, 20000)
    labels = (rng.random(20000) < 1 / (1 + np.exp(-(margins / 2.0 - 0.5)))).astype(float)
    t, b = calibrate(margins, labels)
    assert t == pytest.approx(2.0, rel=0.1) and b == pytest.approx(-0.5, abs=0.1)
    torch.manual_seed(0)
    model = build_judge(TINY).eval()
    x = torch.randn(5, TINY.width)
    before = model.head(model.head_norm(x))
    fold_calibration(model, 2.0, -0.5)
    after = model.head(model.head_norm(x))
    torch.testing.assert_close(after[:, 0] - after[:, 1], (before[:, 0] - before[:, 1]) / 2.0 - 0.5)


def test_reliability_table_by_hand():
    from cir_demo.training.judge_eval import reliability

    p = np.array([0.05, 0.15, 0.95, 0.92, 0.5])
    y = np.array([0, 1, 1, 1, 0])
    table = reliability(p, y, bins=10)
    by_bin = {row["bin"]: row for row in table["bins"]}
    assert by_bin["0.0-0.1"]["n"] == 1 and by_bin["0.9-1.0"]["n"] == 2 and by_bin["0.5-0.6"]["n"] == 1
    expected = (abs(0.05 - 0) + abs(0.15 - 1) + 2 * abs(0.935 - 1) + abs(0.5 - 0)) / 5
    assert table["ece"] == pytest.approx(expected, abs=1e-4)


# --------------------------------------------------------------------------- pixels and words only
INFERENCE_MODULES = (
    "cir_demo/models/world_judge.py",
    "cir_demo/models/preprocess.py",
    "cir_demo/rerank/world_verifier.py",
)
FORBIDDEN = ("cir_demo.world", "cir_demo.training", "cir_demo.benchmarks", "cir_demo.metrics")


def test_inference_modules_import_no_scene_graph_or_judgment_code():
    for rel in INFERENCE_MODULES:
        tree = ast.parse((REPO_ROOT / rel).read_text(encoding="utf-8"))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        bad = [m for m in names if m.startswith(FORBIDDEN)]
        assert not bad, f"{rel} imports {bad}"


def test_scoring_loads_no_scene_graph_or_judgment_module(judge_dir):
    """Load and score in a fresh interpreter; the world, training, benchmark and metric packages
    (scene graphs, judgments) must never be imported, nor open_clip or torchvision (the model-input
    pixels are PIL's: `cir_demo.models.preprocess.shortest_resize_crop`; importing them would cost
    every process that reranks)."""
    code = f"""
import sys
import numpy as np
from PIL import Image
from cir_demo.rerank import RerankRequest, load_reranker
r = load_reranker("world-verifier", weights={str(judge_dir / "world_judge.safetensors")!r})
ims = [Image.fromarray(np.full((160, 160, 3), v, np.uint8)) for v in (10, 120, 240)]
s = r.score(RerankRequest((ims[0],), ("a",), "Same dress but blue"), ["b", "c"], ims[1:])
assert len(s) == 2 and all(0.0 <= x.p_yes <= 1.0 for x in s)
bad = sorted(m for m in sys.modules if m.startswith({FORBIDDEN!r}))
print("LOADED", bad)
print("HEAVY", sorted(m for m in ("open_clip", "torchvision", "torch._dynamo") if m in sys.modules))
"""
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LOADED []" in out.stdout, out.stdout
    assert "HEAVY []" in out.stdout, out.stdout


def test_world_verifier_files_are_listed_in_the_committed_manifest():
    manifest_path = Path(REPO_ROOT / "assets/world-verifier/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    assert set(manifest["files"]) == {"world_judge.safetensors", "tokenizer/tokenizer.json"}
    assert JudgeArch.from_json(manifest["architecture"]).feat_dim > 0
