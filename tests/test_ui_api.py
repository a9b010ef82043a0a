"""The Space's API through `gradio_client` against a launched app (loopback only): the tiny world with the
tiny models and verifier, and the tiny world exported to CIRR served with two results files as `--runs`.
Oracles: the explorer service called directly, the benchmark's own judgments, `--eval`'s per_query.csv and
metrics.csv, and `python -m cir_demo failures` on the same files."""

from __future__ import annotations

import ast
import asyncio
import base64
import io
import json
import socket

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from cir_demo.explorer import validate_upload
from cir_demo.ui import app as ui_app

PUBLIC = {"/search", "/query", "/failures", "/evaluate", "/image"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launched(service, mcp: bool = False):
    """The app over `service`, launched on loopback as `python app.py` launches it: (demo, url)."""
    demo = ui_app.create_app(service)
    port = free_port()
    ui_app.launch_app(demo, "127.0.0.1", port, prevent_thread_lock=True, quiet=True, mcp=mcp)
    return demo, f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def world_api(service):
    from gradio_client import Client

    demo, url = launched(service)
    try:
        yield Client(url, verbose=False), url
    finally:
        demo.close()


@pytest.fixture(scope="module")
def cirr_api(tmp_path_factory):
    """The CIRR export served with `--runs A=... B=...` (the app's own command line), its `--eval` of both
    files, and a client: (client, service, benchmark, A path, B path, eval folder, root)."""
    from gradio_client import Client

    from cir_demo.explorer import build_service
    from cir_demo.ui.startup import build_parser
    from own_runs_support import cirr_world_with_runs, eval_both_runs

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
        yield Client(url, verbose=False), svc, bench, pa, pb, out, root
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
    ui_app.share_one_limit(demo)
    public = [f for f in demo.fns.values() if f.api_visibility == "public"]
    assert sorted(f"/{f.api_name}" for f in public) == sorted(PUBLIC)
    assert all(f.concurrency_id == ui_app.WORK_GROUP and f.queue is not False for f in public)


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
    got = client.predict(sort, ["A", "B"], 40, api_name="/failures")
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
    assert "/tmp" not in json.dumps(got)


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


def test_mcp_lists_the_tools_and_a_search_returns_a_ranking(service):
    from cir_demo.ui.startup import mcp_problem

    if mcp_problem():
        pytest.skip(mcp_problem())
    from mcp import ClientSession
    from mcp.client import streamable_http

    # the transport's name in the mcp releases gradio supports (1.x) and after
    connect = getattr(streamable_http, "streamable_http_client", None) or streamable_http.streamablehttp_client

    demo, url = launched(service, mcp=True)
    buffer = io.BytesIO()
    service.engine.open_image(service.benchmark.corpus_ids[2]).convert("RGB").save(buffer, format="PNG")
    image = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()

    async def session():
        async with connect(f"{url}gradio_api/mcp/") as streams:
            async with ClientSession(streams[0], streams[1]) as s:
                await s.initialize()
                tools = {t.name: t for t in (await s.list_tools()).tools}
                result = await s.call_tool(
                    "search",
                    {"image": image, "instruction": "in red", "k": 5, "retrievers": service.retriever_names[:1]},
                )
                return tools, result

    try:
        tools, result = asyncio.run(session())
    finally:
        demo.close()
    assert set(tools) == {n.lstrip("/") for n in PUBLIC}
    assert "retrievers" in tools["search"].inputSchema["properties"] and tools["search"].description
    assert not result.isError, result
    answer = ast.literal_eval(result.content[0].text)  # gradio's MCP server sends the dict as Python text
    ranking = answer["columns"][0]["results"]
    assert [r["rank"] for r in ranking] == [1, 2, 3, 4, 5]
    assert all(r["image_id"] in set(service.benchmark.corpus_ids) for r in ranking)


# =========================================================================== the load bench
def test_load_bench_drives_the_endpoints_and_the_page_without_an_error(world_api, tmp_path):
    """bench/bench_load.py, briefly, against the launched app: it takes every input from the app's own API
    description and answers, so a change to an endpoint or the page load fails here, not in a bench run."""
    import subprocess
    import sys
    from pathlib import Path

    _, url = world_api
    out = tmp_path / "load.json"
    repo = Path(__file__).resolve().parent.parent
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
            "--out",
            str(out),
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    load = json.loads(out.read_text())["load"]
    assert load["errors"] == 0, load["error_examples"]
    actions = {"query", "query (other phrasing)", "query reranked", "search", "failures", "image", "page load"}
    assert actions <= {name for name, stats in load["per_action"].items() if stats["n"] >= 1}, load["per_action"]
