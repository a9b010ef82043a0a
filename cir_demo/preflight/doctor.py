"""`python -m cir_demo doctor [benchmark flags] [--retrievers a,b] [--reranker R]`: one table of
what this machine can run now, what is missing, and the command that fixes each line.

Without --retrievers: the benchmark's default run (the world retrievers and the world
verifier on the world; every declared retriever elsewhere, so you see them all). Exit 0
when the requested run can start, 1 when a line is missing or blocked.
"""

from __future__ import annotations

import argparse

from typing import TYPE_CHECKING

from cir_demo.preflight.checks import Line

if TYPE_CHECKING:
    from cir_demo.preflight.request import RunRequest


def add_arguments(p: argparse.ArgumentParser) -> None:
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments

    add_benchmark_arguments(p, limit=False)
    p.add_argument(
        "--retrievers",
        help="comma-separated retrievers to check (default: the benchmark's default run; "
        "every declared retriever for a benchmark without one)",
    )
    p.add_argument("--reranker", help="reranker backend to check (default on the world: world-verifier; 'none' skips)")
    p.add_argument("--device", default=None, help="the device the run would use")
    p.add_argument("--trust-remote-code", action="store_true", help="the run would allow repository code (BGE-VL, GME)")
    p.add_argument("--debug", action="store_true", help="show the traceback of a failure")


def _requested(request: RunRequest) -> tuple[list[str], str | None, bool]:
    """(retrievers, reranker, explicit): what the doctor checks."""
    from cir_demo.benchmarks.registry import declared_defaults
    from cir_demo.retrievers.registry import family_module, list_retrievers

    spec = declared_defaults(request.benchmark.name)
    defaults = list(spec.default_retrievers) if spec else []
    if request.retrievers:
        names = [n.strip() for n in request.retrievers.split(",") if n.strip()]
    elif defaults:
        names = defaults
    else:
        names = [r["name"] for r in list_retrievers() if getattr(family_module(r["family"]), "RUNS_MODEL", True)]
    if request.rerank:
        reranker = None if request.rerank.lower() == "none" else request.rerank
    else:
        reranker = spec.default_reranker if spec else None
    return names, reranker, bool(request.retrievers) or bool(defaults)


def doctor_lines(request: RunRequest) -> tuple[list[Line], bool]:
    """(lines, can start). Without an explicit retriever list off the world, the run can start
    when the benchmark and at least one retriever are ready."""
    from cir_demo.preflight.checks import benchmark_lines, device_line, reranker_lines, retriever_lines
    from cir_demo.retrievers.registry import get_config

    names, reranker, explicit = _requested(request)
    for n in names:
        get_config(n)
    lines = [device_line(request.device)]
    _, blines = benchmark_lines(request.benchmark)
    lines += blines
    model: list[Line] = []
    for n in names:
        model += retriever_lines(n, trust_remote_code=request.trust_remote_code)
    if reranker:
        model += reranker_lines(reranker)
    lines += model
    others_ok = not any(ln.blocking for ln in lines if ln not in model)
    if explicit:
        ok = others_ok and not any(ln.blocking for ln in model)
    else:
        bad = {ln.item for ln in model if ln.blocking}
        ok = others_ok and any(f"retriever {n}" not in bad for n in names)
    return lines, ok


def run(args: argparse.Namespace) -> int:
    from cir_demo.benchmarks.cli_args import BenchmarkChoice
    from cir_demo.errors import report_errors
    from cir_demo.preflight.checks import render_table
    from cir_demo.preflight.request import RunRequest

    request = RunRequest(  # the flags, unpacked once: the run the doctor checks
        BenchmarkChoice.from_args(args, args.benchmark or "world"),
        retrievers=args.retrievers,
        rerank=args.reranker,
        device=args.device,
        trust_remote_code=bool(args.trust_remote_code),
    )

    def body() -> int:
        lines, ok = doctor_lines(request)
        print(render_table(lines))
        n_block = sum(ln.blocking for ln in lines)
        print(
            ("\nthe requested run can start" if ok else "\nthe requested run cannot start yet")
            + (f"; {n_block} line(s) missing or blocked, each with its fix above" if n_block else "")
        )
        return 0 if ok else 1

    return report_errors(body, debug=args.debug)
