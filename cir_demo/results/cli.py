"""`python -m cir_demo submission`: a benchmark's test-server files from results files (CIRR test1).

    python -m cir_demo submission --benchmark cirr --root CIRR/ --split test1 --results-json run.json [--out DIR]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cir_demo.benchmarks.cli_args import add_benchmark_arguments, load_benchmark_from_args
from cir_demo.results.files import FORMAT_CHOICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_benchmark_arguments(p, default="cirr", limit=False, benchmark_help="cirr (the only benchmark with a "
                            "submission format here; default)")
    p.add_argument("--results-json", nargs="+", metavar="FILE", required=True,
                   help="results files (any format --eval reads); one pair of submission files each")
    p.add_argument("--results-format", default="auto", choices=FORMAT_CHOICES)
    p.add_argument("--out", default=".", help="folder for the submission files (default: here)")


def run(args: argparse.Namespace) -> int:
    from cir_demo.benchmarks.schema import BenchmarkError
    from cir_demo.results.cirr_submission import write_cirr_submission
    from cir_demo.results.files import read_results

    try:
        bench = load_benchmark_from_args(args)
        for path in args.results_json:
            rf = read_results(path, bench, fmt=args.results_format)
            for w in rf.warnings():
                print(f"warning: {path}: {w.message}", file=sys.stderr)
            paths, notes = write_cirr_submission(bench, rf.run, Path(args.out), rf.name)
            for note in notes:
                print(f"warning: {path}: {note}", file=sys.stderr)
            print("\n".join(f"wrote {p}" for p in paths.values()))
    except BenchmarkError as exc:
        from cir_demo.errors import print_error

        return print_error(exc)  # one "error:" per problem, exit 2 (a problem in the files given)
    return 0
