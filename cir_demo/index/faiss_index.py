"""Inner-product nearest-neighbour search over L2-normalised embeddings.

Vocabulary follows faiss: `xb` the database (corpus) vectors, `xq` the query
vectors, `k` the number of neighbours, `D` the scores and `I` the row indexes
into `xb`, both of shape (nq, k), best first.

The index kinds (flat, ivf, hnsw, ivf_hnsw, ivfpq) and their parameters are in `kinds.py`;
which kind a corpus gets by default is `choose.py`.
Measure an approximate index against "flat" with `recall_at_k` (bench/bench_index.py).

When fewer than `k` results exist (k > ntotal, or an approximate index that
visits too few vectors) rows are padded with I = -1 and D = -inf; callers strip
the padding (`LoadedIndex.search` does).

faiss is imported inside functions only, so importing this module stays cheap.
"""

from __future__ import annotations


import numpy as np

from cir_demo.index.kinds import INDEX_KINDS, factory_string, kind_of, resolve_params  # noqa: F401 (re-exported)

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


def build_index(xb: np.ndarray, kind: str = "flat", **params):
    """An inner-product faiss index holding `xb` (rows should be L2-normalised), built from the
    kind's `index_factory` string (`kinds.py`); IVF kinds train on an evenly spaced sample of
    `train_size` rows, with a fixed k-means seed."""
    import faiss

    xb = as_vectors(xb, "xb")
    n, d = xb.shape
    kind_of(kind)
    if kind != "flat" and n == 0:
        raise ValueError(f"index kind {kind!r} needs at least one vector to build")
    p = resolve_params(kind, n, d, **params)
    index = faiss.index_factory(d, factory_string(kind, p), faiss.METRIC_INNER_PRODUCT)
    if kind == "hnsw":
        faiss.downcast_index(index).hnsw.efConstruction = p["efConstruction"]
    if "train_size" in p:
        faiss.extract_index_ivf(index).cp.seed = 1234
        # Evenly spaced rows: deterministic, and covers a corpus sorted by source.
        index.train(xb[np.linspace(0, n - 1, p["train_size"]).round().astype(np.int64)])
    if n:  # before the search parameters: a wide quantiser beam would slow every assignment (~8x at 1M)
        index.add(xb)
    set_search_params(index, **{k: v for k, v in p.items() if k in kind_of(kind).search})
    return index


def index_kind(index) -> str:
    """The kind (`kinds.py`) of an index built by `build_index` (or read back from disk)."""
    import faiss

    inner = faiss.downcast_index(index)
    if isinstance(inner, faiss.IndexRefine):
        return "ivfpq"
    if isinstance(inner, faiss.IndexHNSW):
        return "hnsw"
    if isinstance(inner, faiss.IndexIVF):
        graph = isinstance(faiss.downcast_index(inner.quantizer), faiss.IndexHNSW)
        return "ivf_hnsw" if graph else "ivf"
    if isinstance(inner, faiss.IndexFlat):
        return "flat"
    raise ValueError(f"unsupported faiss index type {type(inner).__name__}")


def _set_one(index, name: str, value: int) -> bool:
    """Set one query-time parameter where the index (or the part of it that has it) takes it."""
    import faiss

    inner = faiss.downcast_index(index)
    if name == "k_factor" and isinstance(inner, faiss.IndexRefine):
        inner.k_factor = float(value)
        return True
    if isinstance(inner, faiss.IndexRefine):
        inner = faiss.downcast_index(inner.base_index)
    if name == "efSearch" and isinstance(inner, faiss.IndexHNSW):
        inner.hnsw.efSearch = int(value)
        return True
    if isinstance(inner, faiss.IndexIVF):
        if name == "nprobe":
            inner.nprobe = int(value)
            return True
        quantizer = faiss.downcast_index(inner.quantizer)
        if name == "quantizer_efSearch" and isinstance(quantizer, faiss.IndexHNSW):
            quantizer.hnsw.efSearch = int(value)
            return True
    return False


def set_search_params(index, **params) -> None:
    """Change query-time parameters (`nprobe`, `efSearch`, `quantizer_efSearch`, `k_factor`) in place."""
    import faiss

    for name, value in params.items():
        if not _set_one(index, name, value):
            raise ValueError(f"{type(faiss.downcast_index(index)).__name__} has no search parameter {name!r}")


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
