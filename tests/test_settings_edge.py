"""A command's flags are unpacked once, at its edge, into typed settings: no module below the CLI
modules takes an argparse Namespace or reads one with `getattr(args, ...)`.

The edge: every `cli.py` / `cli_args.py` / `*_cli.py`, the package's `cli.py`, the app's entry (ui/),
and the `add_arguments`, `run` and `*_settings` (the unpacking) of each command's module
(cir_demo/cli.py's COMMANDS and RUNNERS).
A function elsewhere that has a parameter annotated `Namespace`, a parameter named `args`, or calls
`getattr(args, ...)` is a finding, and there are none."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cir_demo"


def _edge_function(rel: str, function: str, command_modules: set[str]) -> bool:
    """`add_arguments`, `run` and the `*_settings` unpackers of a command's module: where its flags arrive."""
    return rel in command_modules and (function in ("add_arguments", "run") or function.endswith("_settings"))


def _edge_module(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return (
        name in ("cli.py", "cli_args.py", "__main__.py") or name.endswith("_cli.py") or rel.startswith("cir_demo/ui/")
    )


def findings_in(source: str, rel: str) -> set[tuple[str, str]]:
    """(module, function) for each function of `source` that takes or reads a Namespace."""
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = child.name if function is None else function  # a nested function is its outer one's
                params = child.args.posonlyargs + child.args.args + child.args.kwonlyargs
                if any(
                    p.arg == "args" or (p.annotation is not None and "Namespace" in ast.unparse(p.annotation))
                    for p in params
                ):
                    found.add((rel, name))
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name)
                and child.func.id == "getattr"
                and child.args
                and isinstance(child.args[0], ast.Name)
                and child.args[0].id == "args"
            ):
                found.add((rel, function or "<module>"))
            visit(child, name)

    visit(ast.parse(source), None)
    return found


def package_findings() -> set[tuple[str, str]]:
    from cir_demo.cli import COMMANDS, RUNNERS

    commands = {m.replace(".", "/") + ".py" for m in {m for m, _ in COMMANDS.values()} | set(RUNNERS.values())}
    found: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not _edge_module(rel):
            source = path.read_text(encoding="utf-8")
            found |= {f for f in findings_in(source, rel) if not _edge_function(*f, commands)}
    return found


def test_no_namespace_below_the_cli_edge():
    found = sorted(package_findings())
    assert not found, (
        "these functions take or read an argparse Namespace below the CLI edge; unpack the flags once "
        f"in the command's cli module into typed settings and pass those: {found}"
    )


def test_the_checker_finds_each_form():
    """The checker itself: an annotated parameter, a parameter named args, a getattr, a nested function."""
    source = (
        "import argparse\n"
        "def a(x: argparse.Namespace): pass\n"
        "def b(args): pass\n"
        "def c(s):\n    return getattr(args, 'out', None)\n"
        "def d(settings):\n    def inner():\n        return getattr(args, 'x')\n    return inner\n"
        "def e(settings, *args): return settings\n"
        "def f(settings): return getattr(settings, 'out')\n"
    )
    assert findings_in(source, "m.py") == {("m.py", "a"), ("m.py", "b"), ("m.py", "c"), ("m.py", "d")}


def test_eval_without_flags_unpacks_to_the_settings_defaults():
    """The defaults live in the settings types: `eval` with no flags unpacks to EvalSettings' own defaults
    (FetchSettings' for the fetch flags); an argparse default written apart from them would differ."""
    from cir_demo.cli import build_parser
    from cir_demo.harness.cli import eval_settings
    from cir_demo.harness.settings import EvalSettings

    settings = eval_settings(build_parser().parse_args(["eval"]))
    assert settings == EvalSettings(benchmark=settings.benchmark)  # fetch included: FetchSettings compares by value


def test_the_app_without_flags_unpacks_to_the_settings_defaults():
    """`python app.py` with no flags: AppSettings' own defaults (the parser reads them from there)."""
    from cir_demo.ui.settings import AppSettings
    from cir_demo.ui.startup import app_settings, build_parser

    settings = app_settings(build_parser().parse_args([]))
    assert settings.benchmark.name == "world" and settings == AppSettings(benchmark=settings.benchmark)


def test_index_commands_without_flags_unpack_to_the_settings_defaults():
    """`index build` and `index prebuilt` with only their required flags: IndexBuild's and
    PrebuiltSettings' defaults (index/cli.py's parser sits below harness/, so its defaults are written
    there too: this holds the two together)."""
    from cir_demo.benchmarks.cli_args import BenchmarkChoice
    from cir_demo.cli import build_parser
    from cir_demo.harness.index_run import IndexBuild, PrebuiltSettings, build_settings, prebuilt_settings

    parse = build_parser().parse_args
    assert prebuilt_settings(parse(["index", "prebuilt"])) == PrebuiltSettings(BenchmarkChoice("world"))
    build = build_settings(parse(["index", "build", "--benchmark", "world", "--retriever", "r"]))
    assert build == IndexBuild(build.request, "r")


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--rerun"], "--rerun goes with --check"),
        (["--all"], "--all, --draw-seed and --sample go with --check"),
        (["--draw-seed", "3"], "--all, --draw-seed and --sample go with --check"),
        (["--sample", "3"], "--all, --draw-seed and --sample go with --check"),
        (["--check", "--sample", "0"], "--sample 0: draw at least 1"),
        (["--check", "--limit", "2"], "--limit goes with --only eval"),
    ],
)
def test_index_prebuilt_refuses_a_flag_without_the_one_it_goes_with(argv, flag, capsys):
    """Refused as before any work, in one line naming the flags (the settings' unpacking checks them)."""
    from cir_demo.cli import main

    assert main(["index", "prebuilt", "--world-size", "tiny", *argv]) == 1
    assert capsys.readouterr().err.splitlines() == [f"error: {flag}" + ERRORS[flag]]


ERRORS = {
    "--rerun goes with --check": " (it checks the shipped --eval outputs by running --eval again)",
    "--all, --draw-seed and --sample go with --check": " (they choose the intents it recomputes)",
    "--sample 0: draw at least 1": " intent per split (--all: every one)",
    "--limit goes with --only eval": " (corpus embeddings are always of the whole corpus)",
}
