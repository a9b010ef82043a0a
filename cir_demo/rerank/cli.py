"""`python -m cir_demo rerank`: rerank the top n of a results file with an MLLM.

    python -m cir_demo rerank --benchmark world --results-json runs/x/clip.json \\
        --backend openai --base-url http://localhost:8000/v1 --out runs/x/clip+rerank.json
    python -m cir_demo rerank --benchmark world --results-json clip.json --backend qwen2.5-vl --out clip+rerank.json

Writes the reranked results file (same official format; `_spec` holds the
first-stage spec and the reranker spec with its exact prompt template) and,
beside it, `<out>.rerank.json` with every candidate's first-stage rank and
score, P(yes), new rank and flag. Scores are cached on disk (see --cache), so
a second run costs nothing. The command runs in harness/rerank_run.py: it reranks as the run store
does (`store.produce_rerank`), through the engine, above this package's layer.
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments
    from cir_demo.rerank import BACKENDS
    from cir_demo.results import FORMAT_CHOICES

    add_benchmark_arguments(p)
    r = p.add_argument_group("reranking")
    r.add_argument(
        "--results-json",
        required=True,
        help="first-stage results file: PinPoint or CIRCO JSON, a run dict {query: {image: score}} or a "
        "TREC run file (format detected; the output is written in the same format)",
    )
    r.add_argument(
        "--results-format",
        default="auto",
        choices=FORMAT_CHOICES,
        help="read --results-json in this format instead of detecting it",
    )
    r.add_argument(
        "--out",
        required=True,
        help="reranked results file to write (it and its .rerank.json are replaced only with --overwrite)",
    )
    r.add_argument("--overwrite", action="store_true", help="replace an existing --out file and its details")
    r.add_argument("--top-n", type=int, default=20, help="candidates reranked per query (default 20)")
    r.add_argument(
        "--cache",
        help="score cache file (default: the benchmark's, <cache dir>/rerank/<benchmark fingerprint>.sqlite, "
        "which --eval and the app read and write too)",
    )
    r.add_argument("--no-cache", action="store_true", help="do not read or write the score cache")
    b = p.add_argument_group("backend")
    b.add_argument("--backend", default="qwen2.5-vl", help=f"one of {', '.join(BACKENDS)} (default: qwen2.5-vl, local)")
    b.add_argument("--model", help="model name or path (default: Qwen/Qwen2.5-VL-7B-Instruct)")
    b.add_argument("--yes-token", default="yes")
    b.add_argument("--no-token", default="no")
    b.add_argument("--device", default="auto", help="qwen2.5-vl: auto, cpu, cuda, cuda:N")
    b.add_argument("--dtype", default="auto", help="qwen2.5-vl: auto, float32, bfloat16, float16")
    b.add_argument("--batch-size", type=int, default=8, help="qwen2.5-vl: candidates per forward pass")
    b.add_argument("--max-pixels", type=int, help="qwen2.5-vl: largest image size in pixels")
    b.add_argument("--base-url", default="http://localhost:8000/v1", help="openai: server URL")
    b.add_argument("--api-key-env", help="openai: NAME of the environment variable holding the API key")
    b.add_argument("--concurrency", type=int, default=8, help="openai: requests in flight")
    b.add_argument("--timeout", type=float, default=60.0, help="openai: seconds per request")
    b.add_argument("--retries", type=int, default=2, help="openai: retries after a timeout or HTTP 429/5xx")
    b.add_argument(
        "--backend-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra keyword for the backend (value parsed as JSON when it parses), repeatable; "
        "other backends (e.g. world-verifier) get only these",
    )


def parse_backend_args(pairs: list[str]) -> dict:
    import json

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--backend-arg must look like KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def backend_kwargs(args: argparse.Namespace) -> dict:
    """The flags the backend's class takes (its `FLAGS`, those set), then every --backend-arg."""
    from cir_demo.rerank import backend_class

    kw = {flag: getattr(args, flag) for flag in backend_class(args.backend).FLAGS if getattr(args, flag) is not None}
    return {**kw, **parse_backend_args(args.backend_arg)}
