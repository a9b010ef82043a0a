"""The one key of a run: everything that makes its rankings and their per-query rows.

A run is (benchmark, retriever spec, reranker spec, rerank depth, ranking depth). Its key holds the
benchmark fingerprint, the spec hashes (weights and query templates included), both depths, the code
of every module that produces or scores it (the engine and everything it imports, this package, and
the family's metrics module, which is loaded by name and so reached by no `import` statement) and
the versions of the libraries that change its bits. A stored eval run, a cache file or a run kept in
memory answers a request only when its key's digest is the request's: a run ranked or reranked to
another depth, or scored by other code, is another run.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

# what produces a run (the engine: retrievers, indexes, rerankers) and scores it (this package)
PRODUCING_CODE = ("cir_demo.engine", "cir_demo.store")
LIBRARIES = ("numpy", "pandas", "faiss", "torch", "open_clip", "pillow", "scipy")


@dataclass(frozen=True)
class RunKey:
    fingerprint: str  # the benchmark's files and split (`engine.benchmark_fingerprint`)
    retriever: str  # spec hash of the first stage
    depth: int  # how deep the first stage ranks (`RetrievalEngine.eval_depth`)
    reranker: str | None = None  # spec hash of the reranker; None: not reranked
    top_n: int | None = None  # candidates reranked per query
    code: str = ""  # code hash of the producing and scoring modules, the family's metrics module included
    libraries: dict = field(default_factory=dict, hash=False, compare=False)
    index: str = "faiss"  # where the first stage searches (`index_label`): another engine ranks ties otherwise
    # the query ids ranked (`query_set_hash`): a `--limit` subset of the benchmark has its files' fingerprint
    queries: str = ""

    def digest(self) -> str:
        """sha256 of the whole key: the name a stored or cached run is found under."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def code_of(metrics_module: str) -> tuple[str, dict]:
    """(code hash, library versions) of what produces and scores a run of a family whose per-query
    metrics live in module `metrics_module` (a family declared outside this package: its module's own
    source joins the hash)."""
    from cir_demo.utils.code_hash import code_text, module_file
    from cir_demo.utils.stat_memo import code_sha256_by_stats
    from cir_demo.utils.versions import library_versions

    # `code_key`'s value, read back while no source file of the package changed: every results file's
    # run key needs it, and parsing the ~70 modules it reaches is a quarter of a results file's `--eval`
    libraries = library_versions(*sorted(set(LIBRARIES)))
    if module_file(metrics_module) is not None:
        return code_sha256_by_stats((*PRODUCING_CODE, metrics_module)), libraries
    code = code_sha256_by_stats(PRODUCING_CODE)
    spec = importlib.util.find_spec(metrics_module)
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    own = code_text(origin) if origin is not None and origin.is_file() else metrics_module.encode()
    return hashlib.sha256(code.encode() + b"\0" + own).hexdigest(), libraries


# the index label of a run read from a results file: it searches no index, whatever the app serves others from
NO_INDEX = "none"


def is_results_file(spec: dict) -> bool:
    """Whether a retriever's spec is a results file's (rankings read, not computed)."""
    from cir_demo.retrievers.precomputed import FAMILY

    return spec.get("family") == FAMILY and bool(spec.get("sha256"))


def first_stage_hash(spec: dict) -> str:
    """The first stage's part of a run's key. A results file's is what makes its rankings, its content's
    sha256 and the format it is read in, never its name or where it lies: `--eval --results-json`, the
    app's `--runs` columns, `failures` and the Python API reading one file meet under one key. Any other
    retriever's is its whole spec's hash."""
    from cir_demo.retrievers.base import spec_hash

    if is_results_file(spec):
        return spec_hash({"family": spec["family"], "sha256": spec["sha256"], "format": spec.get("format")})
    return spec_hash(spec)


def query_set_hash(benchmark) -> str:
    """sha256 (16 hex digits) of the benchmark's query ids: the run of a subset of its queries (`--limit`,
    the app's `limit_groups`) is another run, though the benchmark's files, and so its fingerprint, are
    the same."""
    ids = sorted(q.query_id for q in benchmark.queries)
    return hashlib.sha256(("\n".join(ids) + "\n").encode()).hexdigest()[:16]


def index_label(index_uri: str | None) -> str:
    """The index a run's first stage searches, as its key names it: "faiss", or the Milvus URI shown
    without credentials."""
    if not index_uri:
        return "faiss"
    from cir_demo.index.milvus_store import shown_uri

    return f"milvus:{shown_uri(index_uri)}"


def run_key(
    fingerprint: str,
    metrics_module: str,
    retriever: str,
    depth: int,
    reranker: str | None = None,
    top_n: int | None = None,
    index: str = "faiss",
    queries: str = "",
) -> RunKey:
    """The key of a first-stage run (`reranker` None) or of that run reranked to `top_n`, of the queries
    `queries` names (`query_set_hash`)."""
    code, libraries = code_of(metrics_module)
    return RunKey(
        fingerprint,
        retriever,
        int(depth),
        reranker,
        int(top_n) if reranker else None,
        code,
        libraries,
        index,
        queries,
    )
