"""`python -m cir_demo submission`: a benchmark's test-server files from results files (CIRR test1, CIRCO test).

python -m cir_demo submission --benchmark cirr --root CIRR/ --split test1 --results-json run.json [--out DIR]
python -m cir_demo submission --benchmark circo --annotations CIRCO/ --split test --results-json run.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cir_demo.benchmarks.cli_args import add_benchmark_arguments, load_benchmark_from_args
from cir_demo.results.files import FORMAT_CHOICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_benchmark_arguments(
        p,
        default="cirr",
        limit=False,
        benchmark_help="cirr (default: two files per run, "
        "for the test1 server) or circo (one file per run, for the test split's server)",
    )
    p.add_argument(
        "--results-json",
        nargs="+",
        metavar="FILE",
        required=True,
        help="results files (any format --eval reads); each gives its submission file(s)",
    )
    p.add_argument("--results-format", default="auto", choices=FORMAT_CHOICES)
    p.add_argument(
        "--out",
        default=".",
        help="folder for the submission files (default: here); a file of the same "
        "name there is replaced only with --overwrite",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace submission files of the same names in --out (moved aside)"
    )
    from cir_demo.utils.owned_folder import add_wait_argument

    add_wait_argument(p)


def run(args: argparse.Namespace) -> int:
    from cir_demo.benchmarks.schema import BenchmarkError
    from cir_demo.results.files import read_results
    from cir_demo.utils.owned_folder import file_write_problem, writing_files

    try:
        bench = load_benchmark_from_args(args)
        files = [read_results(path, bench, fmt=args.results_format) for path in args.results_json]
        submission_paths, write_submission = _writer(bench)
        problems = [
            f"error: {p}: {why}"
            for rf in files
            for p in submission_paths(args.out, rf.name).values()
            if (why := file_write_problem(p, args.overwrite))
        ]
        if problems:  # before writing any
            print("\n".join(problems), file=sys.stderr)
            return 2
        every = [Path(p) for rf in files for p in submission_paths(args.out, rf.name).values()]
        with writing_files(every, args.overwrite, args.wait):  # files of those names are moved aside, kept
            for path, rf in zip(args.results_json, files):
                for w in rf.warnings():
                    print(f"warning: {path}: {w.message}", file=sys.stderr)
                paths, notes = write_submission(bench, rf.run, Path(args.out), rf.name)
                for note in notes:
                    print(f"warning: {path}: {note}", file=sys.stderr)
                print("\n".join(f"wrote {p}" for p in paths.values()))
    except BenchmarkError as exc:
        from cir_demo.errors import print_error

        return print_error(exc)  # one "error:" per problem, exit 2 (a problem in the files given)
    return 0


def _writer(bench):
    """(submission paths of a run name, writer) of the benchmark's server; BenchmarkError for one without."""
    from cir_demo.benchmarks.schema import BenchmarkError

    if bench.metric_family == "cirr":
        from cir_demo.results.cirr_submission import submission_paths, write_cirr_submission

        return submission_paths, write_cirr_submission
    if bench.metric_family == "circo":
        from cir_demo.results.circo_submission import submission_path, write_circo_submission

        return (lambda out, name: {"predictions": submission_path(out, name)}), write_circo_submission
    raise BenchmarkError(
        f"benchmark {bench.name!r}: submission files are written for CIRR (test1) and "
        "CIRCO (test) only; other benchmarks are scored here with --eval"
    )
