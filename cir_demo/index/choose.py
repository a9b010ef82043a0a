"""Which index kind a corpus gets when none is requested: a pure function of the corpus size, the
dimension and a memory budget (`choose_index`), recorded in the index manifest.

The rules (after the FAISS wiki's "Guidelines to choose an index" and autofaiss's
`get_optimal_index_keys_v2`; the measurements behind the thresholds: docs/benchmarks.md, "Indexes"):
- Exact `flat` search while a query costs at most FLAT_MAX_WORK multiply-adds (n * d), and always
  up to FLAT_MIN_VECTORS images: there an approximate index gains little speed for the recall it
  gives up and costs minutes of training, and benchmark metrics stay exact
  with any encoder (PinPoint's 109,600 images at 3,584 dimensions included). The offline world's
  5-20k images are always flat.
- Above it, `ivfpq`: an inverted file of nlist lists (the power of two nearest 4 sqrt(n), the
  wiki's 4-16 sqrt(n)) trained on 40 points per list (the wiki's 30-256), whose nearest lists
  are found by an HNSW graph over the centroids, scanned as 4-bit PQ codes (SIMD fast scan),
  the best k_factor * k candidates re-ranked on the float32 vectors (4d + d/8 + 8 bytes each).
  At equal nprobe it finds what IVF over float32 lists finds, several times faster.
- When that does not fit the memory budget: the re-ranking on 8-bit scalar-quantised vectors
  (refine_bits 8: d + d/8 + 8 bytes each, 3.6x smaller at 768-d).
- When even that does not fit: ValueError naming the sizes (move the index to Milvus: docs/indexes.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from cir_demo.index.kinds import bytes_per_vector, factory_string, resolve_params

FLAT_MIN_VECTORS = 250_000
FLAT_MAX_WORK = 2**28  # multiply-adds per query: 349,525 vectors at 768-d, 524,288 at 512-d


@dataclass(frozen=True)
class IndexChoice:
    """A kind with its full parameters, its faiss factory string, the bytes it needs, and why."""

    kind: str
    params: dict
    factory: str
    memory_bytes: int
    reason: str


def flat_limit(d: int) -> int:
    """The most vectors of dimension `d` that are searched exactly."""
    return max(FLAT_MIN_VECTORS, FLAT_MAX_WORK // max(d, 1))


def _choice(kind: str, n: int, d: int, reason: str, **params) -> IndexChoice:
    p = resolve_params(kind, max(n, 1), d, **params)
    return IndexChoice(kind, p, factory_string(kind, p), int(n * bytes_per_vector(kind, p, d)), reason)


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f} GiB" if x >= 2**30 else f"{x / 2**20:.0f} MiB"


def choose_index(n: int, d: int, memory_budget: int | None = None) -> IndexChoice:
    """The index kind and parameters for `n` vectors of dimension `d` within `memory_budget` bytes
    (None: no limit). Deterministic: the same arguments always give the same choice."""
    for name, value in (("corpus size", n), ("dimension", d)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "corpus size" else 1):
            raise ValueError(
                f"choose_index: {name} must be a {'non-negative' if name == 'corpus size' else 'positive'} "
                f"integer, got {value!r}"
            )
    if memory_budget is not None and (
        isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget < 1
    ):
        raise ValueError(f"choose_index: memory budget must be a positive number of bytes, got {memory_budget!r}")
    budget = float("inf") if memory_budget is None else memory_budget
    size = f"{n:,} x {d}"
    if n <= flat_limit(d):
        flat = _choice("flat", n, d, f"exact: {size} is within the flat limit of {flat_limit(d):,} vectors at {d}-d")
        if flat.memory_bytes <= budget:
            return flat
    fast = _choice("ivfpq", n, d, f"{size} is above the flat limit of {flat_limit(d):,} vectors at {d}-d")
    if fast.memory_bytes <= budget:
        return fast
    small = _choice(
        "ivfpq",
        n,
        d,
        f"{size} with float32 vectors needs {_gib(fast.memory_bytes)}, over the memory "
        f"budget of {_gib(budget)}: PQ codes re-ranked on 8-bit vectors",
        refine_bits=8,
    )
    if small.memory_bytes <= budget:
        return small
    raise ValueError(
        f"an index of {size} vectors needs at least {_gib(small.memory_bytes)} even compressed, over "
        f"the memory budget of {_gib(budget)}: raise --memory-budget or keep the index in Milvus (--index-uri; "
        "docs/indexes.md, beyond one machine)"
    )


def default_memory_budget() -> int | None:
    """Half the machine's physical memory (the corpus embeddings and the process need the rest);
    None where the platform does not say."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // 2
    except (AttributeError, ValueError, OSError):
        return None
