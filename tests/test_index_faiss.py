"""faiss search against exact oracles: brute-force NumPy, a naive full sort, hand-built ties."""

from __future__ import annotations

import numpy as np
import pytest

from cir_demo.index.faiss_index import (
    brute_force_search,
    build_index,
    index_kind,
    recall_at_k,
    resolve_params,
    search,
    set_search_params,
)


def unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def naive_top_k(xq: np.ndarray, xb: np.ndarray, k: int):
    """The slowest obviously-right reference: float64 scores, full sort by (-score, index)."""
    S = xq.astype(np.float64) @ xb.astype(np.float64).T
    I = np.array([sorted(range(xb.shape[0]), key=lambda j: (-row[j], j))[:k] for row in S])
    return np.take_along_axis(S, I, axis=1), I


def assert_valid_top_k(D, I, xq, xb, k, atol=1e-5):
    """Ties tolerated: I must be *a* correct top-k (per exact float64 scores), D its scores, best first."""
    S = xq.astype(np.float64) @ xb.astype(np.float64).T
    for q in range(xq.shape[0]):
        ids = I[q][I[q] >= 0]
        assert len(ids) == min(k, xb.shape[0])
        assert len(set(ids.tolist())) == len(ids), "duplicate ids in one result list"
        kth = np.sort(S[q])[::-1][len(ids) - 1]
        assert (S[q, ids] >= kth - atol).all(), f"query {q}: a returned id scores below the k-th best"
        np.testing.assert_allclose(D[q, : len(ids)], S[q, ids], atol=atol)
        assert (np.diff(D[q, : len(ids)]) <= atol).all(), "scores not best first"


def test_brute_force_equals_naive_sort_with_ties():
    xb = unit_rows(60, 8, 0)
    xb = np.concatenate([xb, xb[:20], xb[5:15]])  # exact duplicates -> exact score ties
    xq = np.concatenate([unit_rows(7, 8, 1), xb[:3]])
    for k in (1, 5, 17, 25, len(xb)):
        D, I = brute_force_search(xq, xb, k)
        D_ref, I_ref = naive_top_k(xq, xb, k)
        np.testing.assert_array_equal(I, I_ref)  # exact tie order: lower index first
        np.testing.assert_allclose(D, D_ref, atol=1e-6)


def test_brute_force_tie_across_the_kth_place_takes_lowest_indexes():
    xb = np.array([[1, 0], [0.6, 0.8], [0.6, 0.8], [0.6, 0.8], [0, 1]], dtype=np.float32)
    xq = np.array([[1, 0]], dtype=np.float32)
    D, I = brute_force_search(xq, xb, 3)
    assert I.tolist() == [[0, 1, 2]]
    np.testing.assert_allclose(D, [[1.0, 0.6, 0.6]], atol=1e-7)


@pytest.mark.parametrize("n,d,nq,k", [(1000, 32, 50, 10), (257, 16, 33, 1), (300, 24, 40, 300)])
def test_flat_search_equals_brute_force(n, d, nq, k):
    xb, xq = unit_rows(n, d, 2), unit_rows(nq, d, 3)
    D, I = search(build_index(xb, "flat"), xq, k)
    D_bf, I_bf = brute_force_search(xq, xb, k)
    assert_valid_top_k(D, I, xq, xb, k)
    np.testing.assert_allclose(D, D_bf, atol=1e-5)
    # Random data has no ties, so the id lists agree exactly.
    np.testing.assert_array_equal(I, I_bf)


def test_flat_search_with_exact_ties_is_a_valid_top_k():
    base = unit_rows(40, 8, 4)
    xb = np.repeat(base, 3, axis=0)  # every vector three times
    xq = unit_rows(25, 8, 5)
    D, I = search(build_index(xb), xq, 7)
    assert_valid_top_k(D, I, xq, xb, 7)
    D_bf, _ = brute_force_search(xq, xb, 7)
    np.testing.assert_allclose(D, D_bf, atol=1e-5)


def test_k_larger_than_ntotal_pads_with_minus_one():
    xb, xq = unit_rows(4, 6, 6), unit_rows(3, 6, 7)
    D, I = search(build_index(xb), xq, 10)
    D_bf, I_bf = brute_force_search(xq, xb, 10)
    assert I.shape == D.shape == (3, 10)
    assert (I[:, 4:] == -1).all() and np.isneginf(D[:, 4:]).all()
    assert (I_bf[:, 4:] == -1).all() and np.isneginf(D_bf[:, 4:]).all()
    assert_valid_top_k(D, I, xq, xb, 10)
    assert sorted(I[0, :4].tolist()) == [0, 1, 2, 3]


def test_empty_index_and_empty_queries():
    empty = build_index(np.zeros((0, 5), dtype=np.float32))
    D, I = search(empty, unit_rows(2, 5, 0), 3)
    assert (I == -1).all() and np.isneginf(D).all()
    D, I = search(build_index(unit_rows(5, 5, 0)), np.zeros((0, 5), dtype=np.float32), 3)
    assert D.shape == I.shape == (0, 3)


def test_search_in_chunks_equals_one_call():
    xb, xq = unit_rows(500, 16, 8), unit_rows(37, 16, 9)
    index = build_index(xb)
    D1, I1 = search(index, xq, 5)
    D2, I2 = search(index, xq, 5, chunk=4)
    np.testing.assert_array_equal(I1, I2)
    np.testing.assert_allclose(D1, D2, atol=1e-6)


def test_single_vector_query_is_accepted():
    xb = unit_rows(20, 8, 1)
    D, I = search(build_index(xb), xb[3], 1)
    assert I.tolist() == [[3]]


def test_exhaustive_ivf_and_hnsw_match_flat():
    xb, xq = unit_rows(2000, 16, 10), unit_rows(100, 16, 11)
    _, I_exact = brute_force_search(xq, xb, 10)
    ivf = build_index(xb, "ivf", nlist=16, nprobe=16)  # visiting every list = exhaustive
    assert index_kind(ivf) == "ivf"
    assert recall_at_k(search(ivf, xq, 10)[1], I_exact, 10) == 1.0
    hnsw = build_index(xb, "hnsw", M=16, efSearch=400)
    assert index_kind(hnsw) == "hnsw"
    assert recall_at_k(search(hnsw, xq, 10)[1], I_exact, 10) >= 0.99
    # Fewer probes can only lose neighbours, and the loss is what recall_at_k reports.
    set_search_params(ivf, nprobe=1)
    r1 = recall_at_k(search(ivf, xq, 10)[1], I_exact, 10)
    assert 0.0 < r1 < 1.0


def test_recall_at_k_hand_cases():
    exact = np.array([[0, 1, 2], [3, 4, 5], [6, -1, -1]])
    assert recall_at_k(exact, exact, 3) == 1.0
    approx = np.array([[2, 1, 9], [5, 7, 8], [6, -1, -1]])
    # query 0: 2/3, query 1: 1/3, query 2: 1/1
    assert recall_at_k(approx, exact, 3) == pytest.approx((2 / 3 + 1 / 3 + 1) / 3)
    assert recall_at_k(approx, exact, 1) == pytest.approx((0 + 0 + 1) / 3)
    assert np.isnan(recall_at_k(np.full((1, 3), -1), np.full((1, 3), -1), 3))


def test_bad_input_is_named():
    xb = unit_rows(10, 4, 0)
    with pytest.raises(ValueError, match="xb: expected a 2-D array"):
        build_index(np.zeros(4))
    with pytest.raises(ValueError, match="non-finite values in rows \\[2\\]"):
        build_index(np.where(np.arange(10)[:, None] == 2, np.nan, xb))
    with pytest.raises(ValueError, match="xq: expected dimension 4, got 3"):
        search(build_index(xb), np.zeros((1, 3)), 1)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        search(build_index(xb), xb, 0)
    with pytest.raises(ValueError, match="unknown index kind 'annoy'"):
        build_index(xb, "annoy")
    with pytest.raises(ValueError, match="takes no parameter\\(s\\) nprobe"):
        build_index(xb, "hnsw", nprobe=3)
    with pytest.raises(ValueError, match="nlist=50 exceeds the 10 vectors"):
        build_index(xb, "ivf", nlist=50)


def test_resolve_params_defaults():
    p = resolve_params("ivf", 109_600)
    assert p["nlist"] == 4 * round(np.sqrt(109_600)) and 1 <= p["nprobe"] <= p["nlist"]
    assert p["train_size"] == min(109_600, 64 * p["nlist"])
    assert resolve_params("ivf", 10)["nlist"] == 1  # tiny corpora: one list, still valid
    assert resolve_params("hnsw", 5, efSearch=7)["efSearch"] == 7
