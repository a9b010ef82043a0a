"""One source of per-query truth: on the world exported to CIRR, FashionIQ and CIRCO with two runs of
one's own (targets ranked first, beyond 50, or not at all), the app's list for every sort is
`failures --sort`'s rows in its order, and every target rank and img_set rank (the app's rows, its
columns, `failures`' CSV and `--eval`'s per_query.csv) is the one a naive scan of the results file
gives: the official rank over the whole file, never a ranking cut at 50."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cir_demo.cli import main
from cir_demo.explorer import ServiceConfig, build_service
from cir_demo.ui.components import column_html

from test_explorer_metric_oracle import world_export


def _h(*parts: str) -> str:
    return hashlib.md5("|".join(parts).encode()).hexdigest()


def two_runs(bench, folder: Path) -> dict[str, dict[str, list[str]]]:
    """A ranks the whole corpus, B its first 110 images of the corpus (and of FashionIQ's other categories
    in between); each puts the target first, at official rank 3-10, at 56-101 or (B only) nowhere, by
    query; B ranks the query's reference first on every third query."""
    runs = {"A": {}, "B": {}}
    for i, q in enumerate(bench.queries):
        target = q.target_id or q.positives[0]
        rest = sorted(
            (c for c in bench.corpus_ids if c != target and c not in q.reference_ids), key=lambda c: _h(q.query_id, c)
        )
        for name, shift in (("A", 0), ("B", 1)):
            case = (i + shift) % 4
            at = [0, 2 + i % 8, 55 + (7 * i) % 46, None][case]
            if name == "A" and at is None:
                at = 70
            ranking = list(rest)
            if at is not None:  # `at` images the protocol ranks before it (FashionIQ: of the gallery)
                scoped = [
                    j for j, x in enumerate(ranking) if bench.metric_family != "fashioniq" or x in q.judgments.gallery
                ]
                ranking.insert(scoped[at] if at else 0, target)
            if name == "B":
                scoped = [
                    j for j, x in enumerate(ranking) if bench.metric_family != "fashioniq" or x in q.judgments.gallery
                ]
                ranking = ([q.reference_ids[0]] if i % 3 == 0 else []) + ranking[: scoped[110]]
            runs[name][q.query_id] = ranking
    for name, run in runs.items():
        (folder / f"{name}.json").write_text(json.dumps({bench.results_key(k): v for k, v in run.items()}))
    return runs


def naive_ranks(bench, run: dict[str, list[str]]) -> dict[str, tuple]:
    """query id -> (target rank, img_set rank) by scanning the ranking as each protocol says: CIRR deletes
    the reference, FashionIQ ranks the category's gallery only, CIRCO ranks everything (no img_set)."""
    out = {}
    for q in bench.queries:
        ranking = run[q.query_id]
        kept = [x for x in ranking if x not in q.reference_ids] if bench.metric_family == "cirr" else ranking
        if bench.metric_family == "fashioniq":
            kept = [x for x in ranking if x in q.judgments.gallery]
        target = q.target_id or q.positives[0]
        rank = kept.index(target) + 1 if target in kept else None
        subset = None
        if bench.metric_family == "cirr":
            members = [m for m in q.judgments.subset if m not in q.reference_ids]
            seen = [x for x in kept if x in members]
            subset = seen.index(target) + 1 if target in seen else len(members)
        out[q.query_id] = (rank, subset)
    return out


def load_export(kind: str, tmp_path_factory):
    if kind in ("cirr", "fashioniq"):
        root, bench = world_export(tmp_path_factory, kind, groups=12)
        return bench, ["--root", str(root)], {"root": str(root)}
    from cir_demo.benchmarks.circo import export_circo, load_circo
    from cir_demo.world import load_world

    root = tmp_path_factory.mktemp("export_circo")
    paths = export_circo(load_world(size="tiny", progress=False).limit(12), root, skip_two_image=True)
    kw = {"annotations": str(paths["annotations"]), "corpus_ids": str(paths["corpus_ids"])}
    return load_circo(**kw), ["--annotations", kw["annotations"], "--corpus-ids", kw["corpus_ids"]], kw


@pytest.fixture(scope="module", params=["cirr", "fashioniq", "circo"])
def family_case(request, tmp_path_factory):
    """(benchmark, flags, runs, folder, per_query.csv of `--eval` of both runs, the app over both runs)."""
    kind = request.param
    bench, flags, kwargs = load_export(kind, tmp_path_factory)
    folder = tmp_path_factory.mktemp(f"truth_{kind}")
    runs = two_runs(bench, folder)
    files = [str(folder / "A.json"), str(folder / "B.json")]
    assert (
        main(
            [
                "eval",
                "--benchmark",
                kind,
                *flags,
                "--results-json",
                *files,
                "--out",
                str(folder / "eval"),
                "--n-boot",
                "0",
                "--no-plots",
            ]
        )
        == 0
    )
    table = pd.read_csv(folder / "eval" / "per_query.csv", dtype={"query_id": str, "run": str})
    svc = build_service(
        ServiceConfig(
            benchmark=kind,
            benchmark_kwargs=kwargs,
            reranker="none",
            runs=(("A", files[0]), ("B", files[1])),
            warm_thumbnails=False,
        )
    )
    yield bench, flags, runs, folder, table, svc
    svc.engine.close()


def failures_csv(case, sort: str, *extra: str) -> list[dict]:
    bench, flags, _, folder, _, _ = case
    out = folder / f"failures-{len(list(folder.glob('failures-*.csv')))}.csv"  # a new file each: nothing set aside
    assert (
        main(
            [
                "failures",
                "--benchmark",
                bench.metric_family,
                *flags,
                "--results-json",
                f"A={folder / 'A.json'}",
                str(folder / "B.json"),
                "--sort",
                sort,
                "--out",
                str(out),
                "--overwrite",
                *extra,
            ]
        )
        == 0
    )
    with open(out, newline="") as f:
        return list(csv.DictReader(f))


def _int(v) -> int | None:
    return None if v in ("", None) or v != v else int(float(v))


def test_every_sort_of_the_app_is_failures_rows_in_its_order(family_case):
    bench, _, runs, _, _, svc = family_case
    sorts = [c.name for c in svc.sorts() if c.available and c.name != "order"]
    assert "diff:A,B" in sorts and "diff:B,A" in sorts and "worst" in sorts
    assert {"cirr": "subset_rank", "fashioniq": "target_rank", "circo": "missed_gt"}[bench.metric_family] in sorts
    for sort in sorts:
        listed = svc.sorted_queries(sort, limit=100_000).rows
        rows = failures_csv(family_case, sort)
        assert [r["query_id"] for r in rows] == list(listed["query"]), sort
        assert [r["why"] for r in rows] == list(listed["why"]), sort
        assert rows, sort


def test_every_rank_is_the_official_rank_over_the_whole_file(family_case):
    bench, _, runs, _, table, svc = family_case
    rows = failures_csv(family_case, "worst")
    app_rows = svc.failure_stats().set_index(["run", "query_id"])
    evals = table.set_index(["run", "query_id"])
    columns = ["target_rank", "subset_rank"] if bench.metric_family == "cirr" else ["target_rank"]
    beyond_50 = 0
    for name, run in runs.items():
        naive = naive_ranks(bench, run)
        for r in rows:
            qid = r["query_id"]
            rank, subset = naive[qid]
            if bench.metric_family == "circo":  # no single target: the ground truths the top 10 holds
                gts = set(next(q for q in bench.queries if q.query_id == qid).positives)
                assert int(r[f"{name}/gt_found@10"]) == sum(x in gts for x in run[qid][:10])
                assert int(r[f"{name}/n_gt"]) == len(gts) == int(evals.at[(name, qid), "n_gt"])
                continue
            beyond_50 += rank is not None and rank > 50
            want = {"target_rank": rank, "subset_rank": subset}
            for col in columns:
                assert _int(r[f"{name}/{col}"]) == want[col], (name, qid, col)
                assert _int(evals.at[(name, qid), col]) == want[col], (name, qid, col)
                assert _int(app_rows.at[(name, qid), col]) == want[col], (name, qid, col)
            if bench.metric_family == "cirr":
                assert _int(r[f"{name}/reference_rank"]) == (
                    run[qid].index(bench.query(qid).reference_ids[0]) + 1
                    if bench.query(qid).reference_ids[0] in run[qid]
                    else None
                )
    if bench.metric_family != "circo":
        assert beyond_50 >= 4  # the case the issue is about: ranks 51-100 are ranks


def test_columns_say_where_the_target_is_beyond_the_tiles(family_case):
    bench, _, runs, _, table, svc = family_case
    if bench.metric_family == "circo":  # several ground truths: where the first one is ranked
        seen = set()
        for q in bench.queries[:16]:
            for col in svc.compare(q.query_id, ["A", "B"], k=10).columns:
                assert list(col.metrics) == ["AP@5", "AP@10", "AP@25", "AP@50", "Recall@10"]
                ranking = runs[col.retriever][q.query_id]
                first = next((i + 1 for i, x in enumerate(ranking) if x in set(q.positives)), None)
                if first is None:
                    assert col.where == f"no ground truth in the top {len(ranking):,} this run ranks"
                elif first > 10:
                    assert col.where == f"first ground truth at rank {first} (beyond the 10 shown)"
                    assert "first ground truth at rank" in column_html(col, 10, True)
                else:
                    assert col.where == ""
                seen.add("none" if first is None else "beyond" if first > 10 else "shown")
        assert {"beyond", "shown"} <= seen
        return
    evals = table.set_index(["run", "query_id"])
    naive = {n: naive_ranks(bench, r) for n, r in runs.items()}
    seen = set()
    for q in bench.queries[:16]:
        for col in svc.compare(q.query_id, ["A", "B"], k=10).columns:
            rank, subset = naive[col.retriever][q.query_id]
            assert _int(col.ranks["target_rank"]) == rank
            for metric, value in col.metrics.items():
                assert value == pytest.approx(float(evals.at[(col.retriever, q.query_id), metric]), abs=5.1e-7)
            if rank is None:
                assert "target not in this run's ranking" in col.where
                seen.add("none")
            elif rank > 10:
                assert f"target at official rank {rank} (beyond the 10 shown)" in col.where
                assert f"official rank {rank} (beyond" in column_html(col, 10, True)  # the page says it
                seen.add("beyond")
            else:
                assert "official rank" not in col.where
                seen.add("shown")
            if bench.metric_family == "cirr":
                html = column_html(col, 10, True)  # short names on the row, the full ones in titles
                assert (
                    '<span title="Recall@5">R@5</span>' in html and '<span title="Recall_subset@2">Rs@2</span>' in html
                )
                assert _int(col.ranks["subset_rank"]) == subset
                assert f"target at rank {subset} within its img_set" in col.where
                assert list(col.metrics) == [
                    "Recall@1",
                    "Recall@5",
                    "Recall@10",
                    "Recall@50",
                    "Recall_subset@1",
                    "Recall_subset@2",
                    "Recall_subset@3",
                ]
    assert seen == {"none", "beyond", "shown"}


@pytest.mark.parametrize("family_case", ["fashioniq"], indirect=True)
def test_fashioniq_target_rank_sort_names_every_ranked_target(family_case):
    bench, _, runs, _, _, _ = family_case
    rows = failures_csv(family_case, "target_rank")
    ranked_by_both = {k for k in runs["A"] if all(naive_ranks(bench, r)[k][0] is not None for r in runs.values())}
    for r in rows:
        if r["query_id"] in ranked_by_both:
            assert "not in the ranking scored" not in r["why"], r
    assert any("not in the ranking scored" in r["why"] for r in rows)  # B leaves some targets out
    assert any(int(r["why"].split("at rank ")[1].split()[0]) > 50 for r in rows if "at rank " in r["why"])


@pytest.mark.parametrize("family_case", ["cirr"], indirect=True)
def test_failures_takes_names_a_diff_metric_and_says_one_error(family_case, capsys):
    bench, flags, runs, folder, table, svc = family_case
    rows = failures_csv(family_case, "diff:A,B", "--metric", "Recall@5")
    evals = table.set_index(["run", "query_id"])
    gain = {k: evals.at[("A", k), "Recall@5"] - evals.at[("B", k), "Recall@5"] for k in runs["A"]}
    got = [gain[r["query_id"]] for r in rows]
    assert got == sorted(got, reverse=True) and got[0] == 1.0 and "Recall@5" in rows[0]["why"]
    on_primary = [r["query_id"] for r in failures_csv(family_case, "diff:A,B")]
    assert [r["query_id"] for r in rows] != on_primary  # Recall@5 orders otherwise than Recall@1
    listed = svc.sorted_queries("diff:A,B:Recall@5", limit=100_000).rows  # the app's name of the same sort
    assert list(listed["query"]) == [r["query_id"] for r in rows] and list(listed["why"]) == [r["why"] for r in rows]
    assert {"A/subset_rank", "A/reference_rank", "B/target_rank"} <= set(rows[0])
    capsys.readouterr()
    base = ["failures", "--benchmark", "cirr", *flags, "--out", str(folder / "x.csv")]
    bad = folder / "bad.json"
    bad.write_text(json.dumps({bench.results_key(bench.queries[0].query_id): ["x", "x"]}))  # a repeated id
    cases = [
        (["--results-json", str(bad)], "bad.json"),
        (
            [
                "--results-json",
                str(folder / "A.json"),
                str(folder / "B.json"),
                "--sort",
                "diff:A,B",
                "--metric",
                "AP@10",
            ],
            "not a per-query metric",
        ),
        (["--results-json", str(folder / "A.json"), "--metric", "Recall@5"], "diff:A,B sort compares"),
        (["--results-json", f"A={folder / 'A.json'}", f"A={folder / 'B.json'}"], "two runs are named 'A'"),
    ]
    for argv, words in cases:
        assert main([*base, *argv]) == 2, argv
        err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning: ")]
        assert len(err) == 1 and err[0].startswith("error: ") and err[0].count("error:") == 1, err
        assert words in err[0], err
    assert not (folder / "x.csv").exists()


@pytest.mark.parametrize("family_case", ["cirr"], indirect=True)
def test_the_app_menu_compares_a_vs_b_by_the_headline_metrics(family_case):
    """The "compare by" menu offers CIRR's R@5, Rs@1 and mean(R@5,Rs@1) beside the primary; the sort menu's
    A-vs-B entry under R@5 lists `failures --sort diff:A,B --metric Recall@5`'s rows in its order, and the
    average orders by the per-query mean gain computed here from per_query.csv."""
    from cir_demo.ui import explore

    bench, _, runs, _, table, svc = family_case
    average = "mean(Recall@5,Recall_subset@1)"
    menu = explore.compare_update(svc, "diff:A,B")
    assert [v for _, v in menu["choices"]] == ["Recall@1", "Recall@5", "Recall_subset@1", average]
    assert menu["visible"] and menu["value"] == "Recall@1"
    for metric in ("Recall@5", average):
        choices = dict((v, lab) for lab, v in explore.sort_choices(svc, metric=metric))
        sort = f"diff:A,B:{metric}"
        assert sort in choices and metric in choices[sort] and "diff:A,B" not in choices
        assert "worst" in choices and len(choices) == len(explore.sort_choices(svc))  # one entry per pair still
        listed = explore.list_queries(svc, "", {}, sort)
        rows = failures_csv(family_case, "diff:A,B", "--metric", metric)
        assert listed["ids"] == [r["query_id"] for r in rows]
        assert list(listed["table"]["why"]) == [r["why"] for r in rows]
    assert sort in svc.offered_sorts()
    ev = table.set_index(["run", "query_id"])
    gain = {
        k: sum(ev.at[("A", k), m] - ev.at[("B", k), m] for m in ("Recall@5", "Recall_subset@1")) / 2 for k in runs["A"]
    }
    got = [gain[k] for k in listed["ids"]]
    assert got == sorted(got, reverse=True) and len(got) == len(runs["A"]) and got[0] > got[-1]
    update = explore.sort_update(svc, None, "diff:B,A:Recall@5")  # a linked sort keeps its metric
    assert ("diff:B,A:Recall@5" in [v for _, v in update["choices"]]) and update["value"] == "diff:B,A:Recall@5"


def test_five_consumers_agree_for_every_sort(family_case):
    """The page's list, /failures (its answer, `explorer.api.failures_answer`), `failures --sort`,
    `cd.evaluate(...).failures(sort)` and per_query.csv agree for every sort the page offers: one order,
    one `why`, and every run's per-query numbers are per_query.csv's (all read through the run store)."""
    import cir_demo as cd
    from cir_demo.explorer.api import RunRankings, failures_answer

    bench, _, _, folder, table, svc = family_case
    ev = cd.evaluate(bench, {"A": folder / "A.json", "B": folder / "B.json"}, n_boot=0)
    written = table.set_index(["run", "query_id"])
    cache = RunRankings(svc)
    sorts = [c.name for c in svc.sorts() if c.available and c.name != "order"]
    for sort in sorts:
        page = svc.sorted_queries(sort, limit=100_000).rows
        command = pd.DataFrame(failures_csv(family_case, sort))
        notebook = ev.failures(sort=sort)
        answer = pd.DataFrame(failures_answer(svc, cache, sort, ["A", "B"], None, columns="all")["rows"])
        for other in (command, notebook, answer):
            assert list(other["query_id"]) == list(page["query"]), sort
            assert list(other["why"]) == list(page["why"]), sort
        for col in [c for c in notebook.columns if "/" in c]:
            run, metric = col.split("/", 1)
            want = written.loc[[(run, q) for q in notebook["query_id"]], metric].to_numpy(dtype=float)
            for got in (notebook[col], command[col], answer[col]):
                got = pd.to_numeric(pd.Series(list(got)).replace("", None), errors="coerce").to_numpy(dtype=float)
                assert np.allclose(got, want, equal_nan=True, rtol=0, atol=0), (sort, col)
