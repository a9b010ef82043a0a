"""`python app.py --eval` / `python -m cir_demo eval`: headless evaluation.

With `--results-json`, scores rankings produced elsewhere (no images, no model,
no torch import: harness/results_files.py). Without it, runs the retrievers on the benchmark
first (harness/pipeline.py). This module parses the flags and checks them before any work.
"""

from __future__ import annotations

import argparse
import os
import sys

from cir_demo.benchmarks.cli_args import add_benchmark_arguments, add_dry_run_and_debug
from cir_demo.results import FORMAT_CHOICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    import dataclasses

    from cir_demo.harness.settings import EvalSettings

    default = {f.name: f.default for f in dataclasses.fields(EvalSettings)}  # the defaults, written once there
    add_benchmark_arguments(p)
    r = p.add_argument_group("what to evaluate")
    r.add_argument(
        "--results-json",
        nargs="+",
        metavar="FILE",
        help="results files to evaluate: PinPoint or CIRCO JSON, run dicts {query: {image: score}} "
        "(pytrec_eval, ranx, mteb, EDIR main.py) or TREC run files; format detected",
    )
    r.add_argument(
        "--results-format",
        default=default["results_format"],
        choices=FORMAT_CHOICES,
        help="read every --results-json file in this format instead of detecting it",
    )
    r.add_argument(
        "--retrievers",
        help="comma-separated retriever names to run (default: all world retrievers); "
        "see `python -m cir_demo retrievers list`",
    )
    r.add_argument(
        "--rerank",
        metavar="BACKEND",
        help="rerank every run's top n with this reranker backend and report both "
        "(default on the world: world-verifier; 'none' disables)",
    )
    r.add_argument(
        "--rerank-top-n",
        type=int,
        default=default["rerank_top_n"],
        help=f"candidates reranked per query (default {default['rerank_top_n']})",
    )
    r.add_argument("--device", default=None, help="torch device for models (default: cuda when available, else cpu)")
    r.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow retrievers that run their model repository's code (BGE-VL, GME); never the default",
    )
    from cir_demo.index.cli import add_index_uri_argument

    add_index_uri_argument(r)
    add_dry_run_and_debug(r, "run would download, encode and rerank")
    from cir_demo.images.cli import add_fetch_arguments

    add_fetch_arguments(p, fetch_flag=True)
    o = p.add_argument_group("output")
    o.add_argument(
        "--out", help="output folder (default: runs/<time>-<benchmark>): new or empty, or any with --overwrite"
    )
    o.add_argument(
        "--overwrite",
        action="store_true",
        help="move what --out holds aside whole (to OUT.replaced-<time>) and put the new run in its place",
    )
    from cir_demo.utils.owned_folder import add_wait_argument

    add_wait_argument(o)
    o.add_argument(
        "--n-boot",
        type=int,
        default=default["n_boot"],
        help="bootstrap resamples for confidence intervals (0 disables)",
    )
    o.add_argument("--bootstrap-seed", type=int, default=default["bootstrap_seed"])
    o.add_argument("--no-plots", action="store_true")
    o.add_argument(
        "--baseline",
        metavar="NAME",
        help="the run report.tex marks significant differences against (default: the first run)",
    )


def run(args: argparse.Namespace) -> int:
    if args.results_json and "numpy" not in sys.modules:
        # Scoring multiplies small matrices (bootstrap counts x group sums); OpenBLAS threads only
        # contend for the cores there (far slower on a busy machine). Unless the user chose, use one.
        # Only on this path (set before numpy loads): the model pipeline keeps its BLAS threads.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from cir_demo.benchmarks.schema import BenchmarkError
    from cir_demo.preflight.commands import eval_problems, report
    from cir_demo.index.cli import index_flags, index_uri_problems
    from cir_demo.preflight.flags import GivenFlags
    from cir_demo.errors import report_errors
    from cir_demo.integrity import DamagedFileError
    from cir_demo.paths import DataFolderError

    problems = eval_problems(
        GivenFlags.of(vars(args)), index_uri_problems(index_flags(args))
    )  # before any work: nothing is created when a flag is wrong
    if problems:
        return report(problems)
    expected: tuple[type[BaseException], ...] = (BenchmarkError, DamagedFileError, DataFolderError, PermissionError)
    if not args.results_json:  # scoring files needs no index code (importing it costs a fifth of a second)
        from cir_demo.index.manifest import StaleIndexError

        expected += (StaleIndexError,)

    settings = eval_settings(args)

    def body() -> int:
        if settings.results_json:
            from cir_demo.harness.results_files import evaluate_results_files

            return evaluate_results_files(settings)
        from cir_demo.harness.pipeline import run_benchmark

        return run_benchmark(settings)

    return report_errors(body, debug=args.debug, expected=expected)


def eval_settings(args: argparse.Namespace):
    """The flags, unpacked once into typed settings (harness/settings.py)."""
    from cir_demo.benchmarks.cli_args import BenchmarkChoice
    from cir_demo.harness.settings import EvalSettings
    from cir_demo.images.cli import fetch_settings

    return EvalSettings(
        benchmark=BenchmarkChoice.from_args(args),
        results_json=tuple(args.results_json or ()),
        results_format=args.results_format,
        retrievers=args.retrievers,
        rerank=args.rerank,
        rerank_top_n=args.rerank_top_n,
        device=args.device,
        index_uri=args.index_uri,
        trust_remote_code=bool(args.trust_remote_code),
        dry_run=bool(args.dry_run),
        out=args.out,
        overwrite=bool(args.overwrite),
        wait=bool(args.wait),
        n_boot=args.n_boot,
        bootstrap_seed=args.bootstrap_seed,
        plots=not args.no_plots,
        baseline=args.baseline,
        fetch_images=bool(args.fetch_images),
        fetch=fetch_settings(args),
    )
