"""`python app.py`'s settings, typed: what ui/startup.py unpacks from the app's flags once
(`app_settings`), so the app reads fields with their types; the flags' defaults are read from here."""

from __future__ import annotations

from dataclasses import dataclass, field

from cir_demo.benchmarks.cli_args import BenchmarkChoice
from cir_demo.images.benchmark_fetch import FetchSettings


@dataclass(frozen=True)
class AppSettings:
    benchmark: BenchmarkChoice  # --benchmark, its loader flags and --limit
    retrievers: tuple[str, ...] | None = None  # --retrievers' names; None: the benchmark's default columns
    runs: tuple[str, ...] = ()  # --runs [NAME=]FILE, as given
    reranker: str | None = None  # a backend, or "none"; None: the benchmark's default
    reranker_model: str | None = None
    device: str | None = None
    trust_remote_code: bool = False
    allow_stale: bool = False
    index_uri: str | None = None  # a Milvus URI; None: faiss files under indexes/
    threads: int = 1  # torch CPU threads per request while serving
    fetch_images: bool = False
    fetch: FetchSettings = field(default_factory=FetchSettings)
    server_name: str | None = None  # None: $GRADIO_SERVER_NAME, else 127.0.0.1
    port: int | None = None  # None: $GRADIO_SERVER_PORT, else 7860 or the next free one
    share: bool = False
    queue_size: int = 32
    concurrency: int = 2
    mcp: bool = False
    precompute: bool = True  # the background eval run on a first start
    thumbnail_warmer: bool = True
    debug: bool = False
