"""On the tiny world with the tiny models: the five consumers of a run agree for every sort the page
offers (but `shortcut` and the reranker sorts, which need the columns' modalities and a reranker,
known to the page and /failures only): the page's list, /failures' answer, `failures --sort` and
`cd.evaluate(...).failures(sort)` over the columns' runs written as results files, and per_query.csv of
`--eval` of those files."""

from __future__ import annotations

import numpy as np
import pandas as pd

import cir_demo as cd
from cir_demo.cli import main
from cir_demo.explorer.api import RunRankings, failures_answer
from cir_demo.results import write_results
from cir_demo.store.store import produce_run

TINY = ["--benchmark", "world", "--world-size", "tiny", "--limit", "20"]  # the 20 intents the tiny service shows


def test_five_consumers_agree_on_the_world(service, tmp_path):
    bench, names = service.benchmark, list(service.retriever_names)
    files = []
    for name in names:  # each column's run, as the store produces it, in a results file
        run, scores = produce_run(service.engine, name)
        assert run == service.store.ranking(name)
        files.append(tmp_path / f"{name}.json")
        write_results(files[-1], bench, run, scores, spec=service.engine.run_spec(name))
    out = tmp_path / "eval"
    assert (
        main(["eval", *TINY, "--results-json", *map(str, files), "--out", str(out), "--n-boot", "0", "--no-plots"]) == 0
    )
    written = pd.read_csv(out / "per_query.csv", dtype={"query_id": str, "run": str})
    written = {(row["run"], row["query_id"]): row for row in written.to_dict("records")}  # (run, query) -> its row
    ev = cd.evaluate(cd.load_benchmark("world", world_size="tiny", limit=20), dict(zip(names, files)), n_boot=0)
    cache = RunRankings(service)
    sorts = [
        c.name
        for c in service.sorts()
        if c.available and c.name not in ("order", "shortcut") and not c.name.startswith("rerank")
    ]
    assert {"worst", "negatives", "spread", f"diff:{names[0]},{names[1]}"} <= set(sorts)
    for sort in sorts:
        page = service.sorted_queries(sort, limit=100_000).rows
        csv_path = tmp_path / f"failures-{sort.replace(':', '-').replace(',', '-')}.csv"
        argv = ["failures", *TINY, "--results-json", *map(str, files), "--sort", sort, "--out", str(csv_path)]
        assert main(argv) == 0
        command = pd.read_csv(csv_path, dtype={"query_id": str, "why": str}, keep_default_na=False)
        notebook = ev.failures(sort=sort)
        answer = pd.DataFrame(failures_answer(service, cache, sort, names, None, columns="all")["rows"])
        for other in (command, notebook, answer):
            assert list(other["query_id"]) == list(page["query"]), sort
            assert list(other["why"]) == list(page["why"]), sort
        for col in [c for c in notebook.columns if "/" in c]:
            run, metric = col.split("/", 1)
            want = np.array([written[run, q][metric] for q in notebook["query_id"]], dtype=float)
            for got in (notebook[col], command[col], answer[col]):
                got = pd.to_numeric(pd.Series(list(got)).replace("", None), errors="coerce").to_numpy(dtype=float)
                assert np.array_equal(got, want, equal_nan=True), (sort, col)
