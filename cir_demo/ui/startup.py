"""What `python app.py` does before it imports gradio (a fifth of a first start): read and check the
command line, and on a first start begin generating the benchmark's data (the offline world) in a
child process, which then runs on another core while gradio is imported and the page is built."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass, fields, replace
from typing import Sequence

from cir_demo.ui.settings import AppSettings


@dataclass
class Startup:
    settings: AppSettings  # the flags, typed and checked (`--port 0`: the port chosen)
    world_child: subprocess.Popen | None = None  # generating the benchmark's data (None: nothing to generate)

    def stop(self) -> None:
        """End the child (a start that stops before serving)."""
        from cir_demo.benchmarks.generate_aside import stop

        stop(self.world_child)


def prepare(argv: Sequence[str] | None = None) -> Startup | int:
    """The parsed flags, every one checked before any work and before the server opens a socket, and the
    data generation begun; an exit status instead when a flag is wrong (its lines printed)."""
    from cir_demo.benchmarks.generate_aside import generate_aside
    from cir_demo.index.cli import index_flags, index_uri_problems
    from cir_demo.preflight.checks import Line
    from cir_demo.preflight.commands import app_flag_problems, report
    from cir_demo.preflight.flags import GivenFlags

    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    problems = app_flag_problems(GivenFlags.of(vars(args)), index_uri_problems(index_flags(args)))
    if problems:
        return report(problems)
    settings = app_settings(args)
    problem = mcp_problem() if mcp_asked(settings.mcp) else None
    if problem:
        print(f"error: --mcp (or GRADIO_MCP_SERVER=True): {problem}", file=sys.stderr)
        return 2
    from cir_demo.preflight.flags import settle_port

    # before gradio's import, which reads $GRADIO_SERVER_PORT
    settings = replace(settings, port=settle_port(settings.port, settings.server_name))
    startup = Startup(settings, generate_aside(settings.benchmark.name, dict(settings.benchmark.kwargs)))
    from cir_demo.explorer.own_runs import runs_problems  # imports the explorer (~1 s): the child runs meanwhile

    problems = [Line("", "blocked", p) for p in runs_problems(settings.runs)]  # --runs: files the explorer reads
    if problems:
        startup.stop()
        return report(problems)
    return startup


def app_settings(args: argparse.Namespace) -> AppSettings:
    """The app's flags, unpacked once (after their checks: `app_flag_problems`)."""
    from cir_demo.benchmarks.cli_args import BenchmarkChoice
    from cir_demo.images.cli import fetch_settings

    retrievers = tuple(r.strip() for r in args.retrievers.split(",") if r.strip()) if args.retrievers else None
    return AppSettings(
        BenchmarkChoice.from_args(args),
        retrievers=retrievers,
        runs=tuple(args.runs or ()),
        reranker=args.reranker,
        reranker_model=args.reranker_model,
        device=args.device,
        trust_remote_code=bool(args.trust_remote_code),
        allow_stale=bool(args.allow_stale),
        index_uri=args.index_uri,
        threads=args.threads,
        fetch_images=bool(args.fetch_images),
        fetch=fetch_settings(args),
        server_name=args.server_name,
        port=args.port,
        share=bool(args.share),
        queue_size=args.queue_size,
        concurrency=args.concurrency,
        mcp=bool(args.mcp),
        precompute=not args.no_precompute,
        thumbnail_warmer=not args.no_thumbnail_warmer,
        debug=bool(args.debug),
    )


def mcp_asked(flag: bool) -> bool:
    """`--mcp` (`flag`), or gradio's own switch for it set in the environment (a Space's variable)."""
    import os

    return flag or os.environ.get("GRADIO_MCP_SERVER", "").lower() == "true"


def mcp_problem() -> str | None:
    """Why gradio's MCP server cannot run here (its optional `mcp` package missing, or of a version outside
    the range gradio's `mcp` extra names), else None."""
    from importlib import metadata

    from packaging.requirements import Requirement

    fix = 'pip install "gradio[mcp]"'
    try:
        have = metadata.version("mcp")
    except metadata.PackageNotFoundError:
        return f"gradio's MCP server needs the optional package mcp, which is not installed: {fix}"
    for line in metadata.requires("gradio") or []:
        req = Requirement(line)
        wanted = req.name == "mcp" and req.marker is not None and req.marker.evaluate({"extra": "mcp"})
        if wanted and not req.specifier.contains(have, prereleases=True):
            return (
                f"gradio {metadata.version('gradio')}'s MCP server needs mcp{req.specifier}, "
                f"this environment has mcp {have}: {fix}"
            )
    return None


def build_parser() -> argparse.ArgumentParser:
    default = {f.name: f.default for f in fields(AppSettings)}  # the defaults, written once there
    p = argparse.ArgumentParser(
        prog="python app.py",
        description="The CIR failure explorer (Gradio). Runs on the offline world by default; "
        "`python app.py --eval --help` for the headless benchmark run.",
    )
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments

    add_benchmark_arguments(p)
    m = p.add_argument_group("models")
    m.add_argument(
        "--retrievers",
        help="comma-separated retriever names, up to 4 shown at once (default on the "
        "world: world-cir, world-clip-fusion, world-clip-image, world-clip-text, those registered)",
    )
    m.add_argument(
        "--runs",
        nargs="+",
        metavar="[NAME=]FILE",
        help="your own results files as columns (every format --eval reads, detected per file; the "
        "column is named NAME or the file's stem), beside --retrievers or instead of the default "
        "models; an eval run folder (--eval --out) is listed in the Report",
    )
    m.add_argument(
        "--reranker", help="reranker backend name, or 'none' (default on the world: world-verifier when available)"
    )
    m.add_argument("--reranker-model", help="model path or name passed to the reranker backend (model=...)")
    m.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    m.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow retrievers that run their model repository's code (BGE-VL, GME); never the default",
    )
    m.add_argument(
        "--allow-stale", action="store_true", help="serve stale indexes (with a warning) instead of rebuilding"
    )
    from cir_demo.index.cli import add_index_uri_argument

    add_index_uri_argument(m)
    m.add_argument(
        "--threads",
        type=int,
        default=default["threads"],
        help=f"torch CPU threads per request while serving (default {default['threads']}: fastest for single queries; "
        "index builds use all cores)",
    )
    m.add_argument(
        "--fetch-images",
        action="store_true",
        help="download the benchmark's missing images before loading (as `python -m cir_demo images fetch`)",
    )
    from cir_demo.images.cli import add_fetch_arguments

    add_fetch_arguments(p)
    s = p.add_argument_group("server")
    s.add_argument(
        "--server-name",
        default=None,
        help="interface to listen on (default: $GRADIO_SERVER_NAME, else 127.0.0.1; 0.0.0.0 for all)",
    )
    s.add_argument(
        "--port", type=int, default=None, help="port (default: $GRADIO_SERVER_PORT, else 7860 or the next free one)"
    )
    s.add_argument("--share", action="store_true", help="also serve through a temporary public gradio.live link")
    s.add_argument(
        "--queue-size",
        type=int,
        default=default["queue_size"],
        help=f"requests waiting at most; more are refused (default {default['queue_size']})",
    )
    s.add_argument(
        "--concurrency",
        type=int,
        default=default["concurrency"],
        help=f"requests worked on at once (default {default['concurrency']})",
    )
    s.add_argument(
        "--mcp",
        action="store_true",
        help="also serve the API endpoints (/search, /query, /failures, /evaluate, /image) as MCP tools "
        "at /gradio_api/mcp/ (needs gradio[mcp]; on a Space: put --mcp in CIR_DEMO_ARGS)",
    )
    s.add_argument(
        "--no-precompute",
        action="store_true",
        help="do not compute the failure sorts and the report in a low-priority background eval run "
        "on a first start (they are then computed when first asked for)",
    )
    s.add_argument(
        "--no-thumbnail-warmer",
        action="store_true",
        help="do not pre-render thumbnails in a low-priority background process",
    )
    s.add_argument(
        "--debug",
        action="store_true",
        help="write the traceback of every failure to the log (default: one line per known fault)",
    )
    return p
