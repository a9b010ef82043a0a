"""Each run of an `--eval` written and scored in a worker process while the caller reranks the next.

`RunOutputs` forks one worker before the run starts any thread. For each run it is given, in order,
the worker writes the run's results file, evaluates it, and computes the bootstraps of the report that
depend on that run and the runs of its split before it: its breakdowns (`breakdown_parts`) and its
paired comparisons with each earlier run (`paired_pair_rows`). The report then joins them in the order
it computes them in itself (`finish`), so every file is the same bytes as a run that does all this in
line. Writing and scoring are pure Python over every ranking; in the worker they hold no lock the
reranking thread waits on.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from cir_demo.utils.procs import end_with_parent

# What the worker reads, set by `RunOutputs` before the fork and inherited by it (nothing is pickled
# but each run's rankings and the worker's answers)
_WORKER: dict[str, Any] = {}


@dataclass
class _SplitState:
    bench: Any
    out: Path
    evaluations: list = field(default_factory=list)
    breakdowns: list = field(default_factory=list)  # each evaluation's `breakdown_parts`
    pairs: dict = field(default_factory=dict)  # (i, j), i < j -> `paired_pair_rows` of evaluations i and j


class RunOutputs:
    """One forked worker that writes, evaluates and bootstraps each run given to `submit`, in order."""

    def __init__(self, splits: Sequence[tuple[Any, Path]], n_boot: int, seed: int):
        _WORKER.clear()
        _WORKER.update(splits=[_SplitState(bench, Path(out)) for bench, out in splits], n_boot=n_boot, seed=seed)
        try:
            self._pool = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("fork"),
                initializer=end_with_parent,  # a killed run leaves no worker waiting on its queue
                initargs=(os.getpid(),),
            )
            self._pool.submit(_ready).result()  # forked now: before the run starts its threads
        finally:
            _WORKER.clear()  # the caller's copy is not read again

    def submit(
        self,
        split: int,
        name: str,
        run: Mapping[str, Sequence[str]],
        scores: Mapping[str, Sequence[float]],
        spec: Mapping[str, Any],
    ) -> Future:
        """A future of (run `name`'s evaluation, the seconds its evaluation took); its results file is in
        place once the future is done."""
        return self._pool.submit(_write_and_score, split, name, dict(run), dict(scores), dict(spec))

    def finish(self) -> list[tuple[pd.DataFrame | None, list]]:
        """Per split: (its paired comparisons as `paired_comparisons` gives them, None when they are not
        computed: --n-boot 0 or one run; each evaluation's `breakdown_parts`, in order)."""
        return self._pool.submit(_finish).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _ready() -> bool:
    return True


def _write_and_score(split: int, name: str, run: dict, scores: dict, spec: dict):
    from cir_demo.harness.report import breakdown_parts
    from cir_demo.metrics.headline import paired_pair_rows
    from cir_demo.results import write_results
    from cir_demo.store.score import evaluate_run, family_of

    state: _SplitState = _WORKER["splits"][split]
    n_boot, seed = _WORKER["n_boot"], _WORKER["seed"]
    bench = state.bench
    write_results(state.out / "results" / f"{name}.json", bench, run, scores, spec=spec)
    t = time.perf_counter()
    ev = evaluate_run(bench, run, name, n_boot=n_boot, seed=seed)
    seconds = time.perf_counter() - t
    state.breakdowns.append(breakdown_parts(bench, ev, n_boot=n_boot, seed=seed))
    if n_boot > 0:
        family = family_of(bench)
        j = len(state.evaluations)
        for i, before in enumerate(state.evaluations):
            state.pairs[(i, j)] = paired_pair_rows(
                before.name, before.per_query, ev.name, ev.per_query, family, n_boot=n_boot, seed=seed
            )
    state.evaluations.append(ev)
    return ev, seconds


def _finish() -> list[tuple[pd.DataFrame | None, list]]:
    from cir_demo.metrics.headline import paired_table

    out = []
    for state in _WORKER["splits"]:
        n = len(state.evaluations)
        paired = None
        if n > 1 and _WORKER["n_boot"] > 0:
            paired = paired_table([state.pairs[(i, j)] for i in range(n) for j in range(i + 1, n)])
        out.append((paired, state.breakdowns))
    return out
