"""The index kinds: each kind's parameters (with their defaults), its faiss `index_factory` string
and its query-time parameters, in one table instead of an if-chain.

| kind       | faiss index_factory string                   | exact | bytes per vector (d dims)    |
|------------|----------------------------------------------|-------|------------------------------|
| `flat`     | `Flat`                                       | yes   | 4d                           |
| `ivf`      | `IVF{nlist},Flat`                            | no    | 4d + 8                       |
| `hnsw`     | `HNSW{M},Flat`                               | no    | 4d + 8M                      |
| `ivf_hnsw` | `IVF{nlist}_HNSW{M},Flat`                    | no    | 4d + 8                       |
| `ivfpq`    | `IVF{nlist}_HNSW{M},PQ{pq_m}x4fs,RFlat`      | no    | 4d + pq_m/2 + 8              |
|            | (refine_bits 8: `...,Refine(SQ8)`)           |       | d + pq_m/2 + 8               |

`ivf_hnsw` and `ivfpq` find the `nprobe` nearest of `nlist` lists with an HNSW graph over the list
centroids (`quantizer_efSearch`) instead of comparing the query with every centroid. `ivfpq` scans
4-bit product-quantised codes (SIMD "fast scan") and re-ranks the best `k_factor * k` (16k)
candidates by their exact inner products (`refine_bits` 32: the float32 vectors; 8: 8-bit
scalar-quantised): with 4k, recall@10 stopped at 0.905 at 1M however many lists were visited.
`ivf` and `hnsw` keep the defaults they always had, so indexes built with them rebuild the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

# Query-time parameters, by the name faiss's ParameterSpace gives them.
SEARCH_PARAMS = ("nprobe", "efSearch", "quantizer_efSearch", "k_factor")


@dataclass(frozen=True)
class Kind:
    """One index kind: its parameters with defaults (None = derived from the corpus size and
    dimension by `derive`), the factory string they make, and the query-time parameter names."""

    name: str
    defaults: dict[str, Any]
    factory: Callable[[dict], str]
    search: tuple[str, ...] = ()
    derive: Callable[[dict, int, int], None] | None = None


def nearest_power_of_two(x: float) -> int:
    return 2 ** max(0, round(math.log2(max(x, 1.0))))


def _derive_ivf(p: dict, n: int, d: int) -> None:
    """The `ivf` kind's defaults, as before kinds were chosen: nlist ~ 4 sqrt(n) (at least 39
    training points per list), nprobe nlist/8, training on 64 points per list."""
    if p["nlist"] is None:
        p["nlist"] = int(max(1, min(4 * round(math.sqrt(n)), n // 39)))
    if p["nprobe"] is None:
        p["nprobe"] = max(1, min(p["nlist"], p["nlist"] // 8))
    if p["train_size"] is None:
        p["train_size"] = int(min(n, 64 * p["nlist"]))


def _derive_ivf_graph(p: dict, n: int, d: int) -> None:
    """Defaults of the kinds with an HNSW coarse quantiser (FAISS wiki "Guidelines to choose an
    index", autofaiss): nlist the power of two nearest 4 sqrt(n), trained on 40 points per list
    (faiss warns below 39), nprobe nlist/16 (recall@10 0.95 needed ~1/16 of the lists on the
    clustered data of bench_index.py), the graph searched with efSearch 2 nprobe."""
    if p["nlist"] is None:
        p["nlist"] = int(max(1, min(nearest_power_of_two(4 * math.sqrt(n)), n // 40)))
    if p["nprobe"] is None:
        p["nprobe"] = max(1, min(p["nlist"], p["nlist"] // 16))
    if p["quantizer_efSearch"] is None:
        p["quantizer_efSearch"] = max(32, 2 * p["nprobe"])
    if p["train_size"] is None:
        p["train_size"] = int(min(n, 40 * p["nlist"]))
    if "pq_m" in p and p["pq_m"] is None:
        p["pq_m"] = next(m for m in (d // 4, d // 2, d) if m >= 1 and d % m == 0)


def _ivfpq_factory(p: dict) -> str:
    refine = "RFlat" if p["refine_bits"] == 32 else "Refine(SQ8)"
    return f"IVF{p['nlist']}_HNSW{p['M']},PQ{p['pq_m']}x4fs,{refine}"


_IVF_GRAPH = {"nlist": None, "nprobe": None, "train_size": None, "M": 32, "quantizer_efSearch": None}

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("flat", {}, lambda p: "Flat"),
        Kind(
            "ivf",
            {"nlist": None, "nprobe": None, "train_size": None},
            lambda p: f"IVF{p['nlist']},Flat",
            ("nprobe",),
            _derive_ivf,
        ),
        Kind("hnsw", {"M": 32, "efConstruction": 80, "efSearch": 128}, lambda p: f"HNSW{p['M']},Flat", ("efSearch",)),
        Kind(
            "ivf_hnsw",
            dict(_IVF_GRAPH),
            lambda p: f"IVF{p['nlist']}_HNSW{p['M']},Flat",
            ("nprobe", "quantizer_efSearch"),
            _derive_ivf_graph,
        ),
        Kind(
            "ivfpq",
            {**_IVF_GRAPH, "pq_m": None, "k_factor": 16, "refine_bits": 32},
            _ivfpq_factory,
            ("nprobe", "quantizer_efSearch", "k_factor"),
            _derive_ivf_graph,
        ),
    )
}
INDEX_KINDS = tuple(KINDS)


def kind_of(name: str) -> Kind:
    if name not in KINDS:
        raise ValueError(f"unknown index kind {name!r}; choose one of {', '.join(INDEX_KINDS)}")
    return KINDS[name]


def resolve_params(kind: str, n: int, d: int | None = None, **params) -> dict[str, Any]:
    """The full parameter set of an index kind for `n` vectors of dimension `d` (defaults filled in).

    ValueError, naming the kind and the parameter, for an unknown or invalid one."""
    spec = kind_of(kind)
    unknown = sorted(set(params) - set(spec.defaults))
    if unknown:
        allowed = ", ".join(spec.defaults) or "none"
        raise ValueError(f"index kind {kind!r} takes no parameter(s) {', '.join(unknown)} (allowed: {allowed})")
    out = {**spec.defaults, **{k: v for k, v in params.items() if v is not None}}
    if spec.derive is not None:
        if "pq_m" in out and out["pq_m"] is None and d is None:
            raise ValueError(f"index kind {kind!r}: the dimension is needed to derive pq_m")
        spec.derive(out, n, d or 0)
    for name, value in out.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"index kind {kind!r}: parameter {name} must be a positive integer, got {value!r}")
    _check_fits(kind, out, n, d)
    return out


def _check_fits(kind: str, p: dict, n: int, d: int | None) -> None:
    """Parameters that cannot build an index over `n` vectors of dimension `d`; clips nprobe and
    train_size to what exists."""
    if "nlist" in p:
        if p["nlist"] > n:
            raise ValueError(f"index kind {kind!r}: nlist={p['nlist']} exceeds the {n} vectors to train on")
        if p["train_size"] < p["nlist"]:
            raise ValueError(f"index kind {kind!r}: train_size={p['train_size']} < nlist={p['nlist']}")
        p["nprobe"] = min(p["nprobe"], p["nlist"])
        p["train_size"] = min(p["train_size"], n)
    if "pq_m" in p and d is not None and d % p["pq_m"]:
        raise ValueError(f"index kind {kind!r}: pq_m={p['pq_m']} must divide the dimension {d}")
    if "refine_bits" in p and p["refine_bits"] not in (8, 32):
        raise ValueError(f"index kind {kind!r}: refine_bits must be 32 (float32) or 8 (SQ8), got {p['refine_bits']}")


def factory_string(kind: str, params: dict) -> str:
    """The faiss `index_factory` string of a kind with its resolved parameters."""
    return kind_of(kind).factory(params)


def search_params(kind: str, params: dict) -> dict[str, int]:
    """The query-time parameters of a kind among its resolved parameters."""
    return {name: params[name] for name in kind_of(kind).search if name in params}


def bytes_per_vector(kind: str, params: dict, d: int) -> float:
    """What one vector costs in memory (as in the module table; list centroids and graph levels
    above 0 are left out, both small)."""
    if kind == "flat":
        return 4.0 * d
    if kind == "hnsw":
        return 4.0 * d + 8 * params["M"]
    if kind == "ivfpq":
        return (4.0 * d if params["refine_bits"] == 32 else float(d)) + params["pq_m"] / 2 + 8
    return 4.0 * d + 8
