"""`python -m cir_demo failures`: the app's failure sorts, headless, over results files.

    python -m cir_demo failures --benchmark cirr --root cirr/ --results-json A.json B.json \\
        --sort diff:A,B --top 50 --out failures.csv

One row per query in sort order: `query_id`, `why`, then `<run>/<column>` for every per-query metric
of the benchmark's family and every per-query column its sorts read (`FailureViews.measures`: e.g.
`target_rank`, 1-based after the protocol's deletion or gallery cut over the whole file, empty when
the run does not rank the target; CIRR's `subset_rank`, `reference_rank`; CIRCO's `gt_found@10`,
`n_gt`). These are the rows `--eval` writes to per_query.csv for the same files, and the app's sorts
list the same queries in the same order. The run name is the file's stem, or NAME in `NAME=FILE`; a
run named `<run>+rerank` is that run reranked (the reranker sorts).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cir_demo.benchmarks.cli_args import add_benchmark_arguments, load_benchmark_from_args
from cir_demo.results.files import FORMAT_CHOICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_benchmark_arguments(p)
    p.add_argument(
        "--results-json",
        nargs="+",
        metavar="[NAME=]FILE",
        required=True,
        help="results files (any format --eval reads, detected per file); the run name is NAME, else the file stem",
    )
    p.add_argument("--results-format", default="auto", choices=FORMAT_CHOICES)
    p.add_argument(
        "--sort",
        default="worst",
        help="benchmark, worst, diff:A,B (A's largest gain over B first; diff:A,B:METRIC on another "
        "per-query metric), all_fail, rerank_helped, "
        "rerank_hurt (with <run>+rerank files), or a sort of the benchmark's family: "
        + family_sorts()
        + ". An unknown name lists those this benchmark offers. Default: worst",
    )
    p.add_argument(
        "--metric",
        default=None,
        help="the per-query metric a diff:A,B sort compares (default: the family's primary, e.g. "
        "CIRR's Recall@1); a headline or shown per-query metric of the family, e.g. Recall@5",
    )
    p.add_argument("--top", type=int, default=None, help="only the first N queries of the sort")
    p.add_argument(
        "--out",
        required=True,
        help="the CSV file to write (written atomically; an existing file is replaced only with --overwrite)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file (it is moved aside)")
    from cir_demo.utils.owned_folder import add_wait_argument

    add_wait_argument(p)


def family_sorts() -> str:
    """'pinpoint: negatives, spread, two_image; cirr: ...' (the --help list)."""
    from cir_demo.benchmarks.families import FAMILIES

    return "; ".join(
        f"{name}: {', '.join([*f.views().sorts, *f.views().extra_sorts]) or '(none)'}" for name, f in FAMILIES.items()
    )


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
        rows = failure_rows(bench, args.results_json, args.sort, args.results_format, args.metric)
    except (ServiceError, BenchmarkArgumentError, BenchmarkError) as exc:  # a flag, a sort, a file's problems
        print(f"error: {error_text(exc)}", file=sys.stderr)
        return 2
    if args.top is not None:
        rows = rows.head(args.top)
    from cir_demo.utils.io import write_text_atomic
    from cir_demo.utils.owned_folder import writing_files

    with writing_files([Path(args.out)], args.overwrite, args.wait):  # an earlier file is moved aside, kept
        write_text_atomic(Path(args.out), rows.to_csv(index=False))
    print(f"wrote {args.out} ({len(rows):,} queries, sort {args.sort})")
    return 0


def error_text(exc: BaseException) -> str:
    """The message of `exc` without the "error: " each validation issue starts with (the caller prints one)."""
    prefix = "error: "
    return "\n".join(line[len(prefix) :] if line.startswith(prefix) else line for line in str(exc).splitlines())


# per-query columns written as integers (empty when NaN: e.g. a target the run does not rank)
INTEGER_COLUMNS = ("target_rank", "subset_rank", "reference_rank", "n_gt", "gt_found@10", "n_neg")


def failure_rows(bench, paths, sort: str, fmt: str = "auto", metric: str | None = None):
    """The queries in the order of `sort` with `why` and every run's per-query columns (see the module doc).
    `paths`: `FILE` or `NAME=FILE` values; `metric`: what a diff:A,B sort compares (default the primary).
    Each file's rows are the store's (`RunStore.file_rows`: an eval run of the file, else the cache,
    else scored here): per_query.csv's rows."""
    from cir_demo.benchmarks.schema import BenchmarkError
    from cir_demo.explorer.own_runs import parse_run_args
    from cir_demo.results.files import read_results
    from cir_demo.store.store import RunStore

    store, frames = RunStore(bench), {}
    for arg in parse_run_args(paths):
        rf = read_results(arg.path, bench, fmt=fmt)
        for w in rf.warnings():
            print(f"warning: {arg.path}: {w.message}", file=sys.stderr)
        try:
            frames[arg.name] = store.file_rows(arg.name, rf)[0]
        except BenchmarkError as exc:  # e.g. a ranking repeating an image: named by the file it is in
            raise BenchmarkError(f"{arg.path}: {error_text(exc)}") from None
    return failure_rows_from(bench, frames, with_metric(sort, metric))


def failure_rows_from(bench, frames, sort: str):
    """`failure_rows` of runs given as their per-query rows `{name: rows}` (`RunStore.rows`: the app's
    /failures answers with this, so its rows are the command's and per_query.csv's)."""
    import pandas as pd

    from cir_demo.benchmarks.families import metric_family
    from cir_demo.benchmarks.registry import RERANK_SUFFIX
    from cir_demo.explorer.failures import SortContext, sort_rows
    from cir_demo.explorer.queries import query_table

    fam = metric_family(bench.metric_family)
    views = fam.views()
    names = list(frames)
    per_query = pd.concat([frames[n] for n in names], ignore_index=True)
    first = [n for n in names if not (n.endswith(RERANK_SUFFIX) and n[: -len(RERANK_SUFFIX)] in names)]
    metrics = [c for c in per_query.columns if "@" in c or c in fam.headline]
    metrics += [c for c in (*views.measures, views.finer) if c and c in per_query.columns and c not in metrics]
    ctx = SortContext(fam, query_table(bench), first, {n: "composed" for n in first}, reranked=len(first) < len(names))
    rows, _ = sort_rows(ctx.table, per_query, sort, ctx)
    out = rows[["query_id", "why"]].reset_index(drop=True)
    columns = {}  # joined once: a column inserted at a time copies the frame's blocks each time
    for name in names:
        own = per_query[per_query["run"] == name].set_index("query_id").reindex(out["query_id"])
        for m in metrics:
            values = own[m]
            if m in INTEGER_COLUMNS:  # ranks and counts: integers, empty when there is none
                values = values.map(lambda v: "" if v != v else str(int(v)))
            columns[f"{name}/{m}"] = values.to_numpy()
    return pd.concat([out, pd.DataFrame(columns, index=out.index)], axis=1)


def with_metric(sort: str, metric: str | None) -> str:
    """The sort `failures` runs: `--metric M` names the metric of a diff:A,B sort (`diff:A,B:M`, as the app
    names it); ServiceError for another sort or a diff sort naming its metric already."""
    from cir_demo.benchmarks.failure_views import DIFF_PREFIX
    from cir_demo.explorer.config import ServiceError

    if metric is None:
        return sort
    if not sort.startswith(DIFF_PREFIX):
        raise ServiceError(f"--metric {metric!r}: it chooses what a diff:A,B sort compares; sort {sort!r} is not one")
    if sort.count(":") > 1:
        raise ServiceError(f"--metric {metric!r}: sort {sort!r} names its metric already")
    return f"{sort}:{metric}"
