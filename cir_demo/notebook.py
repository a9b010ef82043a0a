"""The Python API for notebooks: `import cir_demo as cd` (README, "In a notebook").

    bench = cd.load_benchmark("cirr", root="cirr/")            # the CLI's benchmark flags as keywords
    ev = cd.evaluate(bench, {"A": "a.json", "B": "b.trec"})     # results files, run dicts or retriever names
    ev.metrics, ev.per_query, ev.compare(baseline="A"), ev.failures(sort="diff:A,B"), ev.to_latex()
    ev.show("12060")                                            # the query's ranked grids, as the app draws them
    ev.save("out/")                                             # the --eval folder

Every number comes from the functions `--eval` writes its files with (the store's scoring,
`harness/report.py`'s tables), so a notebook's numbers are the run folder's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from cir_demo.benchmarks.schema import Benchmark


class _RaisingParser(argparse.ArgumentParser):
    """The CLI's parser, raising ValueError with argparse's one line instead of exiting."""

    def error(self, message: str):
        raise ValueError(f"load_benchmark: {message}")


def _flags(options: Mapping[str, Any]) -> list[str]:
    """Keywords as the CLI's flags: `world_size="tiny"` -> `--world-size tiny`; True -> the bare flag."""
    out = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        out += [flag] if value is True else [flag, str(value)]
    return out


def load_benchmark(name: str = "world", **options) -> Benchmark:
    """Benchmark `name` (any declared one: world, pinpoint, cirr, fashioniq, circo, edir, ...) loaded as
    `--eval --benchmark NAME` loads it; `options` are the CLI's benchmark flags as keywords (`root`,
    `annotations`, `corpus_ids`, `image_dir`, `split`, `world_size`, `world_seed`, `limit`)."""
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments, load_benchmark_from_args

    parser = _RaisingParser(prog="cir_demo.load_benchmark", add_help=False)
    add_benchmark_arguments(parser)
    from cir_demo.utils.names import UnknownNameError

    args = parser.parse_args(["--benchmark", name, *_flags(options)])
    try:
        return load_benchmark_from_args(args)
    except UnknownNameError as exc:  # a keyword whose value names nothing (world_size="huge"): named as its flag
        raise ValueError(f"cir_demo.load_benchmark: --{exc.kind.replace(' ', '-')}: {exc}") from None


def _as_score_dict(run: Mapping) -> dict:
    """A run dict as a run file holds it: `{query: {image: score}}` (a list best first gets falling scores)."""
    out = {}
    for q, ranked in run.items():
        if isinstance(ranked, Mapping):
            out[str(q)] = {str(i): float(s) for i, s in ranked.items()}
        else:
            ids = [str(i) for i in ranked]
            out[str(q)] = {i: float(len(ids) - r) for r, i in enumerate(ids)}
    return out


def evaluate(
    benchmark: Benchmark,
    runs: Mapping[str, Any],
    n_boot: int = 1000,
    seed: int = 0,
    results_format: str = "auto",
    device: str | None = None,
) -> Evaluation:
    """Score `runs` ({name: what}) on `benchmark` as `--eval` scores them. Each value is a results file
    (any format `--eval --results-json` reads), a run dict in memory (`{query: [ids best first]}` or
    `{query: {image: score}}`, e.g. ranx's `Run.to_dict()`; a ranx Run itself) or a registered retriever's
    name (its run read from the store: a stored eval run under the run's key, else the cache, else run on
    the benchmark here, as `--eval --retrievers` runs it, and cached)."""
    from cir_demo.retrievers.registry import get_config

    if not runs:
        raise ValueError("evaluate: give at least one run, e.g. {'A': 'a.json'}")
    folder = tempfile.TemporaryDirectory(prefix="cir_demo-runs-")
    paths: dict[str, Path] = {}
    models: dict[str, str] = {}  # run name -> the retriever that makes it
    for name, value in runs.items():
        if hasattr(value, "to_dict") and not isinstance(value, Mapping):  # a ranx Run
            value = value.to_dict()
        if isinstance(value, Mapping):
            path = Path(folder.name) / f"{len(paths)}.json"
            path.write_text(json.dumps(_as_score_dict(value)), encoding="utf-8")
            paths[name] = path
        elif isinstance(value, (str, Path)) and Path(value).is_file():
            paths[name] = Path(value)
        elif isinstance(value, str) and _registered(get_config, value):
            models[name] = value
        else:
            raise ValueError(
                f"evaluate: run {name!r}: {str(value)[:100]!r} is neither a results file, a run dict nor a "
                "registered retriever's name"
            )
    evaluations = _file_evaluations(benchmark, paths, results_format, n_boot, seed)
    evaluations.update(_model_evaluations(benchmark, models, n_boot, seed, device))
    order = list(runs)
    return Evaluation(benchmark, [evaluations[n] for n in order], paths, n_boot, seed, folder, models, device)


def _registered(get_config, name: str) -> bool:
    try:
        get_config(name)
    except KeyError:
        return False
    return True


def _file_evaluations(benchmark: Benchmark, paths: Mapping[str, Path], fmt: str, n_boot: int, seed: int) -> dict:
    """{name: evaluation} of results files, their rows read from the store as `--eval` reads them."""
    from cir_demo.harness.results_files import score_results_files
    from cir_demo.store.store import RunStore

    if not paths:
        return {}
    names = list(paths)
    scored = score_results_files(
        benchmark, [paths[n] for n in names], fmt, n_boot, seed, names=names, store=RunStore(benchmark)
    )
    return dict(zip(names, scored))


def _model_evaluations(
    benchmark: Benchmark, models: Mapping[str, str], n_boot: int, seed: int, device: str | None
) -> dict:
    """{name: evaluation} of retrievers' runs, their rows read from the store (`RunStore.rows`: a stored
    eval run under the run's key, else the cache, else produced here at `--eval`'s depth and cached)."""
    if not models:
        return {}
    from cir_demo.engine import RetrievalEngine
    from cir_demo.store.score import evaluation_of_rows
    from cir_demo.store.store import RunStore

    engine = RetrievalEngine(benchmark, sorted(set(models.values())), device=device, progress=False)
    try:
        store = RunStore(benchmark, engine)
        out = {}
        for name, model in models.items():
            rows = store.rows(model).assign(run=name)
            ev = evaluation_of_rows(benchmark, rows, name, n_boot=n_boot, seed=seed)
            # as a results file of the run would be scored: the run ranks every query, with known ids
            ev.metrics.update(coverage=rows["query_id"].nunique() / len(benchmark.queries), unknown_ids=0)
            ev.metrics["unknown_query_keys"] = 0
            key = store.key(model)
            ev.key = key.digest() if key is not None else None
            out[name] = ev
        return out
    finally:
        engine.close()


def _model_rankings(benchmark: Benchmark, names: list[str], device: str | None) -> dict[str, dict]:
    """Each retriever's run on the benchmark, from the store's engine (`--eval`'s depth)."""
    if not names:
        return {}
    from cir_demo.engine import RetrievalEngine
    from cir_demo.store.store import RunStore

    engine = RetrievalEngine(benchmark, names, device=device, progress=False)
    try:
        store = RunStore(benchmark, engine)
        return {n: store.ranking(n) for n in names}
    finally:
        engine.close()


class Evaluation:
    """Runs scored on one benchmark: the tables `--eval` writes, as DataFrames (see the module doc)."""

    def __init__(self, benchmark, evaluations, paths, n_boot, seed, folder=None, models=None, device=None):
        self.benchmark = benchmark
        self.evaluations = list(evaluations)
        self._paths = dict(paths)  # run -> the results file it was read from (written here for dicts)
        self.models = dict(models or {})  # run -> the retriever whose run it is (read from the store)
        self.n_boot = n_boot
        self.seed = seed
        self._device = device
        self._folder = folder  # kept while the evaluation lives: the files of in-memory runs
        self._paired: pd.DataFrame | None = None
        self._service = None

    @property
    def paths(self) -> dict[str, Path]:
        """{run: its results file}: a retriever's run is written to one when first asked for (`show`)."""
        missing = [n for n in self.models if n not in self._paths]
        if missing:
            rankings = _model_rankings(self.benchmark, sorted({self.models[n] for n in missing}), self._device)
            for name in missing:
                path = Path(self._folder.name) / f"model-{len(self._paths)}.json"
                path.write_text(json.dumps(_as_score_dict(rankings[self.models[name]])), encoding="utf-8")
                self._paths[name] = path
        return {n: self._paths[n] for n in self.runs}

    @property
    def runs(self) -> list[str]:
        return [ev.name for ev in self.evaluations]

    def __repr__(self) -> str:
        return (
            f"<Evaluation of {', '.join(self.runs)} on {self.benchmark.name} ({len(self.benchmark.queries):,} queries)>"
        )

    @property
    def metrics(self) -> pd.DataFrame:
        """metrics.csv's rows: one per run, best first, official columns then ours, intervals `_ci_lo/_ci_hi`."""
        from cir_demo.harness.report import sorted_metrics_table

        return sorted_metrics_table(self.benchmark, self.evaluations).reset_index(drop=True)

    @property
    def per_query(self) -> pd.DataFrame:
        """per_query.csv's rows."""
        from cir_demo.harness.report import per_query_table

        return per_query_table(self.evaluations)

    def _paired_rows(self) -> pd.DataFrame:
        from cir_demo.store.score import paired_comparisons

        if self._paired is None:
            self._paired = (
                paired_comparisons(self.benchmark, self.evaluations, n_boot=self.n_boot, seed=self.seed)
                if len(self.evaluations) > 1 and self.n_boot > 0
                else pd.DataFrame()
            )
        return self._paired

    def compare(self, baseline: str | None = None) -> pd.DataFrame:
        """paired.csv's rows (every pair; with `baseline`, the pairs with it), p-values as written
        ("< 0.001" below 1/n_boot), and `p_holm` and `significant`: the Holm-corrected p-value over
        every (run, metric) compared with the baseline (default: the first run) and whether it is below
        5%, the marks of report.tex."""
        from cir_demo.harness.latex import ALPHA, check_baseline, significance
        from cir_demo.metrics.headline import p_values_as_text

        paired = self._paired_rows()
        if not len(paired):
            return paired
        check_baseline(self.runs, baseline)
        base = baseline or self.runs[0]
        marks = significance(paired, base, self.runs, list(dict.fromkeys(paired["metric"])), self.n_boot)
        holm = []
        for a, b, metric in zip(paired["a"], paired["b"], paired["metric"]):
            other = b if a == base else a if b == base else None
            holm.append(marks.get((other, metric), (None, float("nan")))[1])
        out = p_values_as_text(paired).assign(p_holm=holm)
        out["significant"] = out["p_holm"] < ALPHA
        if baseline is not None:
            out = out[(out["a"] == baseline) | (out["b"] == baseline)]
        return out.reset_index(drop=True)

    def failures(self, sort: str = "worst", metric: str | None = None, top: int | None = None) -> pd.DataFrame:
        """The rows `python -m cir_demo failures --sort SORT` writes for these runs, in its order (sorted from
        the runs' per-query rows, as the store gave them: nothing is scored again)."""
        from cir_demo.explorer.cli import failure_rows_from, with_metric

        frames = {ev.name: ev.per_query for ev in self.evaluations}
        rows = failure_rows_from(self.benchmark, frames, with_metric(sort, metric))
        return rows.head(top) if top is not None else rows

    def to_latex(self, baseline: str | None = None) -> str:
        """report.tex's table (marks against `baseline`, default the first run)."""
        from cir_demo.harness.latex import check_baseline
        from cir_demo.harness.report import sorted_metrics_table, tex_text

        check_baseline(self.runs, baseline)
        table = sorted_metrics_table(self.benchmark, self.evaluations)
        return tex_text(self.benchmark, self.evaluations, table, self._paired_rows(), baseline, self.n_boot)

    def save(self, out: str | Path, overwrite: bool = False, plots: bool = True, baseline: str | None = None) -> Path:
        """The `--eval` run folder of these runs at `out` (new, empty, or an earlier run with `overwrite`)."""
        from cir_demo.harness.latex import check_baseline
        from cir_demo.harness.report import write_outputs
        from cir_demo.harness.results_files import write_run_info
        from cir_demo.results.run_folders import record_run_folder
        from cir_demo.utils.owned_folder import staged_run_dir

        check_baseline(self.runs, baseline)
        final = Path(out)
        with staged_run_dir(final, overwrite) as folder:
            write_outputs(
                self.benchmark,
                self.evaluations,
                folder,
                n_boot=self.n_boot,
                seed=self.seed,
                plots=plots,
                baseline=baseline,
            )
            write_run_info(self.benchmark, self.evaluations, folder)  # the runs' keys: the app reads them
        record_run_folder(final)
        return final

    def show(self, query_id: str, runs=None, k: int = 10) -> Shown:
        """The query's reference(s) and each run's top `k` side by side, as the app draws them (tiles with
        rank, judgment and marks; grey tiles with the image id where the images are absent)."""
        from cir_demo.ui.components import CSS, references_html, results_html

        service = self._explorer()
        names = list(runs or self.runs)
        cmp = service.compare(str(query_id), names, k=k)
        view = service.query_view(str(query_id))
        head = f"<p><b>{_esc(view.query.query_id)}</b>: {_esc(cmp.instruction)}</p>" + references_html(
            cmp.reference_thumbs, cmp.reference_labels
        )
        return Shown(f"<style>{CSS}</style><div class='cir-notebook'>{head}{results_html(cmp)}</div>")

    def _explorer(self):
        """The app's service over these runs (each run's results file a column, as `--runs` serves it), made once."""
        if self._service is not None:
            return self._service
        from cir_demo.engine import RetrievalEngine
        from cir_demo.explorer.own_runs import RunFile, taken_by_a_model, load_run, register_runs
        from cir_demo.explorer.service import ExplorerService

        # a run named as its model keeps the model's declaration (its modality); the others are declared as files
        register_runs([RunFile(n, str(p)) for n, p in self.paths.items() if not taken_by_a_model(n)])
        engine = RetrievalEngine(self.benchmark, [], progress=False)
        for n, p in self.paths.items():
            engine.add_retriever(load_run(self.benchmark, p, n)[0])
        self._service = ExplorerService(self.benchmark, engine, self.runs, thumbnails_on_disk=False)
        return self._service


def _esc(text: str) -> str:
    import html

    return html.escape(str(text))


class Shown:
    """HTML a notebook displays (`_repr_html_`); `.html` is the text."""

    def __init__(self, html: str):
        self.html = html

    def _repr_html_(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.html
