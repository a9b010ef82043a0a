"""Your own runs in the explorer (`python app.py --runs`), the Report's paired comparisons of them, and
run folders written outside runs/: checked against what `--eval` writes for the same files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

import app
from cir_demo.explorer import ServiceConfig, ServiceError, build_service
from cir_demo.explorer.own_runs import parse_run_args, runs_problems
from own_runs_support import cirr_world_with_runs, eval_both_runs


@pytest.fixture(scope="module")
def cirr_world(tmp_path_factory):
    """The tiny world exported to CIRR (no images), two runs on it, and `--eval` of both."""
    root = tmp_path_factory.mktemp("own_runs")
    mp = pytest.MonkeyPatch()
    bench, pa, pb = cirr_world_with_runs(root, mp)
    out = root / "elsewhere" / "eval-cirr"
    eval_both_runs(root, pa, pb, out)
    yield root, bench, pa, pb, out
    mp.undo()


OWN_SERVICE_STAGES: list[str] = []  # what `own_service`'s load said, stage by stage


@pytest.fixture(scope="module")
def own_service(cirr_world):
    root, _, pa, pb, _ = cirr_world
    bad = root / "bad.json"
    bad.write_text(json.dumps({"0": {"retrieved_items": "x"}, "1": {"retrieved_items": 5}}))  # two problems
    svc = build_service(
        ServiceConfig(
            benchmark="cirr",
            benchmark_kwargs={"root": str(root / "cirr")},
            reranker="none",
            runs=(("A", str(pa)), ("B", str(pb)), ("bad", str(bad))),
            warm_thumbnails=False,
        ),
        stage=OWN_SERVICE_STAGES.append,
    )
    yield svc
    svc.engine.close()


def test_the_load_says_a_run_column_is_its_results_file_not_a_model(own_service):
    columns = [s for s in OWN_SERVICE_STAGES if s.startswith("retriever ")]
    assert columns == [
        "retriever 1/2 A: its results file (no model to load)",
        "retriever 2/2 B: its results file (no model to load)",
    ]


def test_run_arguments_name_columns_and_are_checked_before_any_work(tmp_path):
    f = tmp_path / "model_a.json"
    f.write_text("{}")
    runs = parse_run_args([str(f), f"mine={f}"])
    assert [(r.name, r.path) for r in runs] == [("model_a", str(f)), ("mine", str(f))]
    with pytest.raises(ServiceError, match="two runs are named 'model_a'"):
        parse_run_args([str(f), str(f)])
    assert runs_problems([str(tmp_path / "nope.json")]) == [
        f"--runs nope: results file not found: {tmp_path / 'nope.json'}"
    ]
    assert "folder without an eval run's metrics.csv" in runs_problems([str(tmp_path)])[0]
    assert runs_problems([str(f)]) == [] and runs_problems(None) == []
    assert app.main(["--runs", str(tmp_path / "nope.json")]) == 2  # one line, nothing served


def test_runs_are_the_columns_and_unusable_files_one_line(own_service, cirr_world):
    root = cirr_world[0]
    svc = own_service
    assert svc.retriever_names == ["A", "B"]  # --runs without --retrievers: instead of the default models
    bad = [w for w in svc.warnings if w.startswith("run bad")]
    assert len(bad) == 1 and "\n" not in bad[0] and str(root) not in bad[0]
    assert "bad.json: query '0', field 'retrieved_items': read as pinpoint results: must be a list" in bad[0]
    assert "(and 1 more problems" in bad[0]
    images = [w for w in svc.warnings if "tiles show image ids" in w]
    # CIRR's images have no per-image address: where they come from and where they go, never a fetch that fails
    assert len(images) == 1 and "--image-dir" in images[0] and "NLVR2" in images[0] and "img_raw" in images[0]
    assert "images fetch" not in images[0]


def test_every_column_metric_is_the_eval_per_query_row(own_service, cirr_world):
    """The app's per-column metrics of a results file equal `--eval`'s per_query.csv for the same query and run."""
    _, bench, _, _, out = cirr_world
    rows = pd.read_csv(out / "per_query.csv", dtype={"query_id": str}).set_index(["run", "query_id"])
    shown = own_service.family.shown
    from cir_demo.ui import components

    for q in bench.queries[:40]:
        cmp = own_service.compare(q.query_id, ["A", "B"], k=10)
        if q is bench.queries[0]:  # CIRR has no explicit negatives: its columns and legend never speak of them
            text = re.sub(r"<[^>]+>", " ", components.results_html(cmp))  # what a visitor reads
            assert "✓ target" in text and "negative" not in text
        for col in cmp.columns:
            assert col.error is None
            assert not any(t.thumb for t in col.tiles)  # no images here: ids in a placeholder
            for m in shown:
                assert col.metrics[m] == pytest.approx(rows.loc[(col.retriever, q.query_id), m]), (q.query_id, m)


def test_report_paired_numbers_are_evals_paired_csv(own_service, cirr_world):
    out = cirr_world[4]
    scored = own_service.scored_file_runs(n_boot=200, seed=0)
    paired = pd.read_csv(out / "paired.csv")
    avg = "mean(Recall@5,Recall_subset@1)"
    assert (
        list(scored.paired["metric"])
        == list(paired["metric"])
        == [
            avg,
            "Recall@1",
            "Recall@5",
            "Recall@10",
            "Recall@50",
            "Recall_subset@1",
            "Recall_subset@2",
            "Recall_subset@3",
        ]
    )
    for col in ("diff", "lo", "hi"):
        assert scored.paired[col].to_numpy() == pytest.approx(paired[col].to_numpy(), abs=1e-5), col
    from cir_demo.metrics.headline import p_text

    assert [p_text(p, 200) for p in scored.paired["p_value"]] == [str(p) for p in paired["p_value"]]
    by = paired.set_index("metric")  # the leaderboard average's paired row: the mean of its two parts' rows
    assert by.loc[avg, "diff"] == pytest.approx(
        (by.loc["Recall@5", "diff"] + by.loc["Recall_subset@1", "diff"]) / 2, abs=1e-5
    )
    assert (paired["p_value"].astype(str) != "0").all()  # none prints as 0: below 1/200 it is "< 0.005"
    metrics = pd.read_csv(out / "metrics.csv").set_index("model")
    got = scored.metrics.set_index("run")
    for run in ("A", "B"):
        for agg in (
            "Recall@1",
            "Recall@5",
            "Recall@50",
            "Recall_subset@1",
            "Recall_subset@2",
            "Recall_subset@3",
            "mean(Recall@5,Recall_subset@1)",
        ):
            assert got.loc[run, agg] == pytest.approx(metrics.loc[run, agg], abs=1e-4)
            lo, hi = metrics.loc[run, f"{agg}_ci_lo"], metrics.loc[run, f"{agg}_ci_hi"]  # every one has its interval
            assert lo <= metrics.loc[run, agg] <= hi


def test_report_shows_your_runs_pairs_and_the_eval_written_elsewhere(own_service, cirr_world):
    from cir_demo.ui import report

    out = cirr_world[4]
    shown = report.show_report(own_service)
    assert shown["own_metrics"]["visible"] is True and "Your runs" in shown["own_info"]
    assert shown["paired"]["visible"] is True and "paired bootstrap over paraphrase groups" in shown["paired"]["label"]
    assert list(shown["paired"]["value"]["metric"])[:2] == ["mean(Recall@5,Recall_subset@1)", "Recall@1"]
    curves = {caption: path for path, caption in shown["plots"]["value"] if caption.startswith("Your runs")}
    assert {
        "Your runs: Recall@k of each run over the cutoffs k, with 95% intervals",
        "Your runs: Recall_subset@k of each run (within the query's image set), with 95% intervals",
    } <= set(curves)
    assert all(Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in curves.values())
    own = shown["own_metrics"]["value"].set_index("Run")  # every headline number of CIRR papers, with its interval
    assert {"Recall_subset@2", "Recall_subset@3", "Avg"} <= set(own.columns)
    assert re.fullmatch(r"0\.\d{4} \[0\.\d{4}, 0\.\d{4}\]", own.loc["A", "Avg"])
    assert [v for _, v in shown["pair"]["choices"]] == ["diff:A,B", "diff:B,A"]
    runs = own_service.runs()  # written with --out outside runs/: listed, by its last two path parts
    assert [r.label for r in runs] == [f"{out.parent.name}/{out.name}"]
    assert str(out.parent.parent) not in shown["info"]


def test_a_query_missing_from_a_run_says_so_in_its_column(cirr_world, tmp_path):
    root, bench, pa, _, _ = cirr_world
    data = json.loads(pa.read_text())
    first = bench.results_key(bench.queries[0].query_id)
    del data[first]
    part = tmp_path / "part.json"
    part.write_text(json.dumps(data))
    svc = build_service(
        ServiceConfig(
            benchmark="cirr",
            benchmark_kwargs={"root": str(root / "cirr")},
            reranker="none",
            runs=(("part", str(part)),),
            warm_thumbnails=False,
        )
    )
    try:
        col = svc.compare(bench.queries[0].query_id, ["part"]).columns[0]
        assert "has no ranking for this query" in col.error
        assert any("ranks 251 of 252 queries" in w for w in svc.warnings)
        # a sort that keeps no query is not offered: this file never ranks a query's reference first (B does)
        refs = {bench.results_key(q.query_id): q.reference_ids[0] for q in bench.queries}
        assert not any(ranking[0] == refs[key] for key, ranking in data.items())
        offered = {c.name: c for c in svc.sorts()}
        assert (
            not offered["reference_first"].available
            and offered["reference_first"].reason == "no query fits it in these runs"
        )
        assert svc.find_queries(sort="reference_first").total == 0  # picked before the menu knew: an empty list
        assert offered["worst"].available and offered["target_rank"].available
    finally:
        svc.engine.close()


def test_a_sort_is_offered_where_it_keeps_queries(own_service, cirr_world):
    bench = cirr_world[1]
    assert {c.name: c.available for c in own_service.sorts()}["reference_first"]  # B ranks every reference first
    assert len(own_service.find_queries(sort="reference_first", limit=10_000).rows) == len(bench.queries)


def test_world_export_circo_round_trip(tmp_path):
    """CIRCO's layout, read back by the CIRCO loader: one query per single-image world query, the target
    first among the ground truths, references in the corpus, images written once where load_circo looks."""
    from cir_demo.benchmarks.registry import load_benchmark
    from cir_demo.cli import main as cli

    assert (
        cli(["world", "export", "--format", "circo", "--size", "tiny", "--out", str(tmp_path), "--images", "render"])
        == 0
    )
    world = load_benchmark("world", size="tiny")
    circo = load_benchmark(
        "circo",
        annotations=str(tmp_path / "annotations" / "val.json"),
        corpus_ids=str(tmp_path / "image_info_unlabeled2017.json"),
    )
    ids = json.loads((tmp_path / "query_id_map.json").read_text())
    singles = [q for q in world.queries if q.is_single]
    assert [ids[q.query_id] for q in circo.queries] == [q.query_id for q in singles]
    for q in circo.queries[:50]:
        w = world.query(ids[q.query_id])
        assert q.reference_ids == w.reference_ids and set(q.positives) == set(w.positives)
        assert q.positives[0] == (w.target_id or w.positives[0]) and q.instruction == w.instruction
    assert set(world.corpus_ids) <= set(circo.corpus_ids)
    assert {r for q in circo.queries for r in q.reference_ids} <= set(circo.corpus_ids)
    images = list((tmp_path / "COCO2017_unlabeled" / "unlabeled2017").iterdir())
    assert len(images) == len(circo.corpus_ids)
    assert circo.images.open(circo.corpus_ids[0]).size == world.images.open(circo.corpus_ids[0]).size


def test_a_results_file_uploaded_in_the_page_is_validated_as_eval_does(own_service, cirr_world, tmp_path):
    from cir_demo.ui import report

    _, bench, pa, _, out = cirr_world
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ServiceError) as info:
        report.add_run(own_service, str(broken), [])
    assert str(info.value).startswith("broken.json: line 1: fits none of the results formats")
    assert str(tmp_path) not in str(info.value) and "\n" not in str(info.value)
    note, mine = report.add_run(own_service, str(pa), [])
    assert len(mine) == 1 and mine[0].startswith("A-") and "Added" in note
    assert own_service.retriever_names == ["A", "B"]  # another visitor's columns are not changed
    q = bench.queries[0]
    mine_col, file_col = own_service.compare(q.query_id, [mine[0], "A"]).columns
    assert mine_col.metrics == file_col.metrics and [t.image_id for t in mine_col.tiles] == [
        t.image_id for t in file_col.tiles
    ]
    shown = report.show_report(own_service, None, None, mine)
    assert mine[0] in set(shown["own_metrics"]["value"]["Run"])
    assert f"diff:{mine[0]},A" in [v for _, v in shown["pair"]["choices"]]


def test_the_report_run_is_this_benchmarks_not_a_newer_one_of_other_files(cirr_world, tmp_path):
    """Runs are matched by the benchmark's files (checksums and split), not its name: a newer eval of another
    CIRR root is not offered, and the folder given to `--runs` is the default over a newer run of these files."""
    import os
    import shutil

    from cir_demo.engine import benchmark_fingerprint
    from cir_demo.store.folders import list_runs

    root, bench, pa, pb, out = cirr_world
    other = tmp_path / "other-cirr"
    shutil.copytree(root / "cirr", other)
    cap = next((other / "captions").glob("cap.*.val.json"))
    cap.write_text(json.dumps(json.loads(cap.read_text())[1:]))  # one query fewer: other files
    other_out, newer_out = tmp_path / "eval-other", tmp_path / "eval-same"
    for r, o in ((other, other_out), (root / "cirr", newer_out)):
        assert (
            app.main(
                [
                    "--eval",
                    "--benchmark",
                    "cirr",
                    "--root",
                    str(r),
                    "--results-json",
                    str(pa),
                    "--out",
                    str(o),
                    "--n-boot",
                    "0",
                    "--no-plots",
                ]
            )
            == 0
        )
    os.utime(out, (1_000_000, 1_000_000))  # the given folder is the oldest of all
    fp = benchmark_fingerprint(bench)
    assert json.loads((other_out / "metrics.json").read_text())["benchmark_fingerprint"] != fp
    runs = list_runs("cirr", fp, extra=[out])
    assert [r.path.resolve() for r in runs] == [out.resolve(), newer_out.resolve()]  # other_out: not offered
    assert [r.matches for r in runs] == ["fingerprint", "fingerprint"]
    svc_like = list_runs("cirr", fp)  # no folder given: the newest of these files first, the other root's never
    assert svc_like[0].path.resolve() == newer_out.resolve() and other_out.resolve() not in [
        r.path.resolve() for r in svc_like
    ]
    given_other = list_runs("cirr", fp, extra=[other_out])  # given although of other files: labelled
    assert given_other[0].path.resolve() == other_out.resolve() and given_other[0].matches == "other"
    from cir_demo.explorer import load_report

    assert any("other benchmark files" in line for line in load_report(given_other[0]).info)


@pytest.mark.parametrize(
    "kind, says",
    [
        ("cirr", ("NLVR2", "img_raw")),
        ("fashioniq", ("fashion-iq", "images/")),
        ("circo", ("unlabeled2017", "cocodataset.org")),
    ],
)
def test_images_fetch_names_where_the_images_come_from(kind, says, tmp_path, capsys):
    """`images fetch` of a benchmark whose images have no per-image address: one line naming their source and
    the folder layout, not "names no address"."""
    from cir_demo.cli import main as cli

    assert cli(["world", "export", "--format", kind, "--size", "tiny", "--out", str(tmp_path / kind)]) == 0
    capsys.readouterr()
    flags = (
        [
            "--annotations",
            str(tmp_path / kind / "annotations" / "val.json"),
            "--corpus-ids",
            str(tmp_path / kind / "image_info_unlabeled2017.json"),
        ]
        if kind == "circo"
        else ["--root", str(tmp_path / kind)]
    )
    assert cli(["images", "fetch", "--benchmark", kind, *flags]) != 0
    err = capsys.readouterr().err
    assert all(s in err for s in says) and "--image-dir" in err and "names no address" not in err, err


# world and PinPoint terms that say nothing on CIRR (its queries have a target, no explicit negatives,
# no intent types, domains or skin tones, no world models)
NOT_CIRR = (
    "AP@10",
    "NegRecall",
    "negative",
    "skin tone",
    "domain",
    "intent type",
    "offline world",
    "world-CLIP",
    "P@10",
)


def test_cirr_pages_speak_of_cirr_only(own_service):
    """Help, filter label, list columns, row tags and legend of a CIRR app: CIRR's words (a target, its
    img_set, Recall@k), the runs tagged as results files, and none of the world's or PinPoint's terms."""
    from cir_demo.ui import app as ui_app, explore

    out = ui_app.initial_outputs(own_service, {})
    about = out["about"]
    rows = re.sub(r"<[^>]+>", " ", out["view:results"])  # what a visitor reads of the rows and the legend
    label = out["filter_box"]["label"]
    columns = list(out["list"]["value"].columns)
    for text in (about, rows, label, out["view:header"], " ".join(columns)):
        assert not [t for t in NOT_CIRR if t.lower() in text.lower()], text
    assert "target" in about and "img_set" in about and "Recall@1" in about and "results file" in about
    assert ">composed<" not in out["view:results"]  # a results file's query is not known to be composed
    assert "results file" in rows and "✓ target = green solid frame" in rows and "Rs@1" in rows
    assert "Rs@k = Recall_subset@k" in rows  # the rows' short names, spelled out in the legend
    assert label == "Filters (caption length)"
    assert columns == ["query", "instruction"]  # no empty "type", no "refs" (every query has one reference)
    world_about = explore.about_markdown("world", own_service.family, own_service.views, ["results file"])
    assert "offline world" in world_about and "offline world" not in about  # the benchmark names the intro


def test_first_visit_opens_a_query_the_runs_disagree_on(own_service, cirr_world):
    """Without a query in the link the page opens the query on which A and B differ most on Recall@1 (one
    of them ranking the target first), the earliest such: found here by a loop over --eval's
    per_query.csv; a sort in the link is kept in the list, the dropdown and the view's link."""
    from cir_demo.explorer.first_view import telling_query
    from cir_demo.ui import app as ui_app

    _, bench, _, _, out = cirr_world
    rows = pd.read_csv(out / "per_query.csv", dtype={"query_id": str})
    r1 = {(run, qid): value for run, qid, value in zip(rows["run"], rows["query_id"], rows["Recall@1"])}

    def loop(order):
        expected, widest = None, 0.0
        for qid in order:
            values = [r1[(run, qid)] for run in ("A", "B")]
            if max(values) > 0 and max(values) - min(values) > widest:
                expected, widest = qid, max(values) - min(values)
        return expected

    order = [q.query_id for q in bench.queries]
    expected = loop(order)
    for other in (order[1:], order[::-1]):  # other first queries, ties broken by the order given
        assert telling_query(rows, "Recall@1", ["A", "B"], other) == loop(other) != other[0]
    page = ui_app.initial_outputs(own_service, {})
    assert f"query={expected}" in page["view:share"] and "sort=" not in page["view:share"]

    linked = ui_app.initial_outputs(own_service, {"sort": "diff:A,B"})
    assert linked["sort"]["value"] == "diff:A,B" and "sort=diff:A,B" in linked["view:share"]
    assert linked["ids"] == list(own_service.find_queries(sort="diff:A,B").rows["query"])
    bad = ui_app.initial_outputs(own_service, {"sort": "no-such-sort"})
    assert "no\\-such\\-sort" in bad["link_note"] and "value" not in bad["sort"] and bad["ids"] == page["ids"]
