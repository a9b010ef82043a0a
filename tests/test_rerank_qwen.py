"""Qwen2.5-VL reranker on a tiny random model built and saved here, loaded by path.

Oracle: a plain full-sequence forward of `Qwen2_5_VLForConditionalGeneration`
(prefix + candidate + answer position in one pass, the model computing its own
mrope positions); the prefix-cached batched path must agree within 1e-4.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import torch

from PIL import Image

from cir_demo.rerank import RerankRequest, load_reranker
from cir_demo.testing.tiny_qwen import build_tiny_qwen2_5_vl

TOL = 1e-4
# The test model's processor resizes to exactly 56x56 (4 tokens); the reranker
# widens the range so candidates of different shapes get different token counts.
MIN_PIXELS, MAX_PIXELS = 28 * 28, 112 * 112


@pytest.fixture(scope="module", autouse=True)
def _threads(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("tiny_qwen"), size="test", seed=0)


@pytest.fixture(scope="module")
def reranker(tiny_dir):
    return load_reranker(
        "qwen2.5-vl", model=str(tiny_dir), device="cpu", batch_size=3, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS
    )


def noise_image(seed: int, h: int, w: int) -> Image.Image:
    return Image.fromarray(np.random.RandomState(seed).randint(0, 256, (h, w, 3), dtype=np.uint8))


# Different shapes -> different grids and token counts (4 to 16 tokens).
CANDIDATE_SHAPES = [(56, 56), (112, 112), (112, 56), (28, 112), (84, 84), (56, 56), (100, 30)]


def candidates(seed: int = 100):
    return [noise_image(seed + i, h, w) for i, (h, w) in enumerate(CANDIDATE_SHAPES)]


def oracle_logits(rr, request: RerankRequest, images) -> np.ndarray:
    """Full-sequence forward of the whole model per candidate; logits of the last position."""
    text = rr.chat_text(request)
    out = []
    with torch.inference_mode():
        for image in images:
            enc = rr.processor(text=[text], images=[*request.reference_images, image], return_tensors="pt")
            logits = rr.model(**enc).logits[0, -1]
            out.append([float(logits[rr.yes_id]), float(logits[rr.no_id])])
    return np.array(out)


def request_with(n_refs: int) -> RerankRequest:
    refs = [noise_image(1, 56, 56), noise_image(2, 84, 56)][:n_refs]
    text = "make it red like <img2>" if n_refs == 2 else "make it red"
    return RerankRequest(refs, [f"ref{i}" for i in range(n_refs)], text)


def test_candidates_really_have_different_token_counts(reranker):
    counts = {
        int(reranker.processor.image_processor(images=[im], return_tensors="pt")["image_grid_thw"].prod()) // 4
        for im in candidates()
    }
    assert len(counts) >= 3, counts


@pytest.mark.parametrize("n_refs", [1, 2])
def test_prefix_cached_batched_scores_equal_full_forward(reranker, n_refs):
    request = request_with(n_refs)
    images = candidates()
    expected = oracle_logits(reranker, request, images)
    cached = reranker.score_logits(request, images)
    assert cached.shape == (len(images), 2)
    np.testing.assert_allclose(cached, expected, atol=TOL, rtol=0)
    # The scores are not all alike, so equality above is informative.
    assert np.ptp(expected[:, 0] - expected[:, 1]) > 0.05


def test_one_by_one_path_equals_oracle(reranker):
    request = request_with(2)
    images = candidates(7)[:3]
    reranker.use_prefix_cache = False
    try:
        naive = reranker.score_logits(request, images)
    finally:
        reranker.use_prefix_cache = True
    np.testing.assert_allclose(naive, oracle_logits(reranker, request, images), atol=TOL, rtol=0)


def test_batch_size_does_not_change_scores(reranker):
    request = request_with(1)
    images = candidates(50)[:5]
    results = []
    for bs in (1, 2, 16):
        reranker.batch_size = bs
        results.append(reranker.score_logits(request, images))
    reranker.batch_size = 3
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], atol=TOL, rtol=0)


@pytest.mark.parametrize("bug", ["index_positions", "text_delta_positions"])
def test_wrong_candidate_positions_are_detected(reranker, monkeypatch, bug):
    """Negative control: the two usual mistakes (positions = token index, or the
    text-only rope delta of generation) change scores well beyond the tolerance,
    so the equality test above would catch them."""
    request = request_with(1)
    images = candidates(200)[:2]
    good = reranker.score_logits(request, images)
    core = reranker.model.model
    original = core.get_rope_index
    prefix_len = {}

    def broken(input_ids, **kw):
        pos, deltas = original(input_ids, **kw)
        if "n" not in prefix_len:  # first call: the prefix alone
            prefix_len["n"] = input_ids.shape[1]
            return pos, deltas
        p, total = prefix_len["n"], input_ids.shape[1]
        pos = pos.clone()
        start = p if bug == "index_positions" else int(pos[:, :, :p].max()) + 1
        pos[:, :, p:] = torch.arange(start, start + total - p)
        return pos, deltas

    monkeypatch.setattr(core, "get_rope_index", broken)
    wrong = reranker.score_logits(request, images)
    assert np.abs(wrong - good).max() > 100 * TOL


def test_score_returns_sigmoid_of_logit_difference(reranker):
    request = request_with(1)
    images = candidates(300)[:3]
    logits = reranker.score_logits(request, images)
    scores = reranker.score(request, ["a", "b", "c"], images)
    assert [s.candidate_id for s in scores] == ["a", "b", "c"]
    for s, (ly, ln) in zip(scores, logits):
        assert s.flag is None
        assert s.p_yes == pytest.approx(1 / (1 + math.exp(-(ly - ln))), abs=1e-9)
        assert (s.logit_yes, s.logit_no) == pytest.approx((ly, ln), abs=1e-9)
    assert reranker.score(request, [], []) == []
    with pytest.raises(ValueError, match="candidate ids"):
        reranker.score(request, ["a"], images)


def test_spec_and_prompt(reranker, tiny_dir):
    spec = reranker.spec
    assert spec["backend"] == "qwen2.5-vl" and spec["model"] == str(tiny_dir)
    assert spec["prompt"]["user"].count("{instruction}") == 1
    assert spec["image_pixels"] == {"min": MIN_PIXELS, "max": MAX_PIXELS}
    assert len(reranker.spec_hash()) == 16
    text = reranker.prompt_text(request_with(2))
    assert text.count("<|image_pad|>") == 3  # both references and the candidate
    assert "reference image 2" in text and "<img2>" not in text
    assert text.endswith("<|im_start|>assistant\n")


def test_true_false_tokens_and_token_checks(tiny_dir):
    rr = load_reranker("qwen2.5-vl", model=str(tiny_dir), device="cpu", yes_token="True", no_token="False")
    tok = rr.processor.tokenizer
    assert (rr.yes_id, rr.no_id) == (tok.convert_tokens_to_ids("True"), tok.convert_tokens_to_ids("False"))
    assert "'True' or 'False'" in rr.prompt_text(request_with(1))
    with pytest.raises(ValueError, match=r"yes token 'yes no' is 2 tokens"):
        load_reranker("qwen2.5-vl", model=str(tiny_dir), device="cpu", yes_token="yes no")
    with pytest.raises(ValueError, match=r"no token 'maybe' is unknown"):
        load_reranker("qwen2.5-vl", model=str(tiny_dir), device="cpu", no_token="maybe")
    with pytest.raises(ValueError, match="must differ"):
        load_reranker("qwen2.5-vl", model=str(tiny_dir), device="cpu", yes_token="no", no_token="no")


def test_weights_fingerprint_tracks_weights(tmp_path, tiny_dir):
    from cir_demo.rerank.qwen_vl import weights_fingerprint

    same = build_tiny_qwen2_5_vl(tmp_path / "same", size="test", seed=0)
    other = build_tiny_qwen2_5_vl(tmp_path / "other", size="test", seed=1)
    assert weights_fingerprint(same) == weights_fingerprint(tiny_dir)
    assert weights_fingerprint(other) != weights_fingerprint(tiny_dir)


def test_unknown_backend_suggests_names():
    from cir_demo.utils.names import UnknownNameError

    with pytest.raises(UnknownNameError, match="qwen2.5-vl"):
        load_reranker("qwen2.5vl")
