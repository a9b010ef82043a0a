"""The Space's API through `gradio_client` against a launched app (loopback only): the tiny world with the
tiny models and verifier, and the tiny world exported to CIRR served with two results files as `--runs`.
Oracles: the explorer service called directly, the benchmark's own judgments, `--eval`'s per_query.csv and
metrics.csv, and `python -m cir_demo failures` on the same files."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import socket

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from cir_demo.explorer import validate_upload
from cir_demo.ui import app as ui_app
from cir_demo.ui import launch

PUBLIC = {"/search", "/query", "/failures", "/evaluate", "/image"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_client(url: str):
    """A `gradio_client.Client` as a script opens one, given one TLS context for all its requests:
    gradio_client opens a new httpx client for every call, and httpx builds a TLS context for each (the
    CA bundle read and parsed) unless it is given one, though over plain HTTP on loopback none is used."""
    from gradio_client import Client

    return Client(url, verbose=False, ssl_verify=_tls_context())  # passed on as httpx's `verify`, which takes a context


@functools.cache
def _tls_context():
    import ssl

    return ssl.create_default_context()


def launched(service, mcp: bool = False):
    """The app over `service`, launched on loopback as `python app.py` launches it: (demo, url)."""
    demo = ui_app.create_app(service)
    port = free_port()
    ui_app.launch_app(demo, "127.0.0.1", port, prevent_thread_lock=True, quiet=True, mcp=mcp)
    return demo, f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module", autouse=True)
def client_scratch_in_this_module(tmp_path_factory):
    """gradio_client downloads each file an endpoint answers through a folder of its own under the
    system's temporary folder (`tempfile.gettempdir()`/<40 hex digits>) and leaves that folder behind,
    empty: while this module runs the system's temporary folder is one of the module's own, so those
    folders stay among pytest's temporary files instead of piling up in TMPDIR."""
    import tempfile

    before = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.mktemp("tmpdir"))
    yield
    tempfile.tempdir = before


@pytest.fixture(scope="module")
def world_api(service):
    demo, url = launched(service)
    try:
        yield api_client(url), url
    finally:
        demo.close()


@pytest.fixture(scope="module")
def cirr_api(tmp_path_factory):
    """The CIRR export served with `--runs A=... B=...` (the app's own command line), its `--eval` of both
    files, and a client: (client, service, benchmark, A path, B path, eval folder, root)."""
    from own_runs_support import cirr_world_with_runs, eval_both_runs

    from cir_demo.explorer import build_service
    from cir_demo.ui.startup import build_parser

    root = tmp_path_factory.mktemp("api_cirr")
    mp = pytest.MonkeyPatch()
    bench, pa, pb = cirr_world_with_runs(root, mp)
    out = root / "eval"
    eval_both_runs(root, pa, pb, out)
    args = build_parser().parse_args(
        [
            "--benchmark",
            "cirr",
            "--root",
            str(root / "cirr"),
            "--runs",
            f"A={pa}",
            f"B={pb}",
            "--reranker",
            "none",
            "--no-thumbnail-warmer",
        ]
    )
    svc = build_service(ui_app.config_from_args(args))
    demo, url = launched(svc)
    try:
        yield api_client(url), svc, bench, pa, pb, out, root
    finally:
        demo.close()
        svc.engine.close()
        mp.undo()


def png_of(image, path):
    image.convert("RGB").save(path, format="PNG")
    return str(path)


# =========================================================================== the API page
def test_view_api_lists_exactly_the_endpoints_with_described_parameters(world_api):
    client, _ = world_api
    info = client.view_api(return_format="dict", print_info=False)
    assert set(info["named_endpoints"]) == PUBLIC and not info["unnamed_endpoints"]
    for name, endpoint in info["named_endpoints"].items():
        assert endpoint["description"], name
        for p in endpoint["parameters"]:
            assert p["label"] == p["parameter_name"] and p["python_type"]["description"], (name, p["parameter_name"])
    search = {p["parameter_name"]: p for p in info["named_endpoints"]["/search"]["parameters"]}
    assert [n for n, p in search.items() if not p["parameter_has_default"]] == ["image", "instruction"]
    assert search["k"]["parameter_default"] == 10 and search["rerank"]["parameter_default"] is False


def test_the_endpoints_share_the_pages_queue_limit(service):
    """The API's calls wait in the same concurrency group as the page's (`--concurrency` bounds both)."""
    demo = ui_app.create_app(service)
    launch.share_one_limit(demo)
    public = [f for f in demo.fns.values() if f.api_visibility == "public"]
    assert sorted(f"/{f.api_name}" for f in public) == sorted(PUBLIC)
    assert all(f.concurrency_id == ui_app.WORK_GROUP and f.queue is not False for f in public)


def test_two_api_calls_are_worked_on_at_once(world_api, service, monkeypatch):
    """With `--concurrency 2` (the default), two clients' /query calls run at the same time, not one after
    the other: each waits at a two-party barrier inside the endpoint, which only opens when both are in it
    (one at a time, the first would time out and its call fail). Their answers are the service's own."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from cir_demo.explorer import api as answers

    _, url = world_api
    both_in = threading.Barrier(2, timeout=60)
    threads = set()
    original = answers.query_answer

    def meeting(*args, **kwargs):
        threads.add(threading.get_ident())
        both_in.wait()  # BrokenBarrierError after 60 s alone: the calls were serialised
        return original(*args, **kwargs)

    monkeypatch.setattr(answers, "query_answer", meeting)
    ids = [service.benchmark.queries[i].query_id for i in (3, 9)]
    clients = [api_client(url) for _ in ids]
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda c, q: c.predict(q, k=5, api_name="/query"), clients, ids))
    assert len(threads) == 2 and not both_in.broken
    for answer, qid in zip(got, ids):
        own = service.compare(qid, None, k=5)
        assert [[r["image_id"] for r in c["results"]] for c in answer["columns"]] == [
            [t.image_id for t in c.tiles] for c in own.columns
        ]


# =========================================================================== /search
def test_search_ranks_as_the_service_does_for_the_same_upload(world_api, service, tmp_path):
    client, _ = world_api
    from gradio_client import handle_file

    image_id = service.benchmark.corpus_ids[3]
    path = png_of(service.engine.open_image(image_id), tmp_path / "ref.png")  # a rendered world image
    names = service.retriever_names[:2]
    got = client.predict(handle_file(path), "the same item in red", retrievers=names, k=7, api_name="/search")
    want = service.search_uploads([validate_upload(path, name="ref.png")], "the same item in red", names, k=7)
    assert [c["retriever"] for c in got["columns"]] == names
    for col, own in zip(got["columns"], want.columns):
        assert col["error"] is None
        assert [r["image_id"] for r in col["results"]] == [t.image_id for t in own.tiles]
        assert [r["rank"] for r in col["results"]] == list(range(1, 8))
        assert [r["score"] for r in col["results"]] == pytest.approx([t.score for t in own.tiles], abs=1e-5)
        assert col["seconds"] >= 0 and "first_stage_rank" not in col["results"][0]
    assert str(tmp_path) not in json.dumps(got)
    # reranked: the first-stage rank and P(yes) of each item, as the service gives them
    got = client.predict(
        handle_file(path),
        "the same item in red",
        retrievers=names[:1],
        k=5,
        rerank=True,
        rerank_top_n=10,
        api_name="/search",
    )
    own = service.search_uploads(
        [validate_upload(path, name="ref.png")], "the same item in red", names[:1], k=5, rerank=True, top_n=10
    ).columns[0]
    col = got["columns"][0]
    assert got["reranker"] == service.reranker_name and got["rerank_top_n"] == 10
    assert [(r["image_id"], r["first_stage_rank"]) for r in col["results"]] == [
        (t.image_id, t.first_stage_rank) for t in own.tiles
    ]
    assert [r["p_yes"] for r in col["results"]] == pytest.approx([t.p_yes for t in own.tiles], abs=1e-6)


def test_bad_choices_are_one_line_naming_the_valid_values_and_the_app_keeps_serving(world_api, service, tmp_path):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    client, _ = world_api
    path = png_of(service.engine.open_image(service.benchmark.corpus_ids[0]), tmp_path / "a.png")
    with pytest.raises(AppError) as info:
        client.predict(handle_file(path), "in red", retrievers=["world-cir-nope"], api_name="/search")
    message = str(info.value)
    assert "unknown retriever(s) world-cir-nope" in message and all(n in message for n in service.retriever_names)
    with pytest.raises(AppError, match="results per column must be an integer from 1 to 50"):
        client.predict(handle_file(path), "in red", k=0, api_name="/search")
    not_image = tmp_path / "notes.png"
    not_image.write_text("not an image")
    with pytest.raises(AppError) as info:
        client.predict(handle_file(str(not_image)), "in red", api_name="/search")
    assert "image (notes.png)" in str(info.value) and str(tmp_path) not in str(info.value)
    with pytest.raises(AppError, match="unknown sort 'nope'; this benchmark offers: benchmark, worst"):
        client.predict("nope", api_name="/failures")
    with pytest.raises(AppError, match="has no query 'nope'"):
        client.predict("nope", api_name="/query")
    assert client.predict(service.benchmark.queries[0].query_id, api_name="/query")["columns"]


# =========================================================================== /query, /image
def test_query_gives_each_items_judgment_the_column_metrics_and_the_paraphrases(world_api, service):
    client, _ = world_api
    q = next(q for q in service.benchmark.queries if q.negatives)
    got = client.predict(q.query_id, k=50, api_name="/query")
    assert got["query"]["query_id"] == q.query_id and got["query"]["instruction"] == q.instruction
    assert [p["query_id"] for p in got["paraphrases"]] == [
        p.query_id for p in service.benchmark.paraphrases(q.query_id)
    ]
    assert [c["retriever"] for c in got["columns"]] == service.retriever_names[:4]
    own = {c.retriever: c for c in service.compare(q.query_id, None, k=50).columns}
    for col in got["columns"]:
        for r in col["results"]:  # the benchmark's own judgments
            want = "positive" if r["image_id"] in q.positives else "negative" if r["image_id"] in q.negatives else None
            assert r["judgment"] == want
        assert col["metrics"] == pytest.approx(own[col["retriever"]].metrics)
        assert set(col["metrics"]) == set(service.family.shown)


def test_the_readmes_api_snippet_runs_as_written(world_api, service, capsys):
    """README's "Use via API" block against the launched app (its address the only change): the query it
    names exists, its reference comes back as a local PNG, and that file searched gives the first column's
    ids, the service's own search of the same image."""
    import re
    from pathlib import Path

    _, url = world_api
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use via API", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    assert "http://127.0.0.1:7860/" in code
    scope: dict = {}
    exec(compile(code.replace("http://127.0.0.1:7860/", url), "README.md", "exec"), scope)
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    reference = Path(scope["reference"])
    assert reference.is_file() and Image.open(reference).format == "PNG"
    q = service.benchmark.query(scope["view"]["query"]["query_id"])
    upload = validate_upload(str(reference))
    own = service.search_uploads([upload], "the same object in red", None, k=10).columns[0]
    assert (
        printed == str([t.image_id for t in own.tiles])
        and q.reference_ids[0] == scope["view"]["query"]["reference_ids"][0]
    )


@pytest.mark.parametrize("sort", ["rerank_helped", "rerank_hurt"])
def test_reranker_failures_agree_with_the_reranked_query_view(world_api, service, sort):
    """/failures reranks every query in one batch; /query reranks one: a row's numbers are that query's
    columns (reranked and first stage), and every row kept moved the way the sort says."""
    client, _ = world_api
    run = service.retriever_names[0]
    primary = service.family.primary
    got = client.predict(sort, [run], None, api_name="/failures")
    assert got["runs"] == [run, f"{run}+rerank"] and got["rows"], got["total"]
    for row in got["rows"]:
        delta = row[f"{run}+rerank/{primary}"] - row[f"{run}/{primary}"]
        assert delta > 0 if sort == "rerank_helped" else delta < 0, row
    row = got["rows"][0]
    view = client.predict(
        row["query_id"], [run], rerank=True, rerank_top_n=service.config.default_top_n, api_name="/query"
    )["columns"][0]
    # the rows are per_query.csv's (6 places)
    assert view["metrics"][primary] == pytest.approx(row[f"{run}+rerank/{primary}"], abs=1e-6)
    assert view["first_stage_metrics"][primary] == pytest.approx(row[f"{run}/{primary}"], abs=1e-6)


def test_every_sort_the_world_page_offers_is_failures_order(world_api, service):
    """shortcut (an image-only column beside composed ones) and the reranker sorts included: /failures
    lists the page's queries in the page's order."""
    client, _ = world_api
    offered = service.offered_sorts()
    assert {"shortcut", "rerank_helped", "rerank_hurt"} <= set(offered), offered
    for sort in offered:
        got = client.predict(sort, None, None, api_name="/failures")
        page = service.sorted_queries(sort, limit=10**6)
        assert [r["query_id"] for r in got["rows"]] == list(page.rows["query"]), sort
        assert [r["why"] for r in got["rows"]] == list(page.rows["why"]), sort


def test_image_is_the_benchmark_image(world_api, service):
    from gradio_client.exceptions import AppError

    client, _ = world_api
    image_id = service.benchmark.corpus_ids[5]
    got = client.predict(image_id, api_name="/image")
    assert np.array_equal(
        np.asarray(Image.open(got).convert("RGB")), np.asarray(service.engine.open_image(image_id).convert("RGB"))
    )
    with pytest.raises(AppError, match="'nope' is not an image of"):
        client.predict("nope", api_name="/image")


# =========================================================================== the CIRR export with --runs
def test_query_metrics_are_evals_per_query_rows(cirr_api):
    client, _, bench, _, _, out, _ = cirr_api
    info = client.view_api(return_format="dict", print_info=False)
    assert set(info["named_endpoints"]) == PUBLIC and not info["unnamed_endpoints"]
    rows = pd.read_csv(out / "per_query.csv", dtype={"query_id": str}).set_index(["run", "query_id"])
    for q in bench.queries[:6]:
        got = client.predict(q.query_id, ["A", "B"], api_name="/query")
        for col in got["columns"]:
            assert col["error"] is None
            for metric, value in col["metrics"].items():
                assert value == pytest.approx(rows.loc[(col["retriever"], q.query_id), metric]), (q.query_id, metric)
            for r in col["results"]:
                assert r["judgment"] == ("positive" if r["image_id"] in q.positives else None)


@pytest.mark.parametrize("sort", ["worst", "diff:A,B", "reference_first", "benchmark"])
def test_failures_are_the_failures_commands_rows(cirr_api, sort, tmp_path):
    from cir_demo.cli import main as cli

    client, _, _, pa, pb, _, root = cirr_api
    csv = tmp_path / "failures.csv"
    assert (
        cli(
            [
                "failures",
                "--benchmark",
                "cirr",
                "--root",
                str(root / "cirr"),
                "--results-json",
                str(pa),
                str(pb),
                "--sort",
                sort,
                "--top",
                "40",
                "--out",
                str(csv),
            ]
        )
        == 0
    )
    want = pd.read_csv(csv, dtype={"query_id": str}, keep_default_na=False)
    got = client.predict(sort, ["A", "B"], 40, "all", api_name="/failures")
    assert got["columns"] == list(want.columns)
    frame = pd.DataFrame(got["rows"], columns=got["columns"])
    assert list(frame["query_id"]) == list(want["query_id"]) and list(frame["why"]) == list(want["why"])
    for c in want.columns[2:]:
        theirs = pd.to_numeric(want[c].replace("", np.nan))
        ours = pd.to_numeric(frame[c].replace("", np.nan))
        assert np.allclose(ours.to_numpy(float), theirs.to_numpy(float), equal_nan=True), c


def test_evaluate_scores_an_upload_as_eval_and_a_bad_file_is_one_line(cirr_api, tmp_path):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    client, _, bench, pa, _, out, _ = cirr_api
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(AppError) as info:
        client.predict(handle_file(str(broken)), api_name="/evaluate")
    message = str(info.value)
    assert "broken.json: line 1: fits none of the results formats" in message
    assert "\n" not in message and "/tmp" not in message and str(tmp_path) not in message
    assert client.predict(bench.queries[0].query_id, ["A"], api_name="/query")["columns"][0]["results"]  # serving
    got = client.predict(handle_file(str(pa)), api_name="/evaluate")
    assert got["run"].startswith("A-") and got["n_boot"] == 1000
    metrics = pd.read_csv(out / "metrics.csv").set_index("model")
    (row,) = got["metrics"]
    for agg in ("Recall@1", "Recall@5", "Recall@50", "Recall_subset@1"):
        assert row[agg] == pytest.approx(metrics.loc["A", agg], abs=1e-4)
    pairs = {(p["a"], p["b"], p["metric"]): p for p in got["paired"]}
    same = pairs[("A", got["run"], "Recall@1")]  # the same rankings as A: no difference, whatever the draw
    assert same["diff"] == 0 and same["lo"] == 0 and same["hi"] == 0
    b_vs = pairs[("B", got["run"], "Recall@1")]
    paired = pd.read_csv(out / "paired.csv")
    want = paired[(paired["metric"] == "Recall@1")].iloc[0]  # B - A in --eval's file, here A' - B
    assert abs(b_vs["diff"]) == pytest.approx(abs(want["diff"]), abs=1e-6)
    # the p-value as paired.csv and the page write it ("< 0.001" below 1/n_boot), two-sided: the same either way
    paired_text = pd.read_csv(out / "paired.csv", dtype={"p_value": str})  # --eval's, with its own n_boot
    assert paired_text[paired_text["metric"] == "Recall@1"].iloc[0]["p_value"].startswith("< ")
    assert b_vs["p_value"] == "< 0.001"  # below 1/1000 too: the bound, not 0.0
    assert all(isinstance(p["p_value"], str) for p in got["paired"])
    assert "/tmp" not in json.dumps(got)


def test_every_sort_the_page_offers_is_failures_order_and_the_failures_commands(cirr_api, tmp_path):
    """Each sort of the page's menu (every A-vs-B metric too): /failures lists the page's queries in the
    page's order, and the rows `failures --sort` writes for the same files."""
    from cir_demo.cli import main as cli

    client, svc, _, pa, pb, _, root = cirr_api
    offered = svc.offered_sorts()
    assert len(offered) > 6 and any(s.count(":") > 1 for s in offered), offered
    for sort in offered:
        got = client.predict(sort, ["A", "B"], None, api_name="/failures")
        page = svc.sorted_queries(sort, limit=10**6)
        assert [r["query_id"] for r in got["rows"]] == list(page.rows["query"]), sort
        assert [r["why"] for r in got["rows"]] == list(page.rows["why"]), sort
        csv = tmp_path / f"failures-{offered.index(sort)}.csv"  # a new file each: nothing set aside
        argv = ["failures", "--benchmark", "cirr", "--root", str(root / "cirr"), "--results-json", str(pa), str(pb)]
        assert cli([*argv, "--sort", sort, "--out", str(csv)]) == 0, sort
        want = pd.read_csv(csv, dtype={"query_id": str}, keep_default_na=False)
        assert [r["query_id"] for r in got["rows"]] == list(want["query_id"]), sort


def test_failures_answers_the_key_columns_in_a_few_thousand_characters_from_the_pages_rows(cirr_api):
    """The default answer: each run's primary metric and its tie-breaking measure, 20 rows; read from the
    per-query rows the page sorts by (never the rankings recomputed)."""
    from cir_demo.explorer import api as answers

    client, svc, _, _, _, out, _ = cirr_api
    got = client.predict("worst", api_name="/failures")
    assert got["columns"] == ["query_id", "why", "A/Recall@1", "A/target_rank", "B/Recall@1", "B/target_rank"]
    assert len(got["rows"]) == 20 and got["total"] > 20 and len(json.dumps(got)) < 5000, len(json.dumps(got))
    rows = pd.read_csv(out / "per_query.csv", dtype={"query_id": str}).set_index(["run", "query_id"])
    for row in got["rows"]:
        for run in ("A", "B"):
            assert row[f"{run}/Recall@1"] == pytest.approx(rows.loc[(run, row["query_id"]), "Recall@1"])
            rank = rows.loc[(run, row["query_id"]), "target_rank"]
            assert row[f"{run}/target_rank"] == (None if rank != rank else int(rank))

    def no_rankings(name, progress=None):
        raise AssertionError(f"{name}'s rankings recomputed")

    svc.failure_stats()  # the page's rows, as the Explore list has them
    with pytest.MonkeyPatch.context() as m:
        m.setattr(svc.store, "ranking", no_rankings)
        got = answers.failures_answer(svc, answers.RunRankings(svc), "diff:A,B:Recall@5", None, 5)
        every = answers.failures_answer(svc, answers.RunRankings(svc), "worst", None, 3, columns="all")
    assert len(every["columns"]) > len(got["columns"]) and len(every["rows"]) == 3
    assert got["columns"][2:] == [
        "A/Recall@1",
        "A/target_rank",
        "A/Recall@5",
        "B/Recall@1",
        "B/target_rank",
        "B/Recall@5",
    ]
    with pytest.raises(Exception, match="columns must be one of key, all"):
        client.predict("worst", columns="every", api_name="/failures")


def test_a_runs_apps_first_failures_scores_the_files_once_and_a_restart_reads_them(cirr_api, tmp_path, monkeypatch):
    """An app started with `--runs` on an empty data folder: its first /failures scores the two files (their
    rankings read, no search) in seconds of CPU; the same app started again reads those rows from the store's
    cache (nothing produced or scored again) and answers the same rows."""
    import time

    from cir_demo.explorer import api as answers
    from cir_demo.explorer import build_service
    from cir_demo.store import store as store_module
    from cir_demo.ui.startup import build_parser

    _, _, _, pa, pb, _, root = cirr_api
    argv = ["--benchmark", "cirr", "--root", str(root / "cirr"), "--runs", f"A={pa}", f"B={pb}", "--reranker", "none"]
    args = build_parser().parse_args([*argv, "--no-thumbnail-warmer"])
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))  # an empty data folder's cache
    monkeypatch.setenv(
        "CIR_DEMO_RUNS", str(tmp_path / "runs")
    )  # and runs (the fixture's --eval of the files is not found)

    def first_failures(svc):
        try:
            started = time.process_time()
            got = answers.failures_answer(svc, answers.RunRankings(svc), "worst", None, None)
            return got, time.process_time() - started, svc.failure_source  # CPU time: the load does not count
        finally:
            svc.engine.close()

    first, seconds, source = first_failures(build_service(ui_app.config_from_args(args)))
    assert source == "A computed here; B computed here" and seconds < 5, (source, seconds)

    def produced(*a, **k):
        raise AssertionError("a run produced or scored again")

    monkeypatch.setattr(store_module, "produce_run", produced)
    monkeypatch.setattr(store_module, "rows_of", produced)
    again, _, source = first_failures(build_service(ui_app.config_from_args(args)))
    assert source == "cache" and again == first and first["total"] == len(cirr_api[2].queries)


def test_two_clients_uploads_are_their_own(cirr_api, tmp_path, monkeypatch):
    """A results file one client sends to /evaluate is a run of its session only: another client cannot
    name it, is not told its name and, uploading more than it may keep, evicts only its own."""
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    first, svc, bench, pa, pb, _, _ = cirr_api
    second = api_client(first.src)
    monkeypatch.setattr(svc.columns, "max_uploaded_runs", 2)
    mine = first.predict(handle_file(str(pa)), "mine", api_name="/evaluate")["run"]
    query = bench.queries[0].query_id
    assert first.predict(query, [mine], api_name="/query")["columns"][0]["retriever"] == mine
    with pytest.raises(AppError) as info:
        second.predict(query, [mine], api_name="/query")
    assert "unknown retriever(s)" in str(info.value)
    with pytest.raises(AppError) as info:
        second.predict("worst", ["nope"], api_name="/failures")
    assert "unknown run(s) nope" in str(info.value) and mine not in str(info.value)
    theirs = []
    for i in range(3):  # three files on a limit of two: the second client's first is dropped, not the first's
        copy = tmp_path / f"theirs{i}.json"
        copy.write_bytes(pb.read_bytes())
        theirs.append(second.predict(handle_file(str(copy)), api_name="/evaluate")["run"])
    assert first.predict("worst", ["A", mine], 3, api_name="/failures")["runs"] == ["A", mine]
    with pytest.raises(AppError, match="unknown run"):
        second.predict("worst", [theirs[0]], api_name="/failures")
    assert second.predict("worst", theirs[1:], 3, api_name="/failures")["runs"] == theirs[1:]
    with pytest.raises(AppError, match="unknown run"):
        first.predict("worst", [theirs[2]], api_name="/failures")


@pytest.mark.parametrize("endpoint", ["/query", "/failures"])
def test_an_error_quotes_at_most_a_hundred_characters_of_an_input(cirr_api, endpoint):
    from gradio_client.exceptions import AppError

    client = cirr_api[0]
    huge = "q" * 1_000_000
    with pytest.raises(AppError) as info:
        client.predict(huge, api_name=endpoint)
    message = str(info.value)
    assert "q" * 100 in message and "q" * 101 not in message and len(message) < 1000, len(message)


# =========================================================================== MCP
def test_mcp_asked_without_its_dependency_is_one_line_before_any_work(monkeypatch, capsys):
    from importlib import metadata

    from cir_demo.ui import startup

    def version(name):
        if name == "mcp":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    real = metadata.version
    monkeypatch.setattr(metadata, "version", version)
    assert startup.prepare(["--mcp", "--world-size", "tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --mcp (or GRADIO_MCP_SERVER=True): gradio's MCP server needs the optional package mcp, "
        'which is not installed: pip install "gradio[mcp]"'
    ]


def test_every_mcp_tool_answers_json_and_takes_a_file_as_a_path_or_base64(service, tmp_path):
    """An MCP client (the `mcp` package's, on loopback) reads JSON from every tool, as text and as structured
    content; an image goes in as a file path or as plain base64, a results file as a path; an error quotes
    at most 100 characters of an input."""
    from cir_demo.ui.startup import mcp_problem

    if mcp_problem():
        pytest.skip(mcp_problem())
    from mcp import ClientSession
    from mcp.client import streamable_http

    # the transport's name in the mcp releases gradio supports (1.x) and after
    connect = getattr(streamable_http, "streamable_http_client", None) or streamable_http.streamablehttp_client

    bench = service.benchmark
    demo, url = launched(service, mcp=True)
    path = png_of(service.engine.open_image(bench.corpus_ids[2]), tmp_path / "ref.png")
    encoded = base64.b64encode((tmp_path / "ref.png").read_bytes()).decode()
    run, _ = service.engine.run_benchmark(service.retriever_names[0], k=20)
    results = tmp_path / "mine.json"
    results.write_text(
        json.dumps({bench.results_key(q): {i: 1.0 / (r + 1) for r, i in enumerate(ids)} for q, ids in run.items()})
    )
    query_id = bench.queries[0].query_id
    calls = {
        "search": {
            "image": path,
            "image2": encoded,
            "instruction": "<img1> in red",
            "k": 5,
            "retrievers": service.retriever_names[:1],
        },
        "query": {"query_id": query_id, "k": 5},
        "failures": {"sort": "worst", "top": 3},
        "evaluate": {"results_file": str(results)},
        "image": {"image_id": bench.corpus_ids[1]},
    }

    async def session():
        async with connect(f"{url}gradio_api/mcp/") as streams:
            async with ClientSession(streams[0], streams[1]) as s:
                await s.initialize()
                tools = {t.name: t for t in (await s.list_tools()).tools}
                answers = {name: await s.call_tool(name, arguments) for name, arguments in calls.items()}
                answers["bad"] = await s.call_tool("query", {"query_id": "q" * 1_000_000})
                answers["not a file"] = await s.call_tool("search", {"image": "x" * 1_000_000, "instruction": "in red"})
                return tools, answers

    try:
        tools, answers = asyncio.run(session())
    finally:
        demo.close()
    assert set(tools) == set(calls) and tools["search"].description
    assert "base64" in tools["search"].inputSchema["properties"]["image"]["format"]
    for name in calls:
        result = answers[name]
        assert not result.isError, (name, result.content[0].text[:300])
        text = next(c.text for c in result.content if c.type == "text")
        assert json.loads(text) == result.structuredContent, name
    ranking = answers["search"].structuredContent["columns"][0]["results"]
    assert [r["rank"] for r in ranking] == [1, 2, 3, 4, 5] and all(r["image_id"] in bench.corpus_set for r in ranking)
    assert answers["query"].structuredContent["query"]["query_id"] == query_id
    assert len(answers["failures"].structuredContent["rows"]) == 3
    assert answers["evaluate"].structuredContent["run"].startswith("mine-")
    assert [c.type for c in answers["image"].content] == ["image", "text"]
    for bad in ("bad", "not a file"):
        text = answers[bad].content[0].text
        assert answers[bad].isError and len(text) < 1000, (bad, len(text))


# =========================================================================== the load bench
def test_load_bench_drives_the_endpoints_and_the_page_without_an_error(world_api, tmp_path):
    """bench/bench_load.py, briefly, against the launched app (visitors and one gradio_client script): it takes
    every input from the app's own API description and answers, so a change to an endpoint or the page load
    fails here, not in a bench run. The files its clients upload are gone when it ends (its own temporary
    folder: nothing of the bench's is left in TMPDIR)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    _, url = world_api
    out = tmp_path / "load.json"
    repo = Path(__file__).resolve().parent.parent
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "bench/bench_load.py",
            "--url",
            url,
            "--visitors",
            "3",
            "--page-visitors",
            "1",
            "--duration",
            "3",
            "--min-rounds",
            "1",
            "--burst",
            "0",
            "--api-clients",
            "1",
            "--out",
            str(out),
        ],
        cwd=repo,
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not list(scratch.glob("bench_load*")), sorted(p.name for p in scratch.iterdir())
    load = json.loads(out.read_text())["load"]
    assert load["errors"] == 0, load["error_examples"]
    actions = {"query", "query (other phrasing)", "query reranked", "search", "failures", "image", "page load"}
    actions |= {"api /query", "api /search", "api /failures", "api /evaluate"}  # the gradio_client script
    assert actions <= {name for name, stats in load["per_action"].items() if stats["n"] >= 1}, load["per_action"]
