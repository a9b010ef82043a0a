"""Inner-product nearest-neighbour search over L2-normalised embeddings.

Vocabulary follows faiss: `xb` the database (corpus) vectors, `xq` the query
vectors, `k` the number of neighbours, `D` the scores and `I` the row indexes
into `xb`, both of shape (nq, k), best first.

Three index kinds:
- "flat": `IndexFlatIP`, exact (the default; fine up to a few hundred thousand images).
- "ivf": `IndexIVFFlat` (params `nlist`, `nprobe`, `train_size`), approximate.
- "hnsw": `IndexHNSWFlat` (params `M`, `efConstruction`, `efSearch`), approximate.
Measure an approximate index against "flat" with `recall_at_k` (bench/bench_index.py).

When fewer than `k` results exist (k > ntotal, or an approximate index that
visits too few vectors) rows are padded with I = -1 and D = -inf; callers strip
the padding (`LoadedIndex.search` does).

faiss is imported inside functions only, so importing this module stays cheap.
"""
from __future__ import annotations

from typing import Any

import numpy as np

INDEX_KINDS = ("flat", "ivf", "hnsw")

# Parameters each kind accepts, with defaults. None = derived from the data size.
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "flat": {},
    "ivf": {"nlist": None, "nprobe": None, "train_size": None},
    "hnsw": {"M": 32, "efConstruction": 80, "efSearch": 128},
}

# Queries per faiss call: bounds the (chunk, ntotal) score block faiss keeps in memory.
_SEARCH_CHUNK = 4096
# Score-matrix elements per brute-force chunk (~128 MiB of float64).
_BRUTE_FORCE_BLOCK = 1 << 24


def as_vectors(x: np.ndarray, what: str, dim: int | None = None) -> np.ndarray:
    """`x` as a C-contiguous float32 (n, d) array; bad shapes and non-finite values are errors."""
    arr = np.asarray(x)
    if arr.ndim == 1 and dim is not None and arr.shape[0] == dim:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D array (n, d), got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{what}: expected dimension {dim}, got {arr.shape[1]}")
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{what}: expected numbers, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(arr).all():
        rows = np.flatnonzero(~np.isfinite(arr).all(axis=1))[:5].tolist()
        raise ValueError(f"{what}: non-finite values in rows {rows}")
    return arr


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)


def resolve_params(kind: str, n: int, **params) -> dict[str, Any]:
    """The full parameter set of an index kind for `n` vectors (defaults filled in)."""
    if kind not in DEFAULT_PARAMS:
        raise ValueError(f"unknown index kind {kind!r}; choose one of {', '.join(INDEX_KINDS)}")
    unknown = sorted(set(params) - set(DEFAULT_PARAMS[kind]))
    if unknown:
        allowed = ", ".join(DEFAULT_PARAMS[kind]) or "none"
        raise ValueError(f"index kind {kind!r} takes no parameter(s) {', '.join(unknown)} (allowed: {allowed})")
    out = {**DEFAULT_PARAMS[kind], **{k: v for k, v in params.items() if v is not None}}
    if kind == "ivf":
        # faiss guidance: nlist ~ 4 sqrt(n), at least ~39 training points per list.
        if out["nlist"] is None:
            out["nlist"] = int(max(1, min(4 * round(np.sqrt(n)), n // 39)))
        if out["nprobe"] is None:
            out["nprobe"] = max(1, min(out["nlist"], out["nlist"] // 8))
        if out["train_size"] is None:
            out["train_size"] = int(min(n, 64 * out["nlist"]))
    for name, value in out.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"index kind {kind!r}: parameter {name} must be a positive integer, got {value!r}")
        out[name] = int(value)
    if kind == "ivf":
        if out["nlist"] > n:
            raise ValueError(f"index kind 'ivf': nlist={out['nlist']} exceeds the {n} vectors to train on")
        if out["train_size"] < out["nlist"]:
            raise ValueError(f"index kind 'ivf': train_size={out['train_size']} < nlist={out['nlist']}")
        out["nprobe"] = min(out["nprobe"], out["nlist"])
        out["train_size"] = min(out["train_size"], n)
    return out


def build_index(xb: np.ndarray, kind: str = "flat", **params):
    """An inner-product faiss index holding `xb` (rows should be L2-normalised).

    flat: exact. ivf: `nlist` lists (default ~4 sqrt(n)), `nprobe` lists visited
    per query, k-means trained on an evenly spaced sample of `train_size` rows.
    hnsw: graph with `M` links per node, `efConstruction`, `efSearch`.
    """
    import faiss

    xb = as_vectors(xb, "xb")
    n, d = xb.shape
    if kind not in INDEX_KINDS:
        raise ValueError(f"unknown index kind {kind!r}; choose one of {', '.join(INDEX_KINDS)}")
    if kind != "flat" and n == 0:
        raise ValueError(f"index kind {kind!r} needs at least one vector to build")
    p = resolve_params(kind, n, **params)
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif kind == "ivf":
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFFlat(quantizer, d, p["nlist"], faiss.METRIC_INNER_PRODUCT)
        # Evenly spaced rows: deterministic, and covers a corpus sorted by source.
        sample = xb[np.linspace(0, n - 1, p["train_size"]).round().astype(np.int64)]
        index.cp.seed = 1234
        index.train(sample)
        index.nprobe = p["nprobe"]
    else:
        index = faiss.IndexHNSWFlat(d, p["M"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = p["efConstruction"]
        index.hnsw.efSearch = p["efSearch"]
    if n:
        index.add(xb)
    return index


def index_kind(index) -> str:
    """"flat", "ivf" or "hnsw" for an index built by `build_index` (or read back from disk)."""
    import faiss

    inner = faiss.downcast_index(index)
    if isinstance(inner, faiss.IndexHNSW):
        return "hnsw"
    if isinstance(inner, faiss.IndexIVF):
        return "ivf"
    if isinstance(inner, faiss.IndexFlat):
        return "flat"
    raise ValueError(f"unsupported faiss index type {type(inner).__name__}")


def set_search_params(index, **params) -> None:
    """Change query-time parameters (`nprobe` for ivf, `efSearch` for hnsw) in place."""
    import faiss

    inner = faiss.downcast_index(index)
    for name, value in params.items():
        if name == "nprobe" and isinstance(inner, faiss.IndexIVF):
            inner.nprobe = int(value)
        elif name == "efSearch" and isinstance(inner, faiss.IndexHNSW):
            inner.hnsw.efSearch = int(value)
        else:
            raise ValueError(f"{type(inner).__name__} has no search parameter {name!r}")


def _pad(D: np.ndarray, I: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """faiss pads missing results with -FLT_MAX; report them as -inf next to I = -1."""
    D = D.copy()
    D[I < 0] = -np.inf
    return D, I


def search(index, xq: np.ndarray, k: int, chunk: int = _SEARCH_CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """Top-`k` (D, I) for every row of `xq`, in query chunks; shape (nq, k), padded with -1/-inf."""
    k = _check_k(k)
    xq = as_vectors(xq, "xq", dim=index.d)
    nq = xq.shape[0]
    D = np.full((nq, k), -np.inf, dtype=np.float32)
    I = np.full((nq, k), -1, dtype=np.int64)
    k_eff = min(k, int(index.ntotal))
    if k_eff == 0 or nq == 0:
        return D, I
    for start in range(0, nq, chunk):
        stop = min(nq, start + chunk)
        d_chunk, i_chunk = index.search(xq[start:stop], k_eff)
        D[start:stop, :k_eff], I[start:stop, :k_eff] = _pad(d_chunk, i_chunk)
    return D, I


def _top_k_rows(S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of each row of a score block; ties broken by lower column index first."""
    b, n = S.shape
    kth = np.partition(S, n - k, axis=1)[:, n - k][:, None]  # the k-th largest score per row
    above = S > kth
    need = k - above.sum(axis=1, keepdims=True)
    at = S == kth
    if np.array_equal(at.sum(axis=1, keepdims=True), need):
        take = above | at  # the usual case: no tie straddles the k-th place
    else:  # among scores equal to the k-th, keep the lowest column indexes
        take = above | (at & (np.cumsum(at, axis=1, dtype=np.int32) <= need))
    cols = np.nonzero(take)[1].reshape(b, k)  # ascending column order per row
    vals = np.take_along_axis(S, cols, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")  # stable: equal scores keep index order
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(cols, order, axis=1)


def brute_force_search(xq: np.ndarray, xb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact NumPy reference: (D, I) by full inner products, ties in index order.

    Scores are float64 dot products rounded to float32; equal scores are
    ordered by ascending row index of `xb`.

    Same output convention as `search` (padding with -1/-inf when k > len(xb)).
    """
    k = _check_k(k)
    xb = as_vectors(xb, "xb")
    xq = as_vectors(xq, "xq", dim=xb.shape[1])
    nq, n = xq.shape[0], xb.shape[0]
    D = np.full((nq, k), -np.inf, dtype=np.float32)
    I = np.full((nq, k), -1, dtype=np.int64)
    k_eff = min(k, n)
    if k_eff == 0 or nq == 0:
        return D, I
    # float64 products rounded to float32: identical vectors get identical scores
    # (a float32 GEMM rounds differently by column position and breaks exact ties).
    xb64 = xb.astype(np.float64)
    rows = max(1, _BRUTE_FORCE_BLOCK // max(n, 1))
    for start in range(0, nq, rows):
        stop = min(nq, start + rows)
        S = (xq[start:stop].astype(np.float64) @ xb64.T).astype(np.float32)
        D[start:stop, :k_eff], I[start:stop, :k_eff] = _top_k_rows(S, k_eff)
    return D, I


def recall_at_k(I_approx: np.ndarray, I_exact: np.ndarray, k: int) -> float:
    """Mean over queries of |top-k approx ∩ top-k exact| / |top-k exact| (padding -1 ignored).

    Queries whose exact list is empty are skipped; 1.0 means the approximate
    index found every exact neighbour.
    """
    k = _check_k(k)
    I_approx, I_exact = np.asarray(I_approx), np.asarray(I_exact)
    if I_approx.ndim != 2 or I_exact.ndim != 2 or I_approx.shape[0] != I_exact.shape[0]:
        raise ValueError(f"I_approx {I_approx.shape} and I_exact {I_exact.shape} must be (nq, k) with equal nq")
    total, counted = 0.0, 0
    for approx_row, exact_row in zip(I_approx[:, :k], I_exact[:, :k]):
        exact = set(exact_row[exact_row >= 0].tolist())
        if not exact:
            continue
        found = set(approx_row[approx_row >= 0].tolist())
        total += len(exact & found) / len(exact)
        counted += 1
    return total / counted if counted else float("nan")


def write_index(index, path) -> None:
    """Write a faiss index to `path` (the caller makes it atomic)."""
    import faiss

    faiss.write_index(index, str(path))


def read_index(path):
    import faiss

    return faiss.read_index(str(path))
