"""What every evaluation server's submission file needs of a run, checked once for the CIRR and CIRCO
writers: a ranking for every query of the split, none listing an image twice (the servers score every
query, so a partial or repeating file would be scored as if those queries had failed)."""

from __future__ import annotations

from typing import Mapping, Sequence

from cir_demo.benchmarks.schema import Benchmark, BenchmarkError, Query, ValidationIssue


def usable_rankings(
    benchmark: Benchmark, run: Mapping[str, Sequence[str]]
) -> tuple[list[tuple[Query, Sequence[str]]], list[str], list[str]]:
    """((query, ranking) for each query whose ranking lists no image twice, in benchmark order; the ids of
    the queries without a ranking; the ids of those whose ranking repeats an image)."""
    usable, missing, repeated = [], [], []
    for q in benchmark.queries:
        ranking = run.get(q.query_id)
        if ranking is None:
            missing.append(q.query_id)
        elif len(set(ranking)) != len(ranking):
            repeated.append(q.query_id)
        else:
            usable.append((q, ranking))
    return usable, missing, repeated


def examples(ids: Sequence[str]) -> str:
    """The first five of `ids`, for "(e.g. ...)"."""
    return ", ".join(ids[:5])


def refuse_problems(missing: Sequence[str], missing_text: str, repeated: Sequence[str], *more: tuple[str, list]):
    """BenchmarkError with one issue per kind of problem found: the queries without a ranking (`missing_text`
    follows their count, its "{examples}" the first five ids), the rankings repeating an image, then `more`'s
    (text, what was found) pairs; nothing when nothing was found."""
    problems = [
        (f"{len(missing)} {missing_text}".replace("{examples}", examples(missing)), missing),
        (f"{len(repeated)} rankings repeat an image (e.g. {examples(repeated)})", repeated),
        *more,
    ]
    issues = [ValidationIssue("error", "run", None, None, text) for text, found in problems if found]
    if issues:
        raise BenchmarkError(issues)
