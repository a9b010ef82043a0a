"""Recipes vs hand computations; marker rendering; spec hashing; post-merge vs brute force."""

import math

import numpy as np
import pytest

from cir_demo.retrievers import recipes
from cir_demo.retrievers.base import ComposedQuery, render_markers, spec_hash

E1 = np.array([1.0, 0.0, 0.0])
E2 = np.array([0.0, 1.0, 0.0])


def test_image_and_text_only_normalise():
    np.testing.assert_allclose(recipes.image_only(np.array([3.0, 4.0])), [0.6, 0.8], atol=1e-7)
    np.testing.assert_allclose(recipes.text_only(np.array([[0.0, -2.0]])), [[0.0, -1.0]], atol=1e-7)


def test_early_fusion_orthogonal_by_hand():
    # 0.2 * e1 + 0.8 * e2, renormalised by sqrt(0.04 + 0.64)
    out = recipes.early_fusion(5 * E1, 2 * E2, text_weight=0.8)
    n = math.sqrt(0.2**2 + 0.8**2)
    np.testing.assert_allclose(out, [0.2 / n, 0.8 / n, 0.0], atol=1e-7)
    # inputs are normalised first: scaling either input changes nothing
    np.testing.assert_allclose(recipes.early_fusion(E1, E2, 0.8), out, atol=1e-7)


def test_early_fusion_endpoints_and_batch():
    img = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    txt = np.array([[0.0, 3.0, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(recipes.early_fusion(img, txt, 0.0), recipes.l2_normalize(img), atol=1e-7)
    np.testing.assert_allclose(recipes.early_fusion(img, txt, 1.0), recipes.l2_normalize(txt), atol=1e-7)
    with pytest.raises(ValueError, match="text_weight"):
        recipes.early_fusion(img, txt, 1.5)


def test_early_fusion_cancelling_inputs_is_an_error():
    with pytest.raises(ValueError, match="cancel"):
        recipes.early_fusion(E1, -E1, 0.5)


def test_slerp_orthogonal_by_hand():
    # angle pi/2: slerp(t) = cos(t*pi/2) e1 + sin(t*pi/2) e2
    for t in (0.0, 0.25, 0.5, 0.8, 1.0):
        out = recipes.slerp(2 * E1, 3 * E2, t)
        np.testing.assert_allclose(out, [math.cos(t * math.pi / 2), math.sin(t * math.pi / 2), 0.0], atol=1e-7)


def test_slerp_endpoints_general_vectors():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 8)), rng.normal(size=(4, 8))
    np.testing.assert_allclose(recipes.slerp(a, b, 0.0), recipes.l2_normalize(a), atol=1e-6)
    np.testing.assert_allclose(recipes.slerp(a, b, 1.0), recipes.l2_normalize(b), atol=1e-6)
    # the interpolant's angle to a is t * omega (constant speed along the arc)
    an, bn = recipes.l2_normalize(a).astype(np.float64), recipes.l2_normalize(b).astype(np.float64)
    omega = np.arccos(np.sum(an * bn, axis=1))
    mid = recipes.slerp(a, b, 0.3).astype(np.float64)
    np.testing.assert_allclose(np.arccos(np.clip(np.sum(mid * an, axis=1), -1, 1)), 0.3 * omega, atol=1e-5)


def test_slerp_near_parallel_is_stable_and_close_to_inputs():
    a = np.array([1.0, 0.0, 0.0])
    for eps in (0.0, 1e-9, 1e-6, 1e-3):
        b = np.array([1.0, eps, 0.0])
        out = recipes.slerp(a, b, 0.5)
        assert np.all(np.isfinite(out))
        assert abs(np.linalg.norm(out) - 1) < 1e-6
        # halfway on the arc: angle eps/2 from a (to first order)
        expected = recipes.l2_normalize(np.array([1.0, eps / 2, 0.0]))
        np.testing.assert_allclose(out, expected, atol=1e-7)


def test_slerp_opposite_vectors_error():
    with pytest.raises(ValueError, match="opposite"):
        recipes.slerp(E1, -E1, 0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        recipes.slerp(E1, E2, -0.1)


def test_mean_of_references_two_images_by_hand():
    out = recipes.mean_of_references([4 * E1, 0.5 * E2])
    np.testing.assert_allclose(out, [1 / math.sqrt(2), 1 / math.sqrt(2), 0.0], atol=1e-7)
    # one reference: just normalised
    np.testing.assert_allclose(recipes.mean_of_references([np.array([0.0, 2.0])]), [0.0, 1.0])
    with pytest.raises(ValueError, match="cancel"):
        recipes.mean_of_references([E1, -E1])
    with pytest.raises(ValueError, match="at least one"):
        recipes.mean_of_references([])


def test_l2_normalize_zero_row_names_row():
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        recipes.l2_normalize(np.array([[1.0, 0.0], [0.0, 0.0]]))


def test_mean_of_texts_matches_manual():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 4, 5))
    expected = np.stack([recipes.l2_normalize(recipes.l2_normalize(x[i]).mean(axis=0)) for i in range(3)])
    np.testing.assert_allclose(recipes.mean_of_texts(x), expected, atol=1e-6)


def test_postmerge_max_equals_brute_force_full_corpus():
    rng = np.random.default_rng(2)
    n_images, n_variants, k = 40, 3, 7
    scores = rng.normal(size=(n_variants, n_images))
    ids = [f"img{i}" for i in range(n_images)]
    per_variant = []
    for v in range(n_variants):
        top = np.argsort(-scores[v], kind="stable")[:k]
        per_variant.append(([ids[i] for i in top], scores[v][top].tolist()))
    merged_ids, merged_scores = recipes.postmerge_max(per_variant, k)
    brute = recipes.postmerge_scores(scores[None], "max")[0]
    top = np.argsort(-brute, kind="stable")[:k]
    assert merged_ids == [ids[i] for i in top]
    np.testing.assert_allclose(merged_scores, brute[top], atol=1e-6)


def test_postmerge_max_ties_keep_first_seen_order():
    ids, scores = recipes.postmerge_max([(["a", "b"], [1.0, 0.5]), (["c", "b"], [1.0, 0.9])], 3)
    assert ids == ["a", "c", "b"] and scores == [1.0, 1.0, 0.9]


def test_recipe_params_strict():
    assert recipes.recipe_params("slerp", None) == {"t": 0.8}
    assert recipes.recipe_params("early_fusion", {"text_weight": 0.5}) == {"text_weight": 0.5}
    with pytest.raises(ValueError, match="unknown"):
        recipes.recipe_params("slerp", {"text_weight": 0.5}, where="cfg.json")
    with pytest.raises(KeyError, match="Did you mean 'slerp'"):
        recipes.recipe_params("slurp", None)


@pytest.mark.parametrize(
    "text,style,expected",
    [
        (
            "Put the hat from <img1> on the dog in <img2>.",
            "words",
            "Put the hat from the first image on the dog in the second image.",
        ),
        ("Put <IMG1> next to < img2 >", "strip", "Put next to"),
        ("keep <img1>", "keep", "keep <img1>"),
        ("no markers here", "words", "no markers here"),
    ],
)
def test_render_markers(text, style, expected):
    assert render_markers(text, style) == expected


def test_composed_query_validation():
    from PIL import Image

    img = Image.new("RGB", (4, 4))
    with pytest.raises(ValueError, match="1 or 2"):
        ComposedQuery((), "x")
    with pytest.raises(ValueError, match="reference_ids"):
        ComposedQuery((img,), "x", reference_ids=("a", "b"))
    q = ComposedQuery([img, img], "x", "q1", ["a", "b"])
    assert isinstance(q.reference_images, tuple) and q.reference_ids == ("a", "b")


def test_spec_hash_canonical_and_ignores_versions():
    a = {"family": "open_clip", "params": {"t": 0.8, "x": 1}, "versions": {"torch": "1"}}
    b = {"params": {"x": 1, "t": 0.8}, "family": "open_clip", "versions": {"torch": "2"}}
    assert spec_hash(a) == spec_hash(b)
    assert spec_hash(a) != spec_hash({**a, "params": {"t": 0.7, "x": 1}})


def test_encode_in_batches_encodes_repeats_once_and_equals_naive():
    import numpy as np

    from cir_demo.retrievers.dual_encoder import encode_in_batches

    calls = []

    def encode(batch):
        calls.append(list(batch))
        rows = [np.array([1.0, len(x), 0.0] if isinstance(x, str) else [1.0, 0.0, x[0]], np.float32) for x in batch]
        return np.stack([r / np.linalg.norm(r) for r in rows])

    a, b = [1.0], [2.0]  # image stand-ins: repeats are the same object
    items = [a, "xy", b, a, "xy", "xyz", [1.0]]  # [1.0]: equal value, different object -> encoded again
    out = encode_in_batches(items, encode, 2, 3, "test")
    naive = np.concatenate([encode([x]) for x in items])
    np.testing.assert_array_equal(out, naive)
    assert sum(len(c) for c in calls[: -len(items)]) == 5  # a, "xy", b, "xyz", the second [1.0]
