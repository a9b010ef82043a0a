"""What a run asks for: the retrievers and the reranker, from its flags or the benchmark's
declared defaults (`default_retrievers`, `default_reranker` in cir_demo/benchmarks/registry.py),
and the settings the pre-run checks and the dry run read (`RunRequest`).
The pre-run checks and the run itself read the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cir_demo.benchmarks.cli_args import BenchmarkChoice
from cir_demo.benchmarks.registry import declared_defaults
from cir_demo.images.benchmark_fetch import FetchSettings


@dataclass(frozen=True)
class RunRequest:
    """What the checks before a run (`run.check_run`) and its dry run read: typed, built once by the
    command from its flags (`--eval`: `EvalSettings.run_request`; `index build`: harness/index_run.py;
    `doctor`: preflight/doctor.py)."""

    benchmark: BenchmarkChoice
    retrievers: str | None = None  # `--retrievers` as given (comma-separated); None: the benchmark's defaults
    rerank: str | None = None  # the reranker backend as given ("none": off); None: the benchmark's default
    device: str | None = None
    trust_remote_code: bool = False
    fetch_images: bool = False  # fetch the missing images first (`--fetch-images`)
    fetch: FetchSettings = field(default_factory=FetchSettings)


def retriever_names(requested: str | None, benchmark_name: str) -> list[str]:
    """The retrievers `--retrievers` names (comma-separated), or the benchmark's declared defaults
    (`default_retrievers` in cir_demo/benchmarks/registry.py). ValueError (one line) when none can be chosen."""
    from cir_demo.retrievers.registry import list_retrievers

    if requested is not None:
        names = [n.strip() for n in requested.split(",") if n.strip()]
        if not names:
            raise ValueError(f"--retrievers {requested!r}: names no retriever")
        return names
    known = {c["name"] for c in list_retrievers()}
    spec = declared_defaults(benchmark_name)
    if spec is None or not spec.default_retrievers:
        raise ValueError(
            f"--retrievers is required for benchmark {benchmark_name!r} (known: {', '.join(sorted(known))})"
        )
    names = [n for n in spec.default_retrievers if n in known]
    if not names:
        raise ValueError(
            f"no {benchmark_name} retriever is registered; train them with "
            "`python -m cir_demo train world-clip` (see docs/world_models.md)"
        )
    return names


def default_reranker(benchmark_name: str, requested: str | None) -> str | None:
    """`--rerank` (none: off), else the benchmark's declared default reranker when registered."""
    if requested is not None:
        return None if requested.lower() == "none" else requested
    spec = declared_defaults(benchmark_name)
    if spec is None or not spec.default_reranker:
        return None
    from cir_demo.rerank import BACKENDS

    return spec.default_reranker if spec.default_reranker in BACKENDS else None
