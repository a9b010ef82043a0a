"""`python -m cir_demo failures`: the app's failure sorts, headless, over results files.

    python -m cir_demo failures --benchmark cirr --root cirr/ --results-json A.json B.json \\
        --sort diff:A,B --top 50 --out failures.csv

One row per query in sort order: `query_id`, `why`, then `<run>/<metric>` for every per-query metric
of the benchmark's family, plus `<run>/target_rank` (1-based, after the protocol's deletion or
gallery cut; empty when the run does not rank the target) for single-target families. The run
name is the file's stem; a file named `<run>+rerank` is that run reranked (the reranker sorts).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cir_demo.benchmarks.cli_args import add_benchmark_arguments, load_benchmark_from_args
from cir_demo.results.files import FORMAT_CHOICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_benchmark_arguments(p)
    p.add_argument("--results-json", nargs="+", metavar="FILE", required=True,
                   help="results files (any format --eval reads, detected per file); the run name is the file stem")
    p.add_argument("--results-format", default="auto", choices=FORMAT_CHOICES)
    p.add_argument("--sort", default="worst",
                   help="benchmark, worst, diff:A,B (A's largest gain over B first), all_fail, rerank_helped, "
                        "rerank_hurt (with <run>+rerank files), or a sort of the benchmark's family: "
                        + family_sorts() + ". An unknown name lists those this benchmark offers. Default: worst")
    p.add_argument("--top", type=int, default=None, help="only the first N queries of the sort")
    p.add_argument("--out", required=True, help="the CSV file to write (written atomically; an existing file is "
                                                "replaced only with --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")


def family_sorts() -> str:
    """'pinpoint: negatives, spread, two_image; cirr: ...' (the --help list)."""
    from cir_demo.benchmarks.families import FAMILIES

    return "; ".join(f"{name}: {', '.join([*f.views().sorts, *f.views().extra_sorts]) or '(none)'}"
                     for name, f in FAMILIES.items())


def run(args: argparse.Namespace) -> int:
    from cir_demo.benchmarks.registry import BenchmarkArgumentError
    from cir_demo.benchmarks.schema import BenchmarkError
    from cir_demo.explorer.config import ServiceError

    if args.top is not None and args.top < 1:
        print(f"error: --top must be a positive integer, got {args.top}", file=sys.stderr)
        return 2
    if Path(args.out).is_dir():
        print(f"error: --out {args.out} is a folder; name the CSV file to write", file=sys.stderr)
        return 2
    try:
        bench = load_benchmark_from_args(args)
        rows = failure_rows(bench, args.results_json, args.sort, args.results_format)
    except (ServiceError, BenchmarkArgumentError) as exc:  # a flag the benchmark needs, a sort it lacks
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.top is not None:
        rows = rows.head(args.top)
    from cir_demo.utils.io import write_text_atomic

    write_text_atomic(Path(args.out), rows.to_csv(index=False))
    print(f"wrote {args.out} ({len(rows):,} queries, sort {args.sort})")
    return 0


def failure_rows(bench, paths, sort: str, fmt: str = "auto"):
    """The queries in the order of `sort` with `why` and every run's per-query metrics (see the module doc)."""
    from cir_demo.results.files import read_results

    runs: dict = {}
    for path in paths:
        rf = read_results(path, bench, fmt=fmt)
        for w in rf.warnings():
            print(f"warning: {path}: {w.message}", file=sys.stderr)
        name = rf.name if rf.name not in runs else f"{rf.name}_{len(runs)}"
        runs[name] = rf.run
    return failure_rows_of(bench, runs, sort)


def failure_rows_of(bench, runs, sort: str):
    """`failure_rows` of runs given as `{name: {query id: ids best first}}` (the app's /failures answers with
    this, so its rows are the command's); `<run>+rerank` is that run reranked."""
    import pandas as pd

    from cir_demo.benchmarks.families import metric_family
    from cir_demo.benchmarks.registry import RERANK_SUFFIX
    from cir_demo.explorer.failures import SortContext, per_query_frame, sort_rows
    from cir_demo.explorer.queries import query_table

    fam = metric_family(bench.metric_family)
    views = fam.views()
    names = list(runs)
    frames = [per_query_frame(fam, name, run, bench.queries) for name, run in runs.items()]
    per_query = pd.concat(frames, ignore_index=True)
    first = [n for n in names if not (n.endswith(RERANK_SUFFIX) and n[:-len(RERANK_SUFFIX)] in names)]
    ctx = SortContext(fam, query_table(bench), first, {n: "composed" for n in first}, reranked=len(first) < len(names))
    rows, _ = sort_rows(ctx.table, per_query, sort, ctx)
    metrics = [c for c in per_query.columns if ("@" in c or c in fam.headline) and c not in views.measures]
    if views.target_rank:
        metrics.append("target_rank")
    out = rows[["query_id", "why"]].reset_index(drop=True)
    for name in names:
        own = per_query[per_query["run"] == name].set_index("query_id").reindex(out["query_id"])
        for m in metrics:
            values = own[m]
            if m == "target_rank":  # 1-based integers; empty when not ranked
                values = values.map(lambda v: "" if v != v else str(int(v)))
            out[f"{name}/{m}"] = values.to_numpy()
    return out
