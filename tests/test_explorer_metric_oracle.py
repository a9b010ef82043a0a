"""The app shows what `--eval` scored, and both are the protocol's numbers, for every metric family: the
per-column metrics the explorer computes for a ranking (`metrics_many`, what `ExplorerService.compare`
fills each column with) and the run's per_query.csv row that `--eval --results-json` writes for the same
query and run both equal the family's primary metric computed from its written definition by a naive
loop below (the oracle: neither side's code); on the world exported to CIRR, a whole `compare` of two
precomputed runs shows the official ranks (the reference left out, a naive scan of the file) and the
eval numbers, and its A-vs-B sort orders by per_query.csv's differences."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cir_demo.benchmarks.families import FAMILIES, metric_family
from cir_demo.cli import main
from cir_demo.explorer import SEARCH_K, metrics_many

from test_benchmarks_icir import make_icir
from test_eval_families import edir_folder


def rankings(bench, seed: int, depth: int = SEARCH_K) -> dict[str, list[str]]:
    """Random rankings of the corpus `depth` deep, the query's positives near the top for some."""
    rng = np.random.default_rng(seed)
    out = {}
    for i, q in enumerate(bench.queries):
        r = [str(x) for x in rng.permutation(bench.corpus_ids)]
        for p in list(q.positives)[:2] if i % 2 == 0 else []:
            if p in r:
                r.remove(p)
                r.insert(int(rng.integers(0, 12)), p)
        if i % 3 == 0 and q.reference_ids and q.reference_ids[0] in r:  # CIRR deletes it: its place matters
            r.remove(q.reference_ids[0])
            r.insert(0, q.reference_ids[0])
        out[q.query_id] = r[:depth]
    return out


def _ap_at(ranking, positives, k: int) -> float:
    """PinPoint's and CIRCO's AP@k as their docstrings define it: the sum of precision@i over the ranks
    i <= k holding a positive, divided by min(number of positives as listed, k); 0 without positives."""
    if not positives:
        return 0.0
    hits, total = 0, 0.0
    for i, image in enumerate(ranking[:k], 1):
        if image in positives:
            hits += 1
            total += hits / i
    return total / min(len(positives), k)


def _icir_ap(ranking, positives, gallery) -> float:
    """i-CIR's trapezoidal AP over the ranking cut to the instance's gallery, epsilon included."""
    cut = [x for x in ranking if gallery is None or x in gallery]
    ranks = [r for r, x in enumerate(cut) if x in positives]
    total = sum(((1.0 if r == 0 else j / r) + (j + 1) / (r + 1)) / 2 for j, r in enumerate(ranks))
    return total / (len(positives) + 1e-5)


def oracle_primary(family: str, ranking, q) -> float:
    """The family's primary metric of one query, from the protocol's description (NaN: not scored)."""
    positives, gallery = list(q.positives), getattr(q.judgments, "gallery", None)
    if family in ("pinpoint", "circo"):  # AP@10
        return _ap_at(ranking, positives, 10)
    if family == "edir":  # Recall@1: distinct positives in the top 1 over the distinct positives
        return len(set(ranking[:1]) & set(positives)) / len(set(positives)) if positives else float("nan")
    if family == "cirr":  # Recall@1 once the reference is deleted
        return float([x for x in ranking if x != q.reference_ids[0]][:1] == [q.target_id])
    if family == "fashioniq":  # Recall@10 among the query's gallery, nothing deleted
        return float(q.target_id in [x for x in ranking if gallery is None or x in gallery][:10])
    if family == "icir":
        return _icir_ap(ranking, set(positives), gallery)
    raise AssertionError(f"no oracle for family {family}")


def eval_per_query(argv: list[str], runs: dict[str, dict], tmp: Path) -> pd.DataFrame:
    files = []
    for name, run in runs.items():
        (tmp / f"{name}.json").write_text(json.dumps(run))  # a list per query: CIRCO's results format
        files.append(str(tmp / f"{name}.json"))
    out = tmp / "out"
    assert main(["eval", *argv, "--results-json", *files, "--out", str(out), "--n-boot", "0", "--no-plots"]) == 0
    return pd.read_csv(out / "per_query.csv", dtype={"query_id": str, "run": str})


def assert_columns_equal_per_query_csv(bench, runs: dict[str, dict], table: pd.DataFrame) -> int:
    """Every run's column metrics (`metrics_many`) equal its per_query.csv row, and the primary metric of
    both equals `oracle_primary`'s; returns the number of values checked against the oracle."""
    fam = metric_family(bench.metric_family)
    checked = 0
    for name, run in runs.items():
        rows = table[table["run"] == name].set_index("query_id")
        qs = [q for q in bench.queries if q.query_id in run]
        shown = metrics_many([(run[q.query_id], q) for q in qs], fam)
        for q, values in zip(qs, shown):
            want = oracle_primary(fam.name, run[q.query_id], q)
            written = float(rows.at[q.query_id, fam.primary]) if q.query_id in rows.index else float("nan")
            for got in (values[fam.primary], written):  # the CSV has 6 places
                assert (np.isnan(got) and np.isnan(want)) or got == pytest.approx(want, abs=5.1e-7), (
                    name,
                    q.query_id,
                    got,
                    want,
                )
            checked += not np.isnan(want)
            for metric in fam.shown:  # the columns' short call (`shown_kwargs`) scores as the full one
                csv_value = float(rows.at[q.query_id, metric]) if q.query_id in rows.index else float("nan")
                got = values[metric]
                assert (np.isnan(got) and np.isnan(csv_value)) or got == pytest.approx(csv_value, abs=5.1e-7), (
                    name,
                    q.query_id,
                    metric,
                )
    return checked


def world_export(tmp_path_factory, kind: str, image_mode: str = "none", groups: int = 25):
    """(folder, benchmark) of the first `groups` intents of the tiny world exported to CIRR (its val split,
    the one read back: each split's images cost a PNG encode of the whole corpus) or FashionIQ."""
    from cir_demo.world import load_world

    root = tmp_path_factory.mktemp(f"export_{kind}")
    world = load_world(size="tiny", progress=False).limit(groups)
    if kind == "cirr":
        from cir_demo.benchmarks.cirr import export_cirr, load_cirr

        export_cirr(world, root, splits=("val",), image_mode=image_mode, skip_two_image=True)
        return root, load_cirr(root)
    from cir_demo.benchmarks.fashioniq import export_fashioniq, load_fashioniq

    export_fashioniq(world, root, image_mode=image_mode, skip_two_image=True)
    return root, load_fashioniq(root)


@pytest.fixture(scope="module")
def world_cirr(tmp_path_factory):
    return world_export(tmp_path_factory, "cirr", image_mode="render")  # the explorer opens the references


def test_every_family_columns_equal_per_query_csv(tmp_path, tmp_path_factory, world_cirr):
    from cir_demo.benchmarks.registry import load_benchmark

    fiq_root, _ = world_export(tmp_path_factory, "fashioniq")
    (tmp_path / "icir").mkdir()
    make_icir(tmp_path / "icir" / "data")
    (tmp_path / "edir").mkdir()
    edir_folder(tmp_path / "edir" / "data")
    circo = tmp_path / "circo"
    circo.mkdir()
    entries = [
        {
            "reference_img_id": 1000 + i,
            "target_img_id": 2000 + i,
            "relative_caption": f"change {i}",
            "shared_concept": "c",
            "gt_img_ids": [2000 + i, 3000 + i, 3100 + i],
            "id": i,
            "semantic_aspects": ["addition"],
        }
        for i in range(12)
    ]
    (circo / "val.json").write_text(json.dumps(entries))
    ids = sorted({x for e in entries for x in (e["reference_img_id"], *e["gt_img_ids"])} | set(range(60)))
    (circo / "corpus.txt").write_text("\n".join(map(str, ids)))
    cases = {
        "world": ["--benchmark", "world", "--world-size", "tiny", "--limit", "15"],
        "cirr": ["--benchmark", "cirr", "--root", str(world_cirr[0])],
        "fashioniq": ["--benchmark", "fashioniq", "--root", str(fiq_root)],
        "circo": [
            "--benchmark",
            "circo",
            "--annotations",
            str(circo / "val.json"),
            "--corpus-ids",
            str(circo / "corpus.txt"),
        ],
        "edir": ["--benchmark", "edir", "--root", str(tmp_path / "edir" / "data")],
        "icir": ["--benchmark", "icir", "--root", str(tmp_path / "icir" / "data")],
    }
    families = set()
    for case, argv in cases.items():
        from cir_demo.benchmarks.cli_args import benchmark_kwargs
        import argparse

        ns = argparse.Namespace(**{a.lstrip("-").replace("-", "_"): v for a, v in zip(argv[::2], argv[1::2])})
        kw = benchmark_kwargs(ns)
        bench = load_benchmark(case, **kw)
        if case == "world":
            bench = bench.limit(15)
        runs = {"A": rankings(bench, 0), "B": rankings(bench, 1)}
        (tmp_path / case).mkdir(exist_ok=True)
        table = eval_per_query(argv, runs, tmp_path / case)
        assert assert_columns_equal_per_query_csv(bench, runs, table) >= len(bench.queries), case
        shown = table[metric_family(bench.metric_family).primary]
        assert shown.nunique() > 1, case  # the compared numbers are informative
        families.add(bench.metric_family)
    assert families == set(FAMILIES)  # every family is covered


@pytest.fixture()
def cirr_service(world_cirr, tmp_path):
    """An explorer over the world exported to CIRR whose columns are two results files (precomputed rankings)."""
    from cir_demo.engine import RetrievalEngine
    from cir_demo.explorer import ExplorerService
    from cir_demo.retrievers import registry

    root, bench = world_cirr
    runs = {"cons-a": rankings(bench, 0), "cons-b": rankings(bench, 1)}
    for name, run in runs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
        registry.register_config(
            {
                "name": name,
                "family": "precomputed",
                "params": {"path": str(tmp_path / f"{name}.json"), "format": "circo"},
            },
            replace=True,
        )
    engine = RetrievalEngine(bench, list(runs), progress=False)
    try:
        yield ExplorerService(bench, engine, list(runs), reranker=None, thumbnails_on_disk=False), runs
    finally:
        engine.close()
        for name in runs:
            registry.unregister(name)


def test_cirr_compare_shows_official_ranks_and_the_eval_numbers(cirr_service, world_cirr, tmp_path):
    service, runs = cirr_service
    root, bench = world_cirr
    table = eval_per_query(["--benchmark", "cirr", "--root", str(root)], runs, tmp_path)
    rows = table.set_index(["run", "query_id"])
    hits = reference_first = 0
    for q in bench.queries[:60]:
        cmp = service.compare(q.query_id, list(runs), k=10)
        for col in cmp.columns:
            assert col.error is None, col.error
            row = rows.loc[(col.retriever, q.query_id)]
            for metric, value in col.metrics.items():
                assert value == pytest.approx(float(row[metric]), abs=5.1e-7), (col.retriever, q.query_id, metric)
            shown = [t.image_id for t in col.tiles]
            assert q.reference_ids[0] not in shown  # the protocol deletes it
            official = [x for x in runs[col.retriever][q.query_id] if x != q.reference_ids[0]]
            assert [t.rank for t in col.tiles] == list(range(1, len(shown) + 1)) and shown == official[:10]
            targets = [t.rank for t in col.tiles if t.judgment == "positive"]
            assert bool(targets) == (col.metrics["Recall@10"] == 1.0)
            if targets:
                assert targets == [int(row["target_rank"])]
                hits += 1
            if runs[col.retriever][q.query_id][0] == q.reference_ids[0]:
                assert "left out" in (col.note or "")
                reference_first += 1
            members = set(q.judgments.subset) - {q.reference_ids[0]}
            assert {t.image_id for t in col.tiles if "img_set" in t.marks} == members & set(shown)
    assert hits > 3 and reference_first > 0  # both branches above were checked
    assert "target" in dict(service.query_view(bench.queries[0].query_id).facts)["judgments"]
    names = [c.name for c in service.sorts() if c.available]
    assert "diff:cons-a,cons-b" in names and "negatives" not in names and "reference_first" in names
    listed = service.sorted_queries("diff:cons-a,cons-b", limit=10_000)
    gain = {
        q: float(rows.loc[("cons-a", q), "Recall@1"] - rows.loc[("cons-b", q), "Recall@1"])
        for q in listed.rows["query"]
    }
    assert list(gain.values()) == sorted(gain.values(), reverse=True) and max(gain.values()) == 1.0
