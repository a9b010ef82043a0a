"""`python -m cir_demo images fetch|status`: a benchmark's images on this machine.

    python -m cir_demo images status --benchmark pinpoint --annotations A --corpus-ids C
    python -m cir_demo images fetch --benchmark pinpoint --annotations A --corpus-ids C [--workers 16]

`fetch` downloads what is missing into the benchmark's image cache (resumable: run it
again after an interruption), and writes the ids that could not be fetched, with the
reason, to a report. Exit status: 0 when every image is present or the only failures
are permanent (the server says the image is gone), 1 when some failed transiently
(running it again may get them), 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys


def add_fetch_arguments(p: argparse.ArgumentParser, fetch_flag: bool = False) -> None:
    """The fetch knobs, shared with `--fetch-images` (added with `fetch_flag`) on eval, index build and the app."""
    g = p.add_argument_group("image fetching")
    if fetch_flag:
        g.add_argument(
            "--fetch-images",
            action="store_true",
            help="download the benchmark's missing images first (as `python -m cir_demo images fetch`)",
        )
    from cir_demo.images.benchmark_fetch import FetchSettings

    d = FetchSettings()
    g.add_argument("--fetch-workers", type=int, default=d.workers, help=f"parallel downloads (default {d.workers})")
    g.add_argument(
        "--fetch-retries",
        type=int,
        default=d.retries,
        help=f"retries per image for transient failures (default {d.retries})",
    )
    g.add_argument(
        "--fetch-timeout", type=float, default=d.timeout, help=f"seconds per request (default {d.timeout:g})"
    )
    g.add_argument(
        "--url-pattern",
        help="fetch from this address instead, with {id} for the image id (a mirror, e.g. http://host/{id}.jpg)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments

    sub = p.add_subparsers(dest="images_command", metavar="ACTION")
    f = sub.add_parser("fetch", help="download the benchmark's missing images into its image cache")
    add_benchmark_arguments(f, default=None, required=True)
    add_fetch_arguments(f)
    f.add_argument(
        "--report",
        help="where to write the ids that could not be fetched (default: fetch_failed.tsv in the image cache)",
    )
    f.add_argument("--no-progress", action="store_true")
    f.add_argument("--debug", action="store_true", help="show tracebacks")
    s = sub.add_parser("status", help="count the benchmark's images present and missing")
    add_benchmark_arguments(s, default=None, required=True)
    s.add_argument("--debug", action="store_true", help="show tracebacks")


def fetch_settings(args: argparse.Namespace):
    """The fetch flags (`add_fetch_arguments`, `--report`, `--no-progress`), unpacked once."""
    from cir_demo.images.benchmark_fetch import FetchSettings

    return FetchSettings(
        workers=args.fetch_workers,
        retries=args.fetch_retries,
        timeout=args.fetch_timeout,
        url_pattern=args.url_pattern,
        report=getattr(args, "report", None),  # images fetch only
        progress=not getattr(args, "no_progress", False),
    )


def _fetch(args: argparse.Namespace) -> int:
    from cir_demo.benchmarks.cli_args import load_benchmark_from_args

    bench = load_benchmark_from_args(args)
    from cir_demo.images.benchmark_fetch import fetch_for

    report = fetch_for(bench, fetch_settings(args))
    print(report.summary())
    transient = {i: r for i, r in report.failed.items() if i not in report.permanent}
    if transient:
        print(
            f"{len(transient)} images failed for reasons that may pass (e.g. {next(iter(transient.values()))}); "
            "run the same command again to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


def _status(args: argparse.Namespace) -> int:
    from cir_demo.benchmarks.cli_args import BenchmarkChoice
    from cir_demo.images.coverage import fetch_command, image_coverage

    choice = BenchmarkChoice.from_args(args)
    bench = choice.load()
    cov = image_coverage(bench)
    if cov is None:
        print(f"benchmark {bench.name!r}: images are generated on demand; nothing to fetch")
        return 0
    print(cov.describe())
    if cov.missing:
        print(f"{cov.n_missing} missing" + (f"; fetch them with `{fetch_command(choice)}`" if cov.fetchable else ""))
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    from cir_demo.errors import report_errors

    action = {"fetch": _fetch, "status": _status}.get(getattr(args, "images_command", None))
    if action is None:
        print("usage: python -m cir_demo images {fetch,status} --benchmark B ...", file=sys.stderr)
        return 2
    return report_errors(lambda: action(args), debug=getattr(args, "debug", False))
