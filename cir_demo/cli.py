"""`python -m cir_demo COMMAND ...`: one subcommand per stage.

Each subcommand's flags live in its stage's package, in a `cli.py` with `add_arguments(parser)`;
`run(args) -> int` runs it, in the same module unless the run needs more than the package's
layer may import (`index build` makes the pre-run checks of preflight/ first: harness/index_run.py).
A command's modules are imported only when used, so `python -m cir_demo world ...` never pays for torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command -> (module with add_arguments, and run unless RUNNERS names another, one-line help)
COMMANDS = {
    "world": ("cir_demo.world.cli", "generate the offline world, draw contact sheets, export it"),
    "validate": ("cir_demo.benchmarks.cli", "validate a benchmark's files and print its statistics"),
    "retrievers": ("cir_demo.retrievers.cli", "list the declared retrievers and show one's config"),
    "index": ("cir_demo.index.cli", "build, check and list FAISS indexes"),
    "train": ("cir_demo.training.cli", "train the world models (world-CLIP, world-CIR, world verifier)"),
    "rerank": ("cir_demo.rerank.cli", "rerank a results file or one query with a reranker backend"),
    "doctor": (
        "cir_demo.preflight.doctor",
        "what this machine can run now, what is missing, and the command that fixes each",
    ),
    "images": ("cir_demo.images.cli", "fetch a benchmark's images (parallel, resumable) or count those present"),
    "submission": (
        "cir_demo.results.cli",
        "write a benchmark's test-server files from results files (CIRR test1, CIRCO test)",
    ),
    "eval": ("cir_demo.harness.cli", "evaluate results files or run the full benchmark (same as app.py --eval)"),
    "record": ("cir_demo.harness.record_cli", "results of record: --eval on several fresh world seeds, mean and range"),
    "docs": (
        "cir_demo.harness.docs_cli",
        "redraw the README's and docs' results tables from the committed record CSVs",
    ),
    "failures": ("cir_demo.explorer.cli", "the app's failure sorts over results files, as a CSV (one row per query)"),
}
RUNNERS = {
    "index": "cir_demo.harness.index_run",
    "rerank": "cir_demo.harness.rerank_run",
}  # command -> module with run, where not its COMMANDS module


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cir_demo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=RUNNERS.get(name, module))
        try:
            importlib.import_module(module).add_arguments(p)
        except ModuleNotFoundError as exc:  # a stage not installed in this build
            p.set_defaults(_missing=str(exc))
    return parser


def main(argv: list[str] | None = None) -> int:
    from cir_demo.utils.gc_pause import kept_for_life
    from cir_demo.utils.parse_memo import install as parse_each_source_once

    parse_each_source_once()  # before the commands' modules load: each source file parsed once in this process
    with kept_for_life():  # every command's flags read from its module: the modules imported (utils/gc_pause.py)
        parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    if getattr(args, "_missing", None):
        print(f"error: command {args.command!r} is unavailable: {args._missing}", file=sys.stderr)
        return 2
    from cir_demo.preflight.commands import report
    from cir_demo.preflight.flags import GivenFlags, command_flag_problems
    from cir_demo.preflight.folders import command_out_problems
    from cir_demo.paths import DataFolderError
    from cir_demo.utils.owned_folder import FolderInTheWay

    # --benchmark, --world-seed, --limit: the same rule for every command; the numeric flags of world
    # and train, and the --out folders of world generate and train (eval and index check all their flags themselves)
    flags = GivenFlags.of(vars(args))  # what the checks read: the flags as parsed, read-only
    problems = [] if args.command in ("eval", "index") else command_flag_problems(flags) + command_out_problems(flags)
    if problems:
        return report(problems)
    try:
        with kept_for_life():
            runner = importlib.import_module(args._module)
        return int(runner.run(args) or 0)
    except (DataFolderError, FolderInTheWay) as exc:  # a data folder naming a file; an output in use or a link
        print(f"error: {exc}", file=sys.stderr)
        return 2
