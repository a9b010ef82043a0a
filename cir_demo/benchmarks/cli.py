"""`python -m cir_demo validate`: check a benchmark's files and print its statistics.

Exit status: 0 valid (warnings allowed), 1 errors found, 2 bad command line.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments

    add_benchmark_arguments(p, required=True, limit=False)
    p.add_argument("--max-warnings", type=int, default=None, help="print at most this many warnings (default all)")


def run(args: argparse.Namespace) -> int:
    from cir_demo.benchmarks.registry import BenchmarkArgumentError, load_benchmark
    from cir_demo.benchmarks.schema import BenchmarkError
    from cir_demo.utils.names import UnknownNameError

    from cir_demo.benchmarks.cli_args import benchmark_kwargs
    from cir_demo.benchmarks.stats import format_stats

    try:
        bench = load_benchmark(args.benchmark, **benchmark_kwargs(args))
    except (UnknownNameError, BenchmarkArgumentError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BenchmarkError as exc:
        issues = list(exc.issues)
        errors = [i for i in issues if i.level == "error"] or [exc]
        warnings = [i for i in issues if i.level == "warning"]
        _print_issues("warnings", warnings, args.max_warnings)
        _print_issues("errors", errors, None)
        print(f"INVALID: {len(errors)} error(s), {len(warnings)} warning(s)")
        return 1
    print(format_stats(bench))
    _print_issues("warnings", bench.warnings, args.max_warnings)
    print(f"OK: 0 errors, {len(bench.warnings)} warning(s)")
    return 0


def _print_issues(title: str, issues: list, limit: int | None) -> None:
    if not issues:
        print(f"{title}: none")
        return
    print(f"{title} ({len(issues)}):")
    for issue in issues[:limit] if limit is not None else issues:
        print(f"  {issue}")
    if limit is not None and len(issues) > limit:
        print(f"  ... and {len(issues) - limit} more")
