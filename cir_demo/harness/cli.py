"""`python app.py --eval` / `python -m cir_demo eval`: headless evaluation.

With `--results-json`, scores rankings produced elsewhere (no images, no model,
no torch import). Without it, runs the retrievers on the benchmark first.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path

from cir_demo.benchmarks.cli_args import add_benchmark_arguments, load_benchmark_from_args
from cir_demo.harness.staging import default_out_dir
from cir_demo.results import FORMAT_CHOICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_benchmark_arguments(p)
    r = p.add_argument_group("what to evaluate")
    r.add_argument("--results-json", nargs="+", metavar="FILE",
                   help="results files to evaluate: PinPoint or CIRCO JSON, run dicts {query: {image: score}} "
                        "(pytrec_eval, ranx, mteb, EDIR main.py) or TREC run files; format detected")
    r.add_argument("--results-format", default="auto", choices=FORMAT_CHOICES,
                   help="read every --results-json file in this format instead of detecting it")
    r.add_argument("--retrievers", help="comma-separated retriever names to run (default: all world retrievers); "
                   "see `python -m cir_demo retrievers list`")
    r.add_argument("--rerank", metavar="BACKEND",
                   help="rerank every run's top n with this reranker backend and report both "
                        "(default on the world: world-verifier; 'none' disables)")
    r.add_argument("--rerank-top-n", type=int, default=20, help="candidates reranked per query (default 20)")
    r.add_argument("--device", default=None, help="torch device for models (default: cuda when available, else cpu)")
    r.add_argument("--trust-remote-code", action="store_true",
                   help="allow retrievers that run their model repository's code (BGE-VL, GME); never the default")
    r.add_argument("--dry-run", action="store_true",
                   help="print what the run would download, encode and rerank, with a time estimate measured on "
                        "a small batch on this device; creates nothing")
    r.add_argument("--fetch-images", action="store_true",
                   help="download the benchmark's missing images first (as `python -m cir_demo images fetch`)")
    r.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    from cir_demo.images.cli import add_fetch_arguments

    add_fetch_arguments(p)
    o = p.add_argument_group("output")
    o.add_argument("--out", help="output folder (default: runs/<time>-<benchmark>)")
    o.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for confidence intervals (0 disables)")
    o.add_argument("--bootstrap-seed", type=int, default=0)
    o.add_argument("--no-plots", action="store_true")


def evaluate_results_files(args: argparse.Namespace) -> int:
    from cir_demo.harness.evaluate import evaluate_run
    from cir_demo.harness.report import write_outputs
    from cir_demo.results import read_results

    bench = load_benchmark_from_args(args)
    for w in bench.warnings:
        text = str(w)
        print(text if len(text) <= 400 else text[:400] + " ...", file=sys.stderr)
    if bench.warnings:
        print(f"({len(bench.warnings)} warnings reading the benchmark; `python -m cir_demo validate` lists them in full)",
              file=sys.stderr)
    evaluations = []
    names_seen: set[str] = set()
    paths = args.results_json
    if len(paths) > 1:  # a bar for one file says nothing, and importing tqdm costs 40 ms of a one-second run
        from tqdm import tqdm

        paths = tqdm(paths, desc="evaluating results files", unit="file")
    for path in paths:
        rf = read_results(path, bench, fmt=args.results_format)
        name = rf.name if rf.name not in names_seen else f"{rf.name}_{len(names_seen)}"
        names_seen.add(name)
        msgs = [w.message for w in rf.warnings()]
        for m in msgs:
            print(f"warning: {path}: {m}", file=sys.stderr)
        ev = evaluate_run(bench, rf.run, name, n_boot=args.n_boot, seed=args.bootstrap_seed, warnings=msgs)
        for m in ev.warnings[len(msgs):]:  # what scoring found (e.g. queries without positives)
            print(f"warning: {path}: {m}", file=sys.stderr)
        ev.metrics["coverage"] = rf.coverage
        ev.metrics["unknown_ids"] = rf.n_unknown_ids
        ev.metrics["unknown_query_keys"] = len(rf.unknown_query_keys)
        evaluations.append(ev)
    from cir_demo.harness.staging import staged_run_dir

    final = Path(args.out) if args.out else default_out_dir(bench.name)
    with staged_run_dir(final) as out:
        paths = write_outputs(bench, evaluations, out, n_boot=args.n_boot, seed=args.bootstrap_seed,
                              plots=not args.no_plots)
    print(f"wrote {len(paths)} files to {final}")
    print(_summary(evaluations, bench))
    return 0


def _summary(evaluations, bench) -> str:
    from cir_demo.harness.evaluate import family_of

    heads = list(family_of(bench).headline.values())[:4]
    lines = []
    for ev in evaluations:
        vals = "  ".join(f"{h}={ev.metrics.get(h, float('nan')):.4f}" for h in heads)
        lines.append(f"{ev.name}: {vals}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.results_json and "numpy" not in sys.modules:
        # Scoring multiplies small matrices (bootstrap counts x group sums); OpenBLAS threads only
        # contend for the cores there (10x slower on a busy machine). Unless the user chose, use one.
        # Only on this path (set before numpy loads): the model pipeline keeps its BLAS threads.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from cir_demo.benchmarks.schema import BenchmarkError
    from cir_demo.preflight.commands import eval_problems, report
    from cir_demo.errors import report_errors
    from cir_demo.integrity import DamagedFileError
    from cir_demo.paths import DataFolderError

    problems = eval_problems(args)  # before any work: nothing is created when a flag is wrong
    if problems:
        return report(problems)
    expected: tuple[type[BaseException], ...] = (BenchmarkError, DamagedFileError, DataFolderError, PermissionError)
    if not args.results_json:  # scoring files needs no index code (importing it costs a fifth of a second)
        from cir_demo.index.manifest import StaleIndexError

        expected += (StaleIndexError,)

    def body() -> int:
        if args.results_json:
            # Scoring a file builds millions of small objects (ids, rankings, queries) that all live to
            # the end and hold no reference cycles: the collector's 300 passes over them free nothing and
            # cost a tenth of the run. Reference counting still frees everything; the collector is back after.
            was_enabled = gc.isenabled()
            gc.disable()
            try:
                return evaluate_results_files(args)
            finally:
                if was_enabled:
                    gc.enable()
        from cir_demo.harness.pipeline import run_benchmark

        return run_benchmark(args)

    return report_errors(body, debug=getattr(args, "debug", False), expected=expected)
