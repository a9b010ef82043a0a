"""The checks a command makes on its arguments before any work: numeric flags, named retrievers
and rerankers (their committed weights present and checksummed), the output folder and the
data folders.

Every problem is a blocking `Line`. A command collects them all, prints each as "error: ..."
and exits 2 before it creates a file or spends a minute (`report`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from cir_demo.errors import USAGE_EXIT
from cir_demo.preflight.checks import Line
from cir_demo.preflight.flags import (
    COMMAND_INT_FLAGS,
    COMMAND_POSITIVE_FLOATS,
    GivenFlags,
    benchmark_flag_problems,
    benchmark_name_problems,
    fetch_flag_problems,
    int_problems,
    port_problems,
    positive_float_problems,
)
from cir_demo.preflight.folders import creatable_dir_problem, data_folder_problems, run_dir_problem

if TYPE_CHECKING:
    from cir_demo.index.cli import IndexFlags


def report(problems: Iterable[Line], file=None) -> int:
    """Print each problem as one "error: ..." line; USAGE_EXIT."""
    file = file or sys.stderr
    for p in problems:
        print(f"error: {p.message()}", file=file)
    return USAGE_EXIT


def _asset_problems(owner: str, config) -> list[Line]:
    from cir_demo.integrity import check_assets_of

    return [Line(owner, "missing", p) for p in check_assets_of(config)]  # each names its restore command


def retriever_problems(names: Sequence[str]) -> list[Line]:
    """Unknown retriever names ("did you mean") and damaged or missing committed weights."""
    from cir_demo.retrievers.registry import get_config
    from cir_demo.utils.names import UnknownNameError

    problems: list[Line] = []
    if not names:
        return [Line("--retrievers", "blocked", "no retriever named")]
    for name in names:
        try:
            config = get_config(name)
        except UnknownNameError as exc:
            problems.append(Line("--retrievers", "blocked", str(exc)))
            continue
        problems += _asset_problems(f"retriever {name!r}", config)
    return problems


def reranker_problems(backend: str, flag: str = "--rerank", **kw) -> list[Line]:
    """Unknown reranker backend, and damaged or missing committed weights it loads."""
    from cir_demo.rerank import reranker_settings
    from cir_demo.utils.names import UnknownNameError

    try:
        settings = reranker_settings(backend, **kw)
    except UnknownNameError as exc:
        return [Line(flag, "blocked", str(exc))]
    return _asset_problems(f"reranker {backend!r}", settings)


def _out_problems(
    path: str | None, flag: str, default_dir, default_what: str, run: bool = False, overwrite: bool = False, wait=False
) -> list[Line]:
    """The output folder a flag names, else the default data folder (when the data folders are usable)."""
    if path:
        problem = (
            run_dir_problem(Path(path), flag, overwrite, wait=wait) if run else creatable_dir_problem(Path(path), flag)
        )
    elif not data_folder_problems():
        problem = creatable_dir_problem(default_dir(), default_what, moved_in=False)  # runs are staged inside it
    else:
        problem = None
    return [problem] if problem else []


def eval_problems(flags: GivenFlags, index_uri: Sequence[str] = ()) -> list[Line]:
    """Everything `--eval` would trip on later, found now. `index_uri`: the --index-uri problems
    (index/cli.py's `index_uri_problems`, which the edge runs on its flags)."""
    from cir_demo.paths import runs_dir

    problems = data_folder_problems() + benchmark_flag_problems(flags)
    problems += int_problems(
        flags,
        [
            ("n_boot", 0, "a non-negative number of resamples (0 disables)"),
            ("bootstrap_seed", 0, "a non-negative integer"),
            ("rerank_top_n", 1, "a positive number of candidates"),
        ],
    )
    problems += fetch_flag_problems(flags)
    problems += [Line("", "blocked", p) for p in index_uri]
    unknown_benchmark = benchmark_name_problems(flags)
    if unknown_benchmark:  # first: the retrievers and reranker below are the benchmark's defaults
        return unknown_benchmark + problems
    if flags.get("results_json"):
        problems += [
            Line(f"--results-json {f}", "blocked", "not a file" if Path(f).exists() else "file not found")
            for f in flags.get("results_json")
            if not Path(f).is_file()
        ]
    else:
        from cir_demo.preflight.request import default_reranker, retriever_names

        try:
            names = retriever_names(flags.get("retrievers"), flags.get("benchmark"))
        except ValueError as exc:
            problems.append(Line("", "blocked", str(exc)))
        else:
            problems += retriever_problems(names)
        reranker = default_reranker(flags.get("benchmark"), flags.get("rerank"))
        if reranker:
            problems += reranker_problems(reranker)
    return problems + _out_problems(
        flags.get("out"),
        "--out",
        runs_dir,
        "runs folder",
        run=True,
        overwrite=bool(flags.get("overwrite")),
        wait=bool(flags.get("wait")),
    )


def index_build_problems(flags: GivenFlags, index: IndexFlags) -> list[Line]:
    """`index build`: `flags` as parsed, `index` its index flags typed (index/cli.py's `index_flags`)."""
    from cir_demo.paths import indexes_dir

    problems = benchmark_name_problems(flags) + data_folder_problems() + benchmark_flag_problems(flags)
    problems += int_problems(
        flags,
        [
            (a, 1, "a positive integer")
            for a in (
                "batch_size",
                "nlist",
                "nprobe",
                "train_size",
                "M",
                "ef_construction",
                "ef_search",
                "pq_m",
                "k_factor",
                "refine_bits",
            )
        ],
    )
    problems += fetch_flag_problems(flags)
    problems += retriever_problems([flags.get("retriever")])
    from cir_demo.index.cli import index_params, index_uri_problems, memory_budget

    problems += [Line("", "blocked", p) for p in index_uri_problems(index)]

    for check in (index_params, memory_budget):  # a parameter of another --kind; a budget that is not positive
        try:
            check(index)
        except ValueError as exc:
            problems.append(Line("", "blocked", str(exc)))
    out_dir = flags.get("out_dir")
    problems += _out_problems(out_dir, "--out-dir", indexes_dir, "indexes folder")
    if out_dir and not problems:
        from cir_demo.index.manifest import index_folder_problem

        in_the_way = index_folder_problem(Path(out_dir))
        if in_the_way:
            problems.append(Line(f"--out-dir {out_dir}", "blocked", in_the_way))
    return problems


def index_problems(flags: GivenFlags, index: IndexFlags) -> list[Line]:
    """`index build|status|list|prebuilt`: a wrong flag costs nothing and creates nothing."""
    if flags.action == "build":
        return index_build_problems(flags, index)
    return (
        benchmark_name_problems(flags)
        + data_folder_problems()
        + (benchmark_flag_problems(flags) if flags.action in ("status", "prebuilt") else [])
    )


def app_flag_problems(flags: GivenFlags, index_uri: Sequence[str] = ()) -> list[Line]:
    """`python app.py`: every flag before the server opens a socket (the flag table row ("app", None)
    in preflight/flags.py; a new flag's range is one row there). Retriever and reranker names are
    checked ("did you mean"); their weights are not: the app serves the columns that load."""
    problems = benchmark_name_problems(flags)
    if problems:
        return problems
    problems = data_folder_problems() + benchmark_flag_problems(flags) + port_problems(flags)
    problems += int_problems(flags, COMMAND_INT_FLAGS[("app", None)])
    problems += positive_float_problems(flags, COMMAND_POSITIVE_FLOATS[("app", None)])
    problems += _name_problems(flags)
    problems += [Line("", "blocked", p) for p in index_uri]
    return problems


def _name_problems(flags: GivenFlags) -> list[Line]:
    from cir_demo.retrievers.registry import get_config
    from cir_demo.utils.names import UnknownNameError

    problems: list[Line] = []
    for name in [n.strip() for n in (flags.get("retrievers") or "").split(",") if n.strip()]:
        try:
            get_config(name)
        except UnknownNameError as exc:
            problems.append(Line("--retrievers", "blocked", str(exc)))
    reranker = flags.get("reranker")
    if reranker and reranker.lower() != "none":
        from cir_demo.rerank import BACKENDS

        if reranker not in BACKENDS:
            problems.append(
                Line("--reranker", "blocked", str(UnknownNameError("reranker backend", reranker, BACKENDS)))
            )
    return problems
