"""A researcher's own results files as explorer columns: `python app.py --benchmark B --runs A.json
NAME=B.trec`, or a file uploaded in the page. Each file is read with `--eval`'s readers onto the
loaded benchmark (every results format, detected per file) and served as a ranking-only retriever;
a file that cannot be used is one line naming it, never a page of per-query errors or a server path."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cir_demo.explorer.config import ServiceError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")


@dataclass(frozen=True)
class RunFile:
    """One `--runs` entry: the column's name and the results file (or an eval run folder for the Report)."""

    name: str
    path: str


def parse_run_args(values: Sequence[str]) -> list[RunFile]:
    """`--runs` values (`PATH` or `NAME=PATH`; the name defaults to the file's stem). Raises ServiceError
    with one line naming the value at fault."""
    out: list[RunFile] = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not _NAME.match(name):  # "C:=..." or "a=b=c" paths stay paths when the name part is no name
            name, path = Path(value).stem, value
        if not path:
            raise ServiceError(f"--runs {value!r}: no file after '='")
        if not _NAME.match(name):
            raise ServiceError(
                f"--runs {value!r}: {name!r} is not a usable column name (letters, digits, '._+-'); "
                "name it with NAME=PATH"
            )
        if any(r.name == name for r in out):
            raise ServiceError(f"--runs: two runs are named {name!r}; name one with NAME=PATH")
        out.append(RunFile(name, path))
    return out


def column_stem(text: str, limit: int = 40) -> str:
    """`text` (an uploaded file's name, e.g. a browser's `results (1)`) as the start of a column name: the
    characters a retriever name may not hold replaced by `_` ("results_1"), "run" when none is left."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")[:limit].strip("._-")
    return stem or "run"


def taken_by_a_model(name: str) -> bool:
    """`name` is a registered retriever's (a model's, not an earlier results file's)."""
    from cir_demo.retrievers import registry

    try:
        return registry.get_config(name).get("family") != "precomputed"
    except KeyError:
        return False


def runs_problems(values: Sequence[str] | None) -> list[str]:
    """One line per unusable `--runs` value, checked before any work (for the app's flag checks)."""
    if not values:
        return []
    try:
        runs = parse_run_args(values)
    except ServiceError as exc:
        return [str(exc)]
    problems = []
    for run in runs:
        p = Path(run.path)
        if taken_by_a_model(run.name) and not p.is_dir():
            problems.append(f"--runs {run.name}: that name is a registered retriever's; name the run with NAME=PATH")
        elif not p.exists():
            problems.append(f"--runs {run.name}: results file not found: {run.path}")
        elif p.is_dir() and not (p / "metrics.csv").is_file():
            problems.append(f"--runs {run.name}: {run.path} is a folder without an eval run's metrics.csv")
    return problems


def register_runs(runs: Sequence[RunFile]) -> list[str]:
    """Declare each results file (not a folder) as a `precomputed` retriever named as its column; returns
    the names. A name taken by another retriever is an error, never silently replaced."""
    from cir_demo.retrievers import registry

    names = []
    for run in runs:
        if Path(run.path).is_dir():
            continue
        config = {
            "name": run.name,
            "family": "precomputed",
            "params": {"path": str(Path(run.path).resolve())},
            "model": f"rankings from {Path(run.path).name}",
        }
        try:
            taken = registry.get_config(run.name)
        except KeyError:
            taken = None
        if taken is not None and taken.get("family") != "precomputed":
            raise ServiceError(f"--runs {run.name}: that name is a registered retriever's; name the run with NAME=PATH")
        registry.register_config(config, source="--runs", replace=True)
        names.append(run.name)
    return names


def load_run(benchmark, path: str | Path, name: str):
    """The results file read onto `benchmark` as `--eval` reads it, as a ranking-only retriever, and the
    notes worth a line (coverage). Raises ServiceError with one line when the file cannot be used."""
    from cir_demo.results import problem_line, read_results
    from cir_demo.retrievers.precomputed import PrecomputedRetriever

    try:
        results = read_results(path, benchmark)
    except Exception as exc:  # BenchmarkError, OSError, UnicodeError: one line either way
        raise ServiceError(problem_line(exc, path)) from None
    if not results.run:
        shown = ", ".join(repr(k) for k in results.unknown_query_keys[:3])
        raise ServiceError(
            f"{Path(path).name}: none of its query keys is a query of {benchmark.name!r}"
            + (f" (e.g. {shown})" if shown else " (it ranks no query)")
        )
    notes = []
    if results.coverage < 1:
        notes.append(
            f"{name}: ranks {len(results.run):,} of {len(benchmark.queries):,} queries "
            f"({results.coverage:.1%}); the others show no column, as --eval leaves them out"
        )
    return PrecomputedRetriever.from_results(results, name), notes
