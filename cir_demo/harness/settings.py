"""`--eval`'s settings, typed: what harness/cli.py unpacks from its flags once (`eval_settings`), so
the harness reads fields with their types and defaults in one place, never a Namespace."""

from __future__ import annotations

from dataclasses import dataclass, field

from cir_demo.benchmarks.cli_args import BenchmarkChoice
from cir_demo.images.benchmark_fetch import FetchSettings
from cir_demo.preflight.request import RunRequest


@dataclass(frozen=True)
class EvalSettings:
    benchmark: BenchmarkChoice
    results_json: tuple[str, ...] = ()  # results files to score; empty: run the retrievers
    results_format: str = "auto"
    retrievers: str | None = None  # comma-separated names; None: the benchmark's declared ones
    rerank: str | None = None  # reranker backend; None: the benchmark's declared one; "none": off
    rerank_top_n: int = 20
    device: str | None = None
    index_uri: str | None = None  # a Milvus URI (.db: Milvus Lite; http(s)://: a server); None: FAISS
    trust_remote_code: bool = False
    dry_run: bool = False
    out: str | None = None
    overwrite: bool = False
    wait: bool = False  # wait for another command writing --out instead of refusing
    n_boot: int = 1000
    bootstrap_seed: int = 0
    plots: bool = True
    baseline: str | None = None
    fetch_images: bool = False  # fetch the benchmark's missing images before the run
    fetch: FetchSettings = field(default_factory=FetchSettings)

    @property
    def run_request(self) -> RunRequest:
        """What the checks before the run and the dry run read (preflight/)."""
        return RunRequest(
            self.benchmark,
            retrievers=self.retrievers,
            rerank=self.rerank,
            device=self.device,
            trust_remote_code=self.trust_remote_code,
            fetch_images=self.fetch_images,
            fetch=self.fetch,
        )
