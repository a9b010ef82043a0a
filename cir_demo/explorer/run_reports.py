"""`RunReports`: the Report's side of the app: the eval runs stored for its benchmark and engine, each
read as a `Report`, and its results-file columns scored as `--eval` scores them, paired two by two."""

from __future__ import annotations

import threading
from typing import Sequence

from cir_demo.explorer.config import ServiceError
from cir_demo.explorer.runs import load_report, report_key
from cir_demo.explorer.served_columns import ServedColumns
from cir_demo.explorer.views import Report, RunSummary
from cir_demo.store.folders import list_runs
from cir_demo.utils.lru import LRU


class RunReports:
    """The eval runs of `benchmark` under the engine `fingerprint` (and in `run_folders`), read with the
    metric `family`; the results-file `columns` scored by `store`."""

    def __init__(self, benchmark, fingerprint: str, run_folders: Sequence[str], family, store, columns: ServedColumns):
        self.benchmark = benchmark
        self.fingerprint = fingerprint
        self.run_folders = run_folders
        self.family = family
        self.store = store
        self.columns = columns
        self._scored_runs: dict[tuple, object] = {}  # (results-file columns, n_boot, seed) -> paired.RunsScored
        self._evaluations: dict[tuple, object] = {}  # (run, n_boot, seed) -> its RunEvaluation
        self._lock = threading.RLock()
        self._reports = LRU(16)  # report_key(run) -> its Report

    def runs(self) -> list[RunSummary]:
        return list_runs(self.benchmark.name, self.fingerprint, extra=self.run_folders)

    def report(self, label: str | None = None, runs: list[RunSummary] | None = None) -> Report | None:
        """The Report of run `label` (default: the latest), read again only when its files changed
        (`report_key`): every page load shows one. Its tables are shared between callers: read-only.
        `runs`: `runs()` as the caller just listed them (listing reads every run folder's JSON)."""
        runs = self.runs() if runs is None else runs
        if not runs:
            return None
        run = runs[0] if label is None else next((r for r in runs if r.label == label), None)
        if run is None:
            raise ServiceError(f"no eval run {label!r} for benchmark {self.benchmark.name!r}")
        key = report_key(run)
        report = self._reports.get(key)
        if report is None:
            report = load_report(run, self.family)
            self._reports.put(key, report)
        return report

    def scored_file_runs(self, n_boot: int = 1000, seed: int = 0, extra: Sequence[str] = ()):
        """The results-file columns (`--runs`, and the `extra` uploaded ones a visitor added) scored as
        `--eval` scores them (whole rankings, `RunStore.evaluation`), with the paired comparison of every
        headline metric for every pair (`paired.score_runs`); None without such columns. Computed once per
        set of columns."""
        from cir_demo.explorer.paired import score_runs

        names = tuple(self.columns.file_runs() + [n for n in extra if n in self.columns.uploaded])
        if not names:
            return None
        key = (names, n_boot, seed)
        with self._lock:
            if key not in self._scored_runs:
                evaluations = []
                for n in names:
                    if (n, n_boot, seed) not in self._evaluations:
                        self._evaluations[(n, n_boot, seed)] = self.store.evaluation(n, n_boot, seed)
                    evaluations.append(self._evaluations[(n, n_boot, seed)])
                self._scored_runs[key] = score_runs(self.benchmark, evaluations, n_boot, seed)
            return self._scored_runs[key]
