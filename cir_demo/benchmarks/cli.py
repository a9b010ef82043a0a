"""`python -m cir_demo validate`: check a benchmark's files and print its statistics.

Exit status: 0 valid (warnings allowed), 1 errors found, 2 bad command line.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter

_TOP_VALUES = 8


def add_arguments(p: argparse.ArgumentParser) -> None:
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments

    add_benchmark_arguments(p, required=True, limit=False)
    p.add_argument("--max-warnings", type=int, default=None, help="print at most this many warnings (default all)")


def run(args: argparse.Namespace) -> int:
    from cir_demo.benchmarks.registry import BenchmarkArgumentError, load_benchmark
    from cir_demo.benchmarks.schema import BenchmarkError
    from cir_demo.utils.names import UnknownNameError

    from cir_demo.benchmarks.cli_args import benchmark_kwargs

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


def _distribution(values: list[int]) -> str:
    if not values:
        return "none"
    return (f"min {min(values)}, median {statistics.median(values):g}, mean {statistics.fmean(values):.2f}, "
            f"max {max(values)} (total {sum(values)})")


def format_stats(bench) -> str:
    """Counts a reader checks first: sizes, groups, image counts, judgment distributions, metadata."""
    groups = bench.groups()
    sizes = [len(g) for g in groups.values()]
    n_single = sum(1 for q in bench.queries if len(q.reference_ids) == 1)
    lines = [
        f"benchmark: {bench.name} (metric family {bench.metric_family}, results ids {bench.results_id_format})",
        f"queries: {len(bench.queries)}",
        f"paraphrase groups: {len(groups)} (queries per group: {_distribution(sizes).split(' (total')[0]}; "
        f"{sum(1 for s in sizes if s == 1)} single-query groups)",
        f"corpus: {len(bench.corpus_ids)} images",
        f"reference images: {n_single} single-image queries, {len(bench.queries) - n_single} two-image queries, "
        f"{len({q.reference_ids for q in bench.queries})} distinct reference sets",
        f"positives per query: {_distribution([len(q.positives) for q in bench.queries])}",
        f"negatives per query: {_distribution([len(q.negatives) for q in bench.queries])}",
    ]
    for key in ("corpus_source", "image_dir", "image_mode", "grouping"):
        if bench.info.get(key):
            lines.append(f"{key.replace('_', ' ')}: {bench.info[key]}")
    for field in bench.meta_fields():
        counts: Counter = Counter()
        for q in bench.queries:
            v = q.meta.get(field)
            for item in (v if isinstance(v, (list, tuple)) else [v]):
                counts["(none)" if item is None else str(item)] += 1
        top = ", ".join(f"{k} {n}" for k, n in counts.most_common(_TOP_VALUES))
        more = f", ... ({len(counts)} values)" if len(counts) > _TOP_VALUES else ""
        lines.append(f"meta {field}: {top}{more}")
    return "\n".join(lines)
