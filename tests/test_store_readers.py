"""Every reader of a run meets in the store (cir_demo/store/). Observed by counting calls to what makes a
run, below the store: the family's per-query scorer and the engine's `run_benchmark`.

- `--eval --results-json A B --out D` records each file's run under its key (run_info.json `run_keys`:
  the benchmark, the file's content, the scoring code), so with the cache emptied the app's `--runs`
  column, `failures` and `cd.evaluate` on the same files (named as they like) score nothing anew and give
  the rows a cold scoring gives; a file whose content changed is scored again.
- `cd.evaluate(bench, {"X": "<retriever>"})` reads the retriever's run from the store: produced and
  cached once, then read from the cache by a new store and engine (as in a new process); a stored eval
  run under the run's key answers with the cache empty, one recorded at another depth does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import cir_demo as cd
from own_runs_support import cirr_world_with_runs, eval_both_runs


class Calls:
    """Counts calls of `owner.attr` (a wrapper that calls the real one)."""

    def __init__(self, monkeypatch, owner, attr: str):
        self.n = 0
        real = getattr(owner, attr)

        def counted(*args, **kw):
            self.n += 1
            return real(*args, **kw)

        monkeypatch.setattr(owner, attr, counted)


@pytest.fixture(scope="module")
def cirr_eval(tmp_path_factory):
    """(root, benchmark, A, B, the --eval folder of both files)."""
    root = tmp_path_factory.mktemp("store_readers")
    mp = pytest.MonkeyPatch()
    bench, pa, pb = cirr_world_with_runs(root, mp)
    out = eval_both_runs(root, pa, pb, root / "D")
    yield root, bench, pa, pb, out
    mp.undo()


def scorer(monkeypatch, bench) -> Calls:
    """Counts the family's official per-query scoring (every path that scores a run calls it)."""
    from cir_demo.store.score import metrics_module

    return Calls(monkeypatch, metrics_module(bench), "per_query")


def cold_rows(bench, path: Path, name: str) -> pd.DataFrame:
    from cir_demo.results import read_results
    from cir_demo.store.store import rows_of

    return rows_of(bench, read_results(path, bench).run, name)


def test_an_eval_of_results_files_is_read_by_every_reader(cirr_eval, tmp_path, monkeypatch):
    from cir_demo.engine import RetrievalEngine
    from cir_demo.explorer.cli import failure_rows, failure_rows_from
    from cir_demo.explorer.own_runs import RunFile, load_run, register_runs
    from cir_demo.store.store import RunStore, stored_run_keys

    _, bench, pa, pb, out = cirr_eval
    assert set(stored_run_keys(out)) == {"A", "B"}
    written = pd.read_csv(out / "per_query.csv", dtype={"query_id": str, "run": str})
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "empty"))  # only the eval run can answer
    calls = scorer(monkeypatch, bench)

    # the app with --runs D and the files as columns, named otherwise than the eval named them
    register_runs([RunFile("first", str(pa)), RunFile("second", str(pb))])
    engine = RetrievalEngine(bench, [], progress=False)
    for name, path in (("first", pa), ("second", pb)):
        engine.add_retriever(load_run(bench, path, name)[0])
    store = RunStore(bench, engine, run_folders=[out])
    for name, stem in (("first", "A"), ("second", "B")):
        rows, source = store.rows_and_source(name)
        assert source == "D" or source.endswith("/D"), source
        want = written[written["run"] == stem].reset_index(drop=True).assign(run=name)
        pd.testing.assert_frame_equal(rows, want)
    # `failures` and the Python API
    got = failure_rows(bench, [str(pa), str(pb)], "diff:A,B")
    ev = cd.evaluate(bench, {"X": str(pa), "Y": str(pb)}, n_boot=200)
    assert calls.n == 0
    cold = {n: cold_rows(bench, p, n) for n, p in (("A", pa), ("B", pb))}
    assert calls.n == 2  # the oracle: each file scored here, from nothing
    pd.testing.assert_frame_equal(got, failure_rows_from(bench, cold, "diff:A,B"))
    both = pd.concat([cold["A"].assign(run="X"), cold["B"].assign(run="Y")], ignore_index=True)
    pd.testing.assert_frame_equal(ev.per_query, both)
    assert ev.metrics["Recall@1"].tolist() == pytest.approx(pd.read_csv(out / "metrics.csv")["Recall@1"], abs=5e-5)

    # another file (one query's ranking changed) is another run: scored, not read from D
    data = json.loads(pa.read_text())
    first = next(iter(data))
    data[first] = list(reversed(data[first]))
    changed = tmp_path / "A.json"
    changed.write_text(json.dumps(data))
    calls.n = 0
    failure_rows(bench, [str(changed)], "worst")
    assert calls.n == 1


def test_the_python_api_reads_a_retrievers_run_from_the_store(service, tmp_path, monkeypatch):
    from cir_demo.engine import RetrievalEngine
    from cir_demo.store.store import recorded_keys

    bench, name = service.benchmark, service.retriever_names[0]
    for var in ("CIR_DEMO_CACHE", "CIR_DEMO_RUNS"):
        monkeypatch.setenv(var, str(tmp_path / f"{var}-1"))
    produced = Calls(monkeypatch, RetrievalEngine, "run_benchmark")

    first = cd.evaluate(bench, {"X": name}, n_boot=20)
    assert produced.n == 1
    again = cd.evaluate(bench, {"Y": name}, n_boot=20)  # a new store and engine, as in a new process
    assert produced.n == 1  # read from the cache: produced nothing
    pd.testing.assert_frame_equal(again.per_query, first.per_query.assign(run="Y"))
    assert again.metrics.drop(columns="model").equals(first.metrics.drop(columns="model"))

    saved = first.save(tmp_path / "runs" / "X-eval", plots=False)
    monkeypatch.setenv("CIR_DEMO_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache-2"))  # empty: the eval run answers or nothing
    stored = cd.evaluate(bench, {"X": name}, n_boot=20)
    assert produced.n == 1
    pd.testing.assert_frame_equal(stored.per_query, first.per_query)

    # the same folder recording the run at another ranking depth is another run's: produced again
    info = json.loads((saved / "run_info.json").read_text())
    spec = service.engine.run_spec(name)
    depth = service.engine.eval_depth(name)
    assert recorded_keys(bench, {"X": spec}, {"X": depth}, None, 20) == info["run_keys"]
    info["run_keys"] = recorded_keys(bench, {"X": spec}, {"X": depth + 50}, None, 20)
    (saved / "run_info.json").write_text(json.dumps(info))
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache-3"))
    deeper = cd.evaluate(bench, {"X": name}, n_boot=20)
    assert produced.n == 2
    pd.testing.assert_frame_equal(deeper.per_query, first.per_query)


def test_a_subset_of_the_queries_is_another_run(cirr_eval, tmp_path, monkeypatch):
    """A file's rows scored on the first groups only (`--limit`: the benchmark's files, so its fingerprint,
    are the same) never answer for every query: the whole benchmark's are scored, as from nothing."""
    from cir_demo.explorer.cli import failure_rows, failure_rows_from

    _, bench, pa, _, _ = cirr_eval
    for var in ("CIR_DEMO_CACHE", "CIR_DEMO_RUNS"):  # an empty data folder: no eval run, no cache
        monkeypatch.setenv(var, str(tmp_path / var))
    calls = scorer(monkeypatch, bench)
    few = bench.limit(2)
    assert len(failure_rows(few, [str(pa)], "worst")) == len(few.queries) < len(bench.queries)
    got = failure_rows(bench, [str(pa)], "worst")
    assert calls.n == 2
    pd.testing.assert_frame_equal(got, failure_rows_from(bench, {"A": cold_rows(bench, pa, "A")}, "worst"))
    failure_rows(bench, [str(pa)], "worst")
    assert calls.n == 3  # the oracle's scoring; the third read came from the cache
