"""`python -m cir_demo index build|status|list`: the flags of the index command (it runs in
harness/index_run.py, above the pre-run checks of preflight/).

    python -m cir_demo index build --benchmark world --retriever R [--kind auto|flat|ivf_hnsw|...] [--force]
    python -m cir_demo index build --benchmark world --retriever R --index-uri indexes/milvus.db [--index-params JSON]
    accelerate launch --num_processes 4 -m cir_demo index build --sharded --benchmark B --retriever R
    python -m cir_demo index status [--benchmark B] [--retriever R]
    python -m cir_demo index list
    python -m cir_demo index prebuilt [--only world|embeddings|eval] [--check [--rerun]]   # indexes/prebuilt/ of the default world
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from cir_demo.benchmarks.cli_args import add_dry_run_and_debug


def _add_benchmark_args(p: argparse.ArgumentParser, required: bool, limit: bool = False) -> None:
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments

    add_benchmark_arguments(
        p,
        default=None,
        required=required,
        limit=limit,
        benchmark_help=None if required else "world, pinpoint, edir, circo or jsonl (default: every benchmark)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.set_defaults(debug=False)  # the actions without --debug (list, prebuilt) report errors without traceback
    sub = p.add_subparsers(dest="index_command", metavar="ACTION")

    b = sub.add_parser("build", help="encode a benchmark's corpus and write its index (skipped when fresh)")
    _add_benchmark_args(b, required=True)
    b.add_argument("--retriever", required=True, help="retriever name (see `python -m cir_demo.retrievers` / docs)")
    b.add_argument(
        "--kind",
        choices=["auto", "flat", "ivf", "hnsw", "ivf_hnsw", "ivfpq"],
        default=None,
        help="auto = chosen from the corpus size, dimension and memory budget (flat up to 250,000 "
        "images and beyond while a query costs at most 2^28 multiply-adds, else ivf_hnsw); "
        "flat = exact inner product; the others approximate (docs/indexes.md). "
        "Default: the kind of the index on disk if one was asked for, else auto",
    )
    b.add_argument(
        "--memory-budget",
        type=float,
        metavar="GIB",
        help="auto: the most memory the index may take, in GiB (default: half the machine's)",
    )
    b.add_argument("--nlist", type=int, help="ivf, ivf_hnsw, ivfpq: number of lists (default ~4 sqrt(n))")
    b.add_argument(
        "--nprobe",
        type=int,
        help="ivf, ivf_hnsw, ivfpq: lists visited per query (default nlist/8 for ivf, nlist/64 for the others)",
    )
    b.add_argument(
        "--train-size",
        type=int,
        help="ivf, ivf_hnsw, ivfpq: vectors the lists are trained on "
        "(default 64 * nlist for ivf, 40 * nlist for the others)",
    )
    b.add_argument(
        "--M",
        dest="M",
        type=int,
        help="hnsw: links per node; ivf_hnsw, ivfpq: of the graph over the list centroids (default 32)",
    )
    b.add_argument("--ef-construction", type=int, help="hnsw: build-time beam (default 80)")
    b.add_argument(
        "--ef-search",
        type=int,
        help="hnsw: search-time beam (default 128); ivf_hnsw, ivfpq: beam "
        "of the centroid graph (default 2 * nprobe, at least 32)",
    )
    b.add_argument("--pq-m", type=int, help="ivfpq: 4-bit sub-quantisers per vector (default d/4)")
    b.add_argument("--k-factor", type=int, help="ivfpq: candidates re-ranked exactly, per result (default 4)")
    b.add_argument(
        "--refine-bits",
        type=int,
        choices=[8, 32],
        help="ivfpq: re-rank on float32 (32, default) or 8-bit scalar-quantised (8) vectors",
    )
    add_index_uri_argument(b)
    b.add_argument(
        "--index-params",
        metavar="JSON",
        help='with --index-uri: the Milvus index, e.g. \'{"index_type": "HNSW", "params": {"M": 16}, '
        '"search_params": {"ef": 64}}\' (default: FLAT up to the flat limit, else HNSW or IVF_SQ8; '
        "DISKANN or GPU_CAGRA where the server offers them)",
    )
    b.add_argument(
        "--force",
        action="store_true",
        help="rebuild even when the index is fresh; with --index-uri also replace a collection other code "
        "or another spec built",
    )
    b.add_argument("--batch-size", type=int, default=64, help="images per encoder call (default 64)")
    b.add_argument("--device", default=None, help="encoder device (default: cuda when available, else cpu)")
    b.add_argument("--trust-remote-code", action="store_true", help="allow retrievers that run model-repo code")
    b.add_argument("--out-dir", help="index folder (default indexes/<benchmark>/<retriever>)")
    b.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_dry_run_and_debug(b, "build would download and encode")
    from cir_demo.images.cli import add_fetch_arguments

    add_fetch_arguments(b, fetch_flag=True)
    s = b.add_argument_group("sharded encoding (run under `accelerate launch`)")
    s.add_argument(
        "--sharded",
        action="store_true",
        help="each launched process encodes one contiguous part of the corpus; rank 0 merges",
    )
    s.add_argument("--shard-dir", help="where shards are written (must be shared across machines)")
    s.add_argument("--keep-shards", action="store_true", help="keep the shard files after merging")

    st = sub.add_parser("status", help="say which indexes are fresh and why the others are stale")
    _add_benchmark_args(st, required=False)
    st.add_argument("--retriever", help="only this retriever")
    st.add_argument("--device", default="cpu", help="device to load retrievers on for the check (default cpu)")
    st.add_argument("--trust-remote-code", action="store_true")
    st.add_argument(
        "--verify",
        action="store_true",
        help="also compare every file's sha256 with its manifest (default: sizes only, fast)",
    )

    sub.add_parser("list", help="list the indexes on disk")

    pb = sub.add_parser(
        "prebuilt",
        help="rebuild what indexes/prebuilt/ commits for the default world: its test "
        "part (world/, installed on a first start instead of generated), the "
        "corpus embeddings (one per distinct image encoder of the benchmark's "
        "default retrievers) and the complete --eval outputs (eval/, from a real run)",
    )
    _add_benchmark_args(pb, required=False, limit=True)  # --limit: a smaller shipped run, for tests
    pb.add_argument(
        "--retrievers",
        help="comma-separated retriever names (default: the benchmark's default retrievers, as `--eval` runs them)",
    )
    pb.add_argument(
        "--rerank",
        metavar="BACKEND",
        help="the reranker of the shipped --eval outputs (default: the benchmark's default reranker; none for none)",
    )
    pb.add_argument(
        "--only",
        choices=["world", "embeddings", "eval"],
        help="only the world's test part, only the corpus embeddings, or only the --eval outputs "
        "(default: all three, in that order)",
    )
    pb.add_argument(
        "--check",
        action="store_true",
        help="only say whether the prebuilt files match the benchmark, the weights, the code and the "
        "libraries, and whether their content is what is computed now: a slice of the embeddings "
        "re-encoded, and every number of the --eval outputs recomputed (the per-query rows of intents "
        "drawn at random from the models in an empty data folder, every other file from the rows; "
        "exit 1 if not)",
    )
    pb.add_argument(
        "--all",
        action="store_true",
        help="with --check: recompute the per-query rows of every intent, not of a random draw",
    )
    pb.add_argument(
        "--draw-seed",
        type=int,
        default=None,
        help="with --check: the seed of the draw of intents (default: a new random one, printed)",
    )
    pb.add_argument(
        "--sample",
        type=int,
        default=None,
        metavar="N",
        help="with --check: intents drawn per split (default 24)",
    )
    pb.add_argument(
        "--rerun",
        action="store_true",
        help="with --check: also run --eval again and compare every shipped file with what it writes, byte for byte",
    )
    pb.add_argument(
        "--in-data-folder",
        action="store_true",
        help="build in the current data folder, reusing its caches (default: a new empty temporary "
        "data folder, so no cached score, feature or embedding stands in for a computed one)",
    )
    pb.add_argument("--batch-size", type=int, default=64, help="images per encoder call (default 64, as index builds)")
    pb.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_index_uri_argument(p) -> None:
    """--index-uri, shared by `index build`, `--eval` and the app."""
    p.add_argument(
        "--index-uri",
        metavar="URI",
        help="keep the corpus indexes in Milvus: a path ending in .db (embedded Milvus Lite, one process "
        "at a time) or http(s)://host:port (a Milvus server or cluster; token from $MILVUS_TOKEN). "
        "Default: faiss files under indexes/ (docs/indexes.md, beyond one machine)",
    )


FAISS_ONLY = ("kind", "out_dir", "nlist", "nprobe", "train_size", "M", "ef_construction", "ef_search", "pq_m")
FAISS_ONLY += ("k_factor", "refine_bits")


@dataclass(frozen=True)
class IndexFlags:
    """The index flags a command was given (`index build`, `--eval`, the app), typed: unpacked once at
    its edge by `index_flags`, and what the checks before any work (`index_uri_problems`,
    `index_params`, `memory_budget`) and the build read."""

    index_uri: str | None = None  # --index-uri: a Milvus URI; None: faiss files
    index_params: str | None = None  # --index-params (JSON), for a Milvus index
    memory_budget: float | None = None  # --memory-budget, GiB as given
    faiss: Mapping[str, Any] = field(default_factory=dict)  # the FAISS_ONLY flags set (not None, not False)

    @property
    def kind(self) -> str | None:
        return self.faiss.get("kind")


def index_flags(args: argparse.Namespace) -> IndexFlags:
    """A command's index flags, unpacked once (a command without one of them reads it as not given)."""
    given = {a: v for a in FAISS_ONLY if (v := getattr(args, a, None)) is not None and v is not False}
    return IndexFlags(
        getattr(args, "index_uri", None),
        getattr(args, "index_params", None),
        getattr(args, "memory_budget", None),
        MappingProxyType(given),
    )


def index_uri_problems(flags: IndexFlags) -> list[str]:
    """One line per --index-uri/--index-params problem: a URI that is neither a .db path nor
    http(s)://host:port, parameters that are not JSON, faiss flags beside a Milvus index."""
    uri, params = flags.index_uri, flags.index_params
    if uri is None:
        return ["--index-params goes with --index-uri (a Milvus index); faiss takes --kind"] if params else []
    from cir_demo.index.milvus_store import index_request, parse_uri

    out = []
    for check, value in ((parse_uri, uri), (index_request, params)):
        try:
            check(value)
        except ValueError as exc:
            out.append(str(exc))
    faiss = [f"--{a.replace('_', '-')}" for a in FAISS_ONLY if flags.faiss.get(a) not in (None, False)]
    if faiss:
        out.append(f"{', '.join(faiss)}: faiss flags; a Milvus index (--index-uri) takes --index-params JSON")
    return out


_IVF = {"nlist": "nlist", "nprobe": "nprobe", "train_size": "train_size"}
_GRAPH_IVF = {**_IVF, "M": "M", "ef_search": "quantizer_efSearch"}
# {--kind: {flag attribute: index parameter}}
PARAM_FLAGS = {
    "ivf": _IVF,
    "hnsw": {"M": "M", "ef_construction": "efConstruction", "ef_search": "efSearch"},
    "ivf_hnsw": _GRAPH_IVF,
    "ivfpq": {**_GRAPH_IVF, "pq_m": "pq_m", "k_factor": "k_factor", "refine_bits": "refine_bits"},
}


def index_params(flags: IndexFlags) -> dict:
    """The `--kind` parameters given on the command line, by their index name; ValueError for one that
    does not apply to the kind."""
    kind = flags.kind
    chosen = PARAM_FLAGS.get(kind, {})
    every = {attr for table in PARAM_FLAGS.values() for attr in table}
    wrong = [f"--{attr.replace('_', '-')}" for attr in sorted(every - set(chosen)) if attr in flags.faiss]
    if wrong:
        raise ValueError(
            f"{', '.join(wrong)} do(es) not apply to --kind {kind or '(not given)'}"
            + ("; name the kind with --kind" if kind in (None, "auto") else "")
        )
    return {param: flags.faiss[attr] for attr, param in chosen.items() if attr in flags.faiss}


def memory_budget(flags: IndexFlags) -> int | None:
    """--memory-budget in bytes (None: the default); ValueError for one that is not positive."""
    value = flags.memory_budget
    if value is None:
        return None
    if not value > 0:
        raise ValueError(f"--memory-budget must be a positive number of GiB, got {value}")
    return int(value * 2**30)
