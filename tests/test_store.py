"""The run store (cir_demo/store/): a run is read from its cache only under its whole key. On a copy of
the code, a changed metric formula in the family's metrics module (loaded by name, never imported by
an `import` statement) makes a warm data folder recompute, and the new rows are an empty folder's;
a change in code that neither produces nor scores a run keeps the cache. A reranked run cached at one
rerank depth never answers for another: that depth is produced again, as an empty folder would. Runs
reranked or ranked to another depth have other keys (a stored eval run with them is never read: test_explorer_failures.py,
test_eval_compositional_split.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from own_runs_support import cirr_world_with_runs

REPO = Path(__file__).resolve().parent.parent

ROWS = """
import json, sys
from cir_demo.benchmarks.registry import load_benchmark
from cir_demo.engine import RetrievalEngine
from cir_demo.explorer.own_runs import RunFile, load_run, register_runs
from cir_demo.store.store import RunStore

bench = load_benchmark("cirr", root=sys.argv[1])
register_runs([RunFile("A", sys.argv[2])])
engine = RetrievalEngine(bench, [], progress=False)
engine.add_retriever(load_run(bench, sys.argv[2], "A")[0])
rows, source = RunStore(bench, engine).rows_and_source("A")
print(json.dumps({"source": source, "n_retrieved": rows["n_retrieved"].tolist()}))
"""


@pytest.fixture(scope="module")
def code_copy(tmp_path_factory):
    """(a copy of the package, the CIRR export, run B: it ranks each query's reference first): the copy's
    code may be edited."""
    root = tmp_path_factory.mktemp("store_copy")
    mp = pytest.MonkeyPatch()
    _, _, pb = cirr_world_with_runs(root, mp)
    mp.undo()
    shutil.copytree(REPO / "cir_demo", root / "code" / "cir_demo", ignore=shutil.ignore_patterns("__pycache__"))
    return root / "code", root / "cirr", pb


def rows_in(code: Path, cirr: Path, run: Path, cache: Path) -> dict:
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "CIR_DEMO_DATA": str(cache), "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, "-c", ROWS, str(cirr), str(run)], cwd=code, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_changed_metric_formula_recomputes_a_warm_folder(code_copy, tmp_path):
    code, cirr, run = code_copy
    warm = tmp_path / "warm"
    first = rows_in(code, cirr, run, warm)
    assert first["source"] == "computed here"
    assert rows_in(code, cirr, run, warm)["source"] == "cache"
    ui = code / "cir_demo" / "ui" / "components.py"  # the app's drawing: neither produces nor scores a run
    ui.write_text(ui.read_text() + "\nUNRELATED = 1\n")
    assert rows_in(code, cirr, run, warm)["source"] == "cache"
    metrics = code / "cir_demo" / "metrics" / "cirr.py"
    text = metrics.read_text()
    changed = text.replace("n_retrieved[i] = len(ranking) - has_reference", "n_retrieved[i] = len(ranking)")
    assert changed != text
    metrics.write_text(changed)
    again = rows_in(code, cirr, run, warm)
    assert again["source"] == "computed here"
    fresh = rows_in(code, cirr, run, tmp_path / "empty")
    assert again["n_retrieved"] == fresh["n_retrieved"] != first["n_retrieved"]


def test_depths_are_part_of_a_runs_key(code_copy):
    """First stages ranked to one depth share their key whatever the rerank depth; reranked runs do not."""
    from cir_demo.benchmarks.registry import load_benchmark
    from cir_demo.store.store import recorded_keys

    _, cirr, _ = code_copy
    bench = load_benchmark("cirr", root=str(cirr))
    spec = {"A": {"name": "A", "family": "precomputed"}}
    rr = {"backend": "judge", "weights": "w"}
    top10 = recorded_keys(bench, spec, {"A": 50}, rr, 10)
    top20 = recorded_keys(bench, spec, {"A": 50}, rr, 20)
    deeper = recorded_keys(bench, spec, {"A": 100}, rr, 10)
    assert top10["A"] == top20["A"] != deeper["A"]
    assert len({top10["A+rerank"], top20["A+rerank"], deeper["A+rerank"]}) == 3
    other = recorded_keys(bench, spec, {"A": 50}, {**rr, "weights": "v"}, 10)
    assert other["A"] == top10["A"] and other["A+rerank"] != top10["A+rerank"]


def test_a_run_searched_in_another_index_is_another_run():
    """A Milvus index ranks ties in its own order: a run searched there never answers for FAISS's, and the
    key names the server without its credentials."""
    from cir_demo.store.key import index_label, run_key

    faiss_key = run_key("fp", "cir_demo.metrics.cirr", "spec", 50)
    lite = run_key("fp", "cir_demo.metrics.cirr", "spec", 50, index=index_label("corpus.db"))
    server = run_key("fp", "cir_demo.metrics.cirr", "spec", 50, index=index_label("https://u:secret@host:19530"))
    assert len({faiss_key.digest(), lite.digest(), server.digest()}) == 3
    assert index_label(None) == faiss_key.index == "faiss"
    assert "secret" not in server.index and server.index == "milvus:https://host:19530"


def test_a_changed_rerank_depth_recomputes_a_warm_folder(service, tmp_path, monkeypatch):
    """The tiny world's reranked run cached at top 3 answers top 3 only: at top 5 a warm folder produces it
    again, equal to an empty folder's. Oracle (a naive scan of the rankings): below the rerank depth each
    reranked ranking is the first stage's, within it the same images."""
    import pandas as pd

    from cir_demo.store.store import RunStore
    from cir_demo.testing.explorer import VERIFIER

    name = service.retriever_names[0]
    run = f"{name}+rerank"

    def read(top_n: int, folder: Path):
        monkeypatch.setenv("CIR_DEMO_CACHE", str(folder))
        store = RunStore(service.benchmark, service.engine, VERIFIER, {}, top_n)
        rows, source = store.rows_and_source(run)
        return store, rows, source

    warm = tmp_path / "warm"
    three, _, source = read(3, warm)
    assert source == "computed here"
    assert read(3, warm)[2] == "cache"
    five, rows, source = read(5, warm)
    assert source == "computed here"
    pd.testing.assert_frame_equal(rows, read(5, tmp_path / "empty")[1])
    first = three.ranking(name)
    for store, depth in ((three, 3), (five, 5)):
        reranked = store.ranking(run)
        assert set(reranked) == set(first)
        for q, ids in reranked.items():
            assert ids[depth:] == first[q][depth:] and sorted(ids[:depth]) == sorted(first[q][:depth]), (depth, q)
    assert three.ranking(run) != five.ranking(run)  # the depths' runs differ: one cannot stand for the other
