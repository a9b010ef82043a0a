"""Checks run before any work: numeric flags, named retrievers and rerankers (their committed
weights present and checksummed), the output folder and the data folders.

Every problem is one line. A command collects them all, prints each as "error: ..." and exits
2 before it creates a file or spends a minute (`report`).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Iterable, Sequence

USAGE_EXIT = 2
# files that mark a folder as a run this project wrote (it may be replaced by a new run)
RUN_MARKERS = ("metrics.csv", "run_info.json", "report.md")


def report(problems: Iterable[str], file=None) -> int:
    """Print each problem as one "error: ..." line; USAGE_EXIT."""
    file = file or sys.stderr
    for p in problems:
        print(f"error: {p}", file=file)
    return USAGE_EXIT


def _int_problem(args: argparse.Namespace, attr: str, minimum: int, what: str) -> str | None:
    value = getattr(args, attr, None)
    if value is None or (not isinstance(value, bool) and isinstance(value, int) and value >= minimum):
        return None
    return f"--{attr.replace('_', '-')} {value}: must be {what} (>= {minimum})"


def int_problems(args: argparse.Namespace, table: Sequence[tuple[str, int, str]]) -> list[str]:
    """`--flag` range problems for (attribute, minimum, description) rows (unset flags pass)."""
    return [p for attr, minimum, what in table if (p := _int_problem(args, attr, minimum, what))]


def positive_float_problems(args: argparse.Namespace, attrs: Sequence[str]) -> list[str]:
    """`--flag` problems for floats that must be > 0 (unset flags pass)."""
    out = []
    for attr in attrs:
        value = getattr(args, attr, None)
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            out.append(f"--{attr.replace('_', '-')} {value}: must be a positive number (> 0)")
    return out


SEED = "a non-negative integer"
FETCH_INT_FLAGS = [("fetch_workers", 1, "a positive integer"), ("fetch_retries", 0, "a non-negative integer")]


def fetch_flag_problems(args: argparse.Namespace) -> list[str]:
    """`--fetch-workers`, `--fetch-retries`, `--fetch-timeout` (eval, index build and images fetch)."""
    return int_problems(args, FETCH_INT_FLAGS) + positive_float_problems(args, ["fetch_timeout"])
# (command, subcommand) -> (attribute, minimum, description) of its integer flags; `--size` /
# `--world-size` are checked against the world sizes. Eval and index check theirs themselves.
COMMAND_INT_FLAGS: dict[tuple[str, str | None], list[tuple[str, int, str]]] = {
    ("world", "generate"): [("seed", 0, SEED)],
    ("world", "contact-sheet"): [("seed", 0, SEED), ("per_category", 1, "a positive number of intents"),
                                 ("sample_seed", 0, SEED)],
    ("world", "stats"): [("seed", 0, SEED)],
    ("world", "export"): [("seed", 0, SEED)],
    ("world", "render"): [("seed", 0, SEED), ("pixels", 32, "an image size in pixels")],
    ("train", None): [("seed", 0, SEED), ("data_seed", 0, SEED), ("max_steps", 1, "a positive number of steps"),
                      ("threads", 1, "a positive number of threads")],
    ("images", "fetch"): FETCH_INT_FLAGS,
    ("rerank", None): [("top_n", 1, "a positive integer"), ("batch_size", 1, "a positive integer"),
                       ("max_pixels", 1, "a positive integer"), ("concurrency", 1, "a positive integer"),
                       ("retries", 0, "a non-negative integer")],
    ("validate", None): [("max_warnings", 0, "a non-negative integer")],
}
COMMAND_POSITIVE_FLOATS: dict[tuple[str, str | None], list[str]] = {
    ("train", None): ["epochs"], ("images", "fetch"): ["fetch_timeout"], ("rerank", None): ["timeout"],
}


def command_flag_problems(args: argparse.Namespace) -> list[str]:
    """Range problems of the numeric flags of a command other than eval and index (and every
    command's `--world-seed` / `--limit`), and an unknown world size: checked before anything is created."""
    key = (args.command, getattr(args, f"{args.command}_command", None))
    problems = benchmark_flag_problems(args)
    problems += int_problems(args, COMMAND_INT_FLAGS.get(key, []))
    problems += positive_float_problems(args, COMMAND_POSITIVE_FLOATS.get(key, []))
    size_attr = {"world": "size", "train": "world_size"}.get(args.command)
    size = getattr(args, size_attr, None) if size_attr else None
    if size is not None:
        from cir_demo.world.generate import SIZES

        if size not in SIZES:
            from cir_demo.utils.names import UnknownNameError

            problems.append(f"--{size_attr.replace('_', '-')}: {UnknownNameError('world size', size, SIZES)}")
    return problems


def benchmark_flag_problems(args: argparse.Namespace) -> list[str]:
    return int_problems(args, [("world_seed", 0, "a non-negative integer"),
                               ("limit", 1, "a positive number of paraphrase groups")])


def data_folder_problems() -> list[str]:
    from cir_demo.paths import data_folder_problems as problems

    return problems()


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def creatable_dir_problem(path: Path, flag: str) -> str | None:
    """None when `path` is a folder or can be created as one."""
    if path.exists():
        if not path.is_dir():
            return f"{flag} {path}: an existing file, not a folder; name a new folder"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{flag} {path}: folder is not writable"
        return None
    base = _nearest_existing(path)
    if not base.is_dir():
        return f"{flag} {path}: cannot be created, {base} is a file"
    if not os.access(base, os.W_OK | os.X_OK):
        return f"{flag} {path}: cannot be created, {base} is not writable"
    return None


def run_dir_problem(path: Path, flag: str = "--out") -> str | None:
    """A run's output folder: new, empty, or an earlier run (which the new run replaces)."""
    problem = creatable_dir_problem(path, flag)
    if problem or not path.is_dir():
        return problem
    entries = [e.name for e in path.iterdir()]
    if entries and not any(m in entries for m in RUN_MARKERS):
        return (f"{flag} {path}: folder holds files that are not a cir_demo run ({', '.join(sorted(entries)[:3])}"
                f"{', ...' if len(entries) > 3 else ''}); name a new or empty folder")
    return None


def retriever_problems(names: Sequence[str]) -> list[str]:
    """Unknown retriever names ("did you mean") and damaged or missing committed weights."""
    from cir_demo.integrity import check_assets_of
    from cir_demo.retrievers.registry import get_config
    from cir_demo.utils.names import UnknownNameError

    problems: list[str] = []
    if not names:
        return ["--retrievers: no retriever named"]
    for name in names:
        try:
            config = get_config(name)
        except UnknownNameError as exc:
            problems.append(f"--retrievers: {exc}")
            continue
        problems += [f"retriever {name!r}: {p}" for p in check_assets_of(config)]
    return problems


def reranker_problems(backend: str, flag: str = "--rerank", **kw) -> list[str]:
    """Unknown reranker backend, and damaged or missing committed weights it loads."""
    from cir_demo.integrity import check_assets_of
    from cir_demo.rerank import reranker_settings
    from cir_demo.utils.names import UnknownNameError

    try:
        settings = reranker_settings(backend, **kw)
    except UnknownNameError as exc:
        return [f"{flag}: {exc}"]
    return [f"reranker {backend!r}: {p}" for p in check_assets_of(settings)]


def eval_problems(args: argparse.Namespace) -> list[str]:
    """Everything `--eval` would trip on later, found now."""
    problems = data_folder_problems() + benchmark_flag_problems(args)
    problems += int_problems(args, [("n_boot", 0, "a non-negative number of resamples (0 disables)"),
                                    ("bootstrap_seed", 0, "a non-negative integer"),
                                    ("rerank_top_n", 1, "a positive number of candidates")])
    problems += fetch_flag_problems(args)
    if getattr(args, "results_json", None):
        problems += [f"--results-json {f}: " + ("not a file" if Path(f).exists() else "file not found")
                     for f in args.results_json if not Path(f).is_file()]
    else:
        from cir_demo.harness.pipeline import default_reranker, retriever_names

        try:
            names = retriever_names(args.retrievers, args.benchmark)
        except ValueError as exc:
            problems.append(str(exc))
        else:
            problems += retriever_problems(names)
        reranker = default_reranker(args.benchmark, getattr(args, "rerank", None))
        if reranker:
            problems += reranker_problems(reranker)
    if getattr(args, "out", None):
        problems += [p for p in [run_dir_problem(Path(args.out))] if p]
    elif not data_folder_problems():
        from cir_demo.paths import runs_dir

        problems += [p for p in [creatable_dir_problem(runs_dir(), "runs folder")] if p]
    return problems


def index_build_problems(args: argparse.Namespace) -> list[str]:
    problems = data_folder_problems() + benchmark_flag_problems(args)
    problems += int_problems(args, [(a, 1, "a positive integer") for a in
                                    ("batch_size", "nlist", "nprobe", "train_size", "M", "ef_construction",
                                     "ef_search")])
    problems += fetch_flag_problems(args)
    problems += retriever_problems([args.retriever])
    if getattr(args, "out_dir", None):
        problems += [p for p in [creatable_dir_problem(Path(args.out_dir), "--out-dir")] if p]
    elif not data_folder_problems():
        from cir_demo.paths import indexes_dir

        problems += [p for p in [creatable_dir_problem(indexes_dir(), "indexes folder")] if p]
    return problems
