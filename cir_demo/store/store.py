"""`RunStore`: the one path from the engine to scored runs.

The run of (benchmark, retriever, reranker, rerank depth, ranking depth) is read from a stored eval
run whose run_info.json records its key (`run_keys`), else from this data folder's cache, else
produced here (`produce_run`, `produce_rerank`: what `--eval` runs too) and cached; every path gives
the same rows, the rows per_query.csv holds (`rows_of`). `--eval`, the app's columns, sorts and
Report, the API, `failures` and the Python API read runs through a store or its functions.
"""

from __future__ import annotations

import io
import logging
import threading
from pathlib import Path
from typing import Callable, Mapping, Sequence

import pandas as pd

from cir_demo.benchmarks.families import metric_family
from cir_demo.benchmarks.registry import RERANK_SUFFIX
from cir_demo.benchmarks.schema import Benchmark
from cir_demo.store.key import (
    NO_INDEX,
    RunKey,
    first_stage_hash,
    index_label,
    is_results_file,
    query_set_hash,
    run_key,
)
from cir_demo.store.score import RunEvaluation, evaluate_run, per_query_scores, written_rows

log = logging.getLogger(__name__)
ROW_DTYPES = {"query_id": str, "group_id": str, "run": str}


def produce_run(engine, name: str, queries=None, progress: Callable[[int, int], None] | None = None):
    """(run, scores) of retriever `name` on the benchmark's queries, ranked as deep as a run of it is
    (`engine.eval_depth`: a results file whole, a model's top DEFAULT_K)."""
    return engine.run_benchmark(name, queries=queries, k=engine.eval_depth(name), progress=progress)


def produce_rerank(
    engine, reranker: str, run, scores, top_n: int, queries=None, reranker_kw=None, progress=False, lanes: int = 1
):
    """The reranked run (`RunRerank`) of `run`: its top `top_n` per query reordered by `reranker` (`lanes`
    batches scored at once, where the backend allows it: the same result)."""
    return engine.rerank_run(
        reranker,
        run,
        scores,
        queries=queries,
        top_n=top_n,
        reranker_kw=dict(reranker_kw or {}),
        progress=progress,
        lanes=lanes,
    )


def reranked_scores(rr) -> dict[str, list[float]]:
    """The scores a reranked results file holds: P(yes), 0.0 for a candidate without one (not reranked,
    or no usable score)."""
    return {q: [0.0 if (p := it.p_yes) is None or p != p else p for it in its] for q, its in rr.items.items()}


def rows_of(benchmark: Benchmark, run: Mapping[str, Sequence[str]], name: str) -> pd.DataFrame:
    """Run `name`'s per-query rows exactly as per_query.csv holds them (written and read back), so rows
    computed here, cached or read from an eval run are the same frame."""
    from cir_demo.utils.csv_text import frame_csv

    text = frame_csv(written_rows(per_query_scores(benchmark, run), name))
    return pd.read_csv(io.StringIO(text), dtype=ROW_DTYPES)


def stored_run_keys(run_dir: Path) -> dict[str, str]:
    """{run name: key digest} an eval run folder records in run_info.json ({} for none)."""
    from cir_demo.store.folders import read_json

    keys = (read_json(run_dir / "run_info.json") or {}).get("run_keys")
    return {str(k): str(v) for k, v in keys.items()} if isinstance(keys, dict) else {}


class RunStore:
    """The runs of one benchmark served by one engine: first stages, and reranked by `reranker` to
    `top_n` (`name + RERANK_SUFFIX`); and results files read elsewhere (`file_rows`: no engine needed).
    Thread-safe; a run is produced at most once per store."""

    def __init__(
        self,
        benchmark: Benchmark,
        engine=None,
        reranker: str | None = None,
        reranker_kw: Mapping | None = None,
        top_n: int = 20,
        run_folders: Sequence[str | Path] = (),
        cache: bool = True,
    ):
        self.benchmark = benchmark
        self.engine = engine
        self.family = metric_family(benchmark.metric_family)
        self.reranker = reranker
        self.reranker_kw = dict(reranker_kw or {})
        self.top_n = int(top_n)
        self.run_folders = list(run_folders)
        self.cache = cache
        self._runs: dict[str, tuple[dict, dict | None]] = {}
        self._rows: dict[str, tuple[pd.DataFrame, str]] = {}
        # eval runs' per_query.csv read so far, by path, with the (mtime, size) they were read at: a folder
        # holds several runs, asked for one by one
        self._files: dict[Path, tuple[tuple, pd.DataFrame | None]] = {}
        self._lock = threading.RLock()
        self._queries = query_set_hash(benchmark)

    @property
    def fingerprint(self) -> str:
        if self.engine is not None:
            return self.engine.fingerprint
        from cir_demo.engine import benchmark_fingerprint

        return benchmark_fingerprint(self.benchmark)

    # ------------------------------------------------------------------ keys
    def run_spec(self, name: str) -> dict | None:
        """What retriever `name`'s run records (`engine.run_spec`); None, logged, when it cannot be read."""
        try:
            return self.engine.run_spec(name)
        except Exception as exc:  # noqa: BLE001 - a column that cannot load is said in that column
            log.warning("retriever %s: %s", name, exc)
            return None

    def spec_hash(self, name: str) -> str | None:
        """Spec hash of retriever `name` (None when its spec cannot be read)."""
        from cir_demo.retrievers.base import spec_hash

        spec = self.run_spec(name)
        return None if spec is None else spec_hash(spec)

    def spec_hashes(self, names: Sequence[str]) -> dict[str, str]:
        return {n: h for n in names if (h := self.spec_hash(n)) is not None}

    def reranker_hash(self) -> str | None:
        if not self.reranker:
            return None
        try:
            return self.engine.reranker(self.reranker, **self.reranker_kw).spec_hash()
        except Exception as exc:  # noqa: BLE001 - the reranker sorts then say why they are not offered
            log.warning("reranker %s: %s", self.reranker, exc)
            return None

    def key(self, run: str) -> RunKey | None:
        """The key of run `run` (`<retriever>` or `<retriever>+rerank`); None when its spec cannot be read."""
        base = run[: -len(RERANK_SUFFIX)] if run.endswith(RERANK_SUFFIX) else run
        spec = self.run_spec(base)
        if spec is None:
            return None
        rr = self.reranker_hash() if base != run else None
        if base != run and rr is None:
            return None
        index = NO_INDEX if is_results_file(spec) else index_label(getattr(self.engine, "index_uri", None))
        return run_key(
            self.fingerprint,
            self.family.module,
            first_stage_hash(spec),
            self.engine.eval_depth(base),
            rr,
            self.top_n if rr else None,
            index,
            self._queries,
        )

    # ------------------------------------------------------------------ rankings
    def ranking(self, run: str, progress: Callable[[str], None] | None = None) -> dict[str, list[str]]:
        """Run `run`'s rankings `{query id: ids best first}`, produced once per store."""
        with self._lock:
            return self._ranking(run, progress)[0]

    def _ranking(self, run: str, progress) -> tuple[dict, dict | None]:
        if run in self._runs:
            return self._runs[run]
        if run.endswith(RERANK_SUFFIX):
            base = run[: -len(RERANK_SUFFIX)]
            first, scores = self._ranking(base, progress)
            if progress:
                progress(f"reranking the top {self.top_n} of {base} for every query")
            rr = produce_rerank(self.engine, self.reranker, first, scores, self.top_n, reranker_kw=self.reranker_kw)
            self._runs[run] = (dict(rr.run), None)
        else:

            def report(done: int, total: int) -> None:
                if progress:
                    progress(f"retrieving with {run}: {done:,}/{total:,} queries")

            self._runs[run] = produce_run(self.engine, run, progress=report)
        return self._runs[run]

    def evaluation(self, run: str, n_boot: int = 1000, seed: int = 0) -> RunEvaluation:
        """Run `run` scored as `--eval` scores it: aggregates, intervals, per-query rows."""
        return evaluate_run(self.benchmark, self.ranking(run), run, n_boot=n_boot, seed=seed)

    # ------------------------------------------------------------------ per-query rows
    def rows(self, run: str, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
        """Run `run`'s per-query rows (per_query.csv's), from a stored eval run, the cache, or produced."""
        return self.rows_and_source(run, progress)[0]

    def rows_and_source(self, run: str, progress=None) -> tuple[pd.DataFrame, str]:
        """(rows, where they came from: an eval run's label, "cache" or "computed here")."""
        with self._lock:
            if run in self._rows:
                return self._rows[run]
            self._rows[run] = self._rows_under(run, self.key(run), lambda: self.ranking(run, progress))
            return self._rows[run]

    def file_rows(self, name: str, results, key: RunKey | None = None) -> tuple[pd.DataFrame, str]:
        """(rows, source) of a results file read onto the benchmark (`results.ResultsFile`) as run `name`:
        from a stored eval run or the cache under the file's key (`results_file_key`; `key` when the
        caller has it), else scored here and cached. `--eval --results-json`, `failures` and the Python
        API read files through here."""
        key = key or results_file_key(self.benchmark, results)
        with self._lock:
            return self._rows_under(name, key, lambda: results.run)

    def _rows_under(self, run: str, key: RunKey | None, ranking: Callable[[], Mapping]) -> tuple[pd.DataFrame, str]:
        """Run `run`'s rows stored under `key`, else cached, else scored from `ranking()` and cached."""
        found = self._stored(run, key) if key is not None else None
        if found is None and key is not None and self.cache:
            cached = _read_rows(self.cache_path(run, key))
            found = (_named(cached, run), "cache") if cached is not None else None
        if found is None:
            found = (rows_of(self.benchmark, ranking(), run), "computed here")
            if key is not None and self.cache:
                _save_optional(self.cache_path(run, key), found[0])
        return found

    def stored_rows(self, run: str) -> pd.DataFrame | None:
        """Run `run`'s rows when an eval run or the cache holds them (read, never computed), else None."""
        with self._lock:
            if run in self._rows:
                return self._rows[run][0]
            key = self.key(run)
            if key is None:
                return None
            found = self._stored(run, key)
            if found is None and self.cache and (cached := _read_rows(self.cache_path(run, key))) is not None:
                found = (_named(cached, run), "cache")
            if found is not None:
                self._rows[run] = found
            return None if found is None else found[0]

    def stored_folder(self, runs: Sequence[str]) -> Path | None:
        """An eval run folder recording every run of `runs` under its key, for every query."""
        keys = {r: self.key(r) for r in runs}
        if not runs or any(k is None for k in keys.values()):
            return None
        for folder in self._folders():
            recorded = stored_run_keys(folder.path)
            if all(recorded.get(r) == k.digest() for r, k in keys.items()):
                rows = self._per_query_file(folder.path)
                if rows is not None and all(self._covers(rows, r) for r in runs):
                    return folder.path
        return None

    def forget(self) -> None:
        """Drop rows read so far (a new eval run was published: the next read finds it)."""
        with self._lock:
            self._rows.clear()
            self._files.clear()

    def cache_path(self, run: str, key: RunKey) -> Path:
        """The cache file of the run under `key`, whatever it is named (its rows are renamed on reading)."""
        from cir_demo.paths import cache_dir

        return cache_dir() / "store" / self.fingerprint / f"{key.digest()[:32]}.csv"

    def _folders(self):
        """The eval run folders of this benchmark, newest first (listed again each time: a run published
        meanwhile counts)."""
        from cir_demo.store.folders import list_runs

        return list_runs(self.benchmark.name, self.fingerprint, extra=self.run_folders)

    def _per_query_file(self, folder: Path) -> pd.DataFrame | None:
        """A run folder's per_query.csv, read again only when the file changed."""
        path = folder / "per_query.csv"
        try:
            st = path.stat()
        except OSError:
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        if folder not in self._files or self._files[folder][0] != stamp:
            self._files[folder] = (stamp, _read_rows(path))
        return self._files[folder][1]

    def _covers(self, rows: pd.DataFrame, run: str) -> bool:
        """Whether `rows` hold run `run` for every query of the benchmark (not an `--limit` eval's few)."""
        return rows.loc[rows["run"] == run, "query_id"].nunique() == len(self.benchmark.queries)

    def _stored(self, run: str, key: RunKey) -> tuple[pd.DataFrame, str] | None:
        """Run `run`'s rows from the newest eval run recording a run under `key`: under this name first,
        else under another (a results file named otherwise there), renamed."""
        digest = key.digest()
        for folder in self._folders():
            names = sorted((n for n, d in stored_run_keys(folder.path).items() if d == digest), key=lambda n: n != run)
            rows = self._per_query_file(folder.path) if names else None
            for name in names if rows is not None else ():
                if self._covers(rows, name):
                    return _named(rows[rows["run"] == name].reset_index(drop=True), run), folder.label
        return None


def _named(rows: pd.DataFrame, run: str) -> pd.DataFrame:
    """`rows` of one run as run `run`'s (the `run` column)."""
    return rows if (rows["run"] == run).all() else rows.assign(run=run)


def results_file_key(benchmark: Benchmark, results) -> RunKey:
    """The key of the run a results file (`results.ResultsFile`, read onto `benchmark`) holds: the key
    a store gives the file served as a column (`--runs`, `RunStore.key`), so every reader of it meets."""
    from cir_demo.engine import benchmark_fingerprint, results_depth
    from cir_demo.retrievers.precomputed import FAMILY
    from cir_demo.utils.io import sha256_file

    spec = {"family": FAMILY, "sha256": sha256_file(results.path), "format": results.format}
    module = metric_family(benchmark.metric_family).module
    return run_key(
        benchmark_fingerprint(benchmark),
        module,
        first_stage_hash(spec),
        results_depth(results.run),
        index=NO_INDEX,
        queries=query_set_hash(benchmark),
    )


def _read_rows(path: Path, columns: Sequence[str] | None = None) -> pd.DataFrame | None:
    """A per_query.csv (or a cache file of its rows), or None when there is none or it cannot be read."""
    if not path.is_file():
        return None
    try:
        wanted = set(columns) if columns else None
        return pd.read_csv(path, dtype=ROW_DTYPES, usecols=(lambda c: c in wanted) if wanted else None)
    except (OSError, ValueError):
        return None


def _save_optional(path: Path, df: pd.DataFrame) -> None:
    """Write a cache file; a folder that cannot take it only costs a recomputation next time."""
    from cir_demo.utils.csv_text import frame_csv
    from cir_demo.utils.io import write_text_atomic

    try:
        write_text_atomic(path, frame_csv(df))
    except OSError as exc:
        log.warning("run cache %s not written: %s", path, exc)


def recorded_keys(
    benchmark: Benchmark,
    specs: Mapping[str, dict],
    depths: Mapping[str, int],
    reranker_spec: dict | None,
    top_n: int,
    index_uri: str | None = None,
) -> dict[str, str]:
    """{run name: key digest} of an eval run's runs (each retriever with spec `specs[name]` ranked
    `depths[name]` deep; reranked by `reranker_spec` to `top_n` when given): what run_info.json
    records, so that a store finds them."""
    from cir_demo.engine import benchmark_fingerprint
    from cir_demo.rerank.base import spec_hash_of

    fp, module = benchmark_fingerprint(benchmark), metric_family(benchmark.metric_family).module
    rr = spec_hash_of(reranker_spec) if reranker_spec else None
    out, queries = {}, query_set_hash(benchmark)
    for name, spec in specs.items():
        index = NO_INDEX if is_results_file(spec) else index_label(index_uri)
        first = first_stage_hash(spec)
        out[name] = run_key(fp, module, first, depths[name], index=index, queries=queries).digest()
        if rr:
            out[f"{name}{RERANK_SUFFIX}"] = run_key(fp, module, first, depths[name], rr, top_n, index, queries).digest()
    return out
