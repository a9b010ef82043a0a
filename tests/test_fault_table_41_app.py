"""Issue 41's cases about the app and results files (the folder cases: tests/test_fault_table_41.py).

| case | fault | test |
|---|---|---|
| 6 | the Report's upload refused `results (1).json` ("key 'name'") | test_an_upload_named_by_a_browser_* |
| 9 | `--runs x=/etc/passwd` showed the file's first line to every visitor | test_a_refused_runs_file_* |
| 10 | `--port 0`: a traceback; `GRADIO_SERVER_PORT=abc` with `--port`: a crash at gradio's import | test_port_* |
| 11 | every --runs file left out: "train them"; `--runs world-cir=FILE` refused after the page started | test_runs_* |
| 12 | a failed load: a 20-line gradio traceback in the log on every page view | test_a_failed_load_* |
| 13 | a deeply nested JSON results file: RecursionError / tracebacks | test_deeply_nested_* |
| 15 | a results file with a UTF-8 byte order mark was refused | test_a_results_file_with_a_bom_* |

Case 14 (`failures`' doubled `error:` prefix) is fixed and tested with the failures command (issue 38).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import types
from pathlib import Path

import pytest

from cir_demo.harness import cli as eval_cli


@pytest.fixture()
def dirs(tmp_path, monkeypatch):
    for var, sub in (("CIR_DEMO_RUNS", "runs"), ("CIR_DEMO_INDEXES", "indexes")):  # the session's cache: its world
        monkeypatch.setenv(var, str(tmp_path / sub))
    return tmp_path


@pytest.fixture(scope="module")
def bench():
    from cir_demo.world import load_world

    return load_world(size="tiny", progress=False)


def _run_dict(bench, path: Path, encoding: str = "utf-8") -> Path:
    ids = sorted(bench.corpus_set)
    run = {bench.results_key(q.query_id): {i: 1.0 / (r + 1) for r, i in enumerate(ids[:10])} for q in bench.queries}
    path.write_text(json.dumps(run), encoding=encoding)
    return path


def _eval(argv: list[str], capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    rc = eval_cli.run(p.parse_args(argv))
    return rc, capsys.readouterr().err.strip().splitlines()


# --------------------------------------------------------------------------- case 6
def test_an_upload_named_by_a_browser_becomes_a_usable_column(dirs, bench):
    from cir_demo.explorer.own_runs import column_stem
    from cir_demo.explorer.served_columns import ServedColumns
    from cir_demo.retrievers import registry

    assert column_stem("results (1)") == "results_1"
    assert column_stem("  ") == "run" and column_stem("été.v2") == "t_.v2"
    path = _run_dict(bench, dirs / "results (1).json")
    added = []
    service = ServedColumns(bench, types.SimpleNamespace(add_retriever=added.append, drop_retriever=None), [])
    column, _ = service.add_file_run(path, Path(path).stem)
    assert column.startswith("results_1-") and registry.get_config(column)["family"] == "precomputed"
    assert len(added) == 1 and service.uploaded == {column: "results (1).json"}


# --------------------------------------------------------------------------- case 9
def test_a_refused_runs_file_shows_visitors_none_of_its_content(dirs, bench):
    from cir_demo.explorer import ServiceError
    from cir_demo.explorer.own_runs import load_run
    from cir_demo.results import read_results

    secret = dirs / "passwd"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\nalice:secret-hash:1000\n")
    with pytest.raises(ServiceError) as page:
        load_run(bench, secret, "x")
    assert "root:x" not in str(page.value) and "passwd: line 1: fits none of the results formats" in str(page.value)
    with pytest.raises(Exception) as terminal:  # the operator's own terminal may show it
        read_results(secret, bench)
    assert "root:x:0:0" in str(terminal.value)


# --------------------------------------------------------------------------- case 10
def test_port_0_takes_a_free_port_before_gradio_is_imported(dirs, monkeypatch):
    from cir_demo.benchmarks import generate_aside
    from cir_demo.preflight.commands import app_flag_problems
    from cir_demo.preflight.flags import GivenFlags
    from cir_demo.ui.startup import build_parser, prepare

    monkeypatch.setattr(generate_aside, "generate_aside", lambda *a, **k: None)
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    assert app_flag_problems(GivenFlags.of(vars(build_parser().parse_args(["--port", "0"])))) == []
    startup = prepare(["--port", "0"])
    port = startup.settings.port
    assert 0 < port <= 65535 and os.environ["GRADIO_SERVER_PORT"] == str(port)
    with socket.socket() as s:  # free: the server can bind it
        s.bind(("127.0.0.1", port))


def test_port_flag_overrides_an_unusable_port_variable_before_gradio_reads_it(dirs, monkeypatch, capsys):
    from cir_demo.benchmarks import generate_aside
    from cir_demo.ui.startup import prepare

    monkeypatch.setattr(generate_aside, "generate_aside", lambda *a, **k: None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    monkeypatch.setenv("GRADIO_SERVER_PORT", "abc")
    startup = prepare(["--port", str(free)])
    assert not isinstance(startup, int), capsys.readouterr().err
    assert int(os.environ["GRADIO_SERVER_PORT"]) == free  # what gradio's import parses


# --------------------------------------------------------------------------- case 11
def test_runs_named_like_a_model_are_refused_before_the_page_starts(dirs, bench, monkeypatch, capsys):
    from cir_demo.benchmarks import generate_aside
    from cir_demo.ui.startup import prepare

    monkeypatch.setattr(generate_aside, "generate_aside", lambda *a, **k: None)
    path = _run_dict(bench, dirs / "mine.json")
    assert prepare(["--runs", f"world-cir={path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --runs world-cir: that name is a registered retriever's; name the run with NAME=PATH"]


def test_runs_all_left_out_say_so_not_train_the_models(dirs, bench):
    from cir_demo.explorer import ServiceConfig
    from cir_demo.explorer.loader import build_service

    bad = dirs / "bad.json"
    bad.write_text("[1, 2]")
    config = ServiceConfig(
        benchmark="world",
        benchmark_kwargs={"size": "tiny"},
        runs=(("bad", str(bad)),),
        reranker="none",
        warm_thumbnails=False,
        device="cpu",
    )
    service = build_service(config)
    try:
        notes = " ".join(service.warnings)
        assert "run bad is left out" in notes and "none of the --runs files could be used" in notes
        assert "train them" not in notes
    finally:
        service.engine.close()


# --------------------------------------------------------------------------- case 13
def test_deeply_nested_results_are_one_line_naming_the_file(dirs, bench, capsys):
    from cir_demo.cli import main

    deep = dirs / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    rc, err = _eval(["--world-size", "tiny", "--results-json", str(deep), "--out", str(dirs / "out")], capsys)
    assert rc == 2 and err == [
        f"error: {deep}: nested too deeply (arrays or objects inside each other thousands "
        "of levels down) to be a results file"
    ], err
    deep_object = dirs / "deep_object.json"
    deep_object.write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    for command in (["submission"], ["rerank", "--backend", "world-verifier"]):
        capsys.readouterr()
        rc = main(
            [
                *command,
                "--benchmark",
                "world",
                "--world-size",
                "tiny",
                "--results-json",
                str(deep_object),
                "--out",
                str(dirs / "out.json"),
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and "deep_object.json: nested too deeply" in err[0], (command, err)


# --------------------------------------------------------------------------- case 15
def test_a_results_file_with_a_bom_is_scored_as_without(dirs, bench, capsys):
    plain = _run_dict(bench, dirs / "plain.json")
    bom = _run_dict(bench, dirs / "bom.json", encoding="utf-8-sig")
    assert bom.read_bytes()[:3] == b"\xef\xbb\xbf"
    for path in (plain, bom):
        rc, err = _eval(
            [
                "--world-size",
                "tiny",
                "--results-json",
                str(path),
                "--n-boot",
                "0",
                "--no-plots",
                "--out",
                str(dirs / path.stem),
            ],
            capsys,
        )
        assert rc == 0, err
    assert (dirs / "bom" / "metrics.csv").read_text().replace("bom", "plain") == (
        dirs / "plain" / "metrics.csv"
    ).read_text()


# --------------------------------------------------------------------------- case 12
def test_a_failed_load_is_one_log_line_per_page_view_and_a_valid_update(dirs, caplog):
    """Each page view's second step (`on_ready`) returned `{}`, which gradio rejects with a 20-line
    traceback in the log; gradio's own output processing is the oracle here."""
    import asyncio
    import logging

    from gradio.state_holder import SessionState

    from cir_demo.explorer import ServiceConfig
    from cir_demo.explorer.loader import ServiceLoader
    from cir_demo.ui import app as ui_app

    loader = ServiceLoader(
        ServiceConfig(
            benchmark="world",
            benchmark_kwargs={"size": "tiny"},
            retrievers=("no-such-retriever",),
            reranker="none",
            warm_thumbnails=False,
            device="cpu",
        )
    )
    assert loader._event.wait(120) and loader.status().error
    demo = ui_app.create_app(loader)
    [on_ready] = [f for f in demo.fns.values() if f.name == "on_ready"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cir_demo.ui"):
        for _ in range(2):  # two page views
            update = on_ready.fn(None)
            asyncio.run(demo.postprocess_data(on_ready, update, SessionState(demo)))  # raises on a bad update
    lines = [r for r in caplog.records if r.name == "cir_demo.ui"]
    assert len(lines) == 2 and all(
        "page view: the explorer is not loaded (UnknownNameError" in r.getMessage() for r in lines
    ), [r.getMessage() for r in lines]
