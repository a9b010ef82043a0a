"""The fault table of issue 27 (a careless or hostile user's inputs), one test per row that failed,
plus the data-loss case: each gives one line, the documented exit status, no traceback, and
removes nothing the project did not write.

| row | fault | test |
|---|---|---|
| 1 | `--eval --out DIR` with an old run beside unrelated files replaced the folder | test_out_with_a_run_and_unrelated_files_* |
| 2 | `python app.py --port 99999`: traceback from the server | test_app_flags_*, test_app_port_out_of_range_in_a_process |
| 3 | `--concurrency 0`: every view waits forever | test_app_flags_* |
| 4 | `--queue-size -1`: every request gets 503 | test_app_flags_* |
| 5 | `--eval --benchmark cir`: the wrong line, exit 1 with --retrievers | test_eval_unknown_benchmark_* |
| 6 | NaN/Infinity in a run dict: "fits none of the formats" | test_non_finite_scores_* |
| 7 | results-file errors print `error: error:` and exit 1 | test_non_finite_scores_* |
| 8 | missing weights: a traceback in the app's log | test_app_log_and_status_line_* |
| 9 | the status line names server paths | test_app_log_and_status_line_* |
"""

from __future__ import annotations

import argparse
import io
import logging
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cir_demo.harness import cli as eval_cli

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def dirs(tmp_path, monkeypatch):
    for var, sub in (("CIR_DEMO_CACHE", "cache"), ("CIR_DEMO_RUNS", "runs"), ("CIR_DEMO_INDEXES", "indexes")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    return tmp_path


def _eval(argv: list[str], capsys) -> tuple[int, list[str]]:
    capsys.readouterr()  # what came before (a world generated on first use prints its statistics)
    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    rc = eval_cli.run(p.parse_args(argv))
    return rc, capsys.readouterr().err.strip().splitlines()


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and folder (None) under `folder`, by relative path."""
    return {p.relative_to(folder).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in folder.rglob("*")}


def _results_file(path: Path, offset: int) -> Path:
    """A run-dict results file on the tiny world: every query ranks ten corpus images from `offset`."""
    from cir_demo.results import write_results
    from cir_demo.world import load_world

    bench = load_world(size="tiny")
    ids = sorted(bench.corpus_set)
    write_results(path, bench, {q.query_id: ids[offset : offset + 10] for q in bench.queries}, fmt="run-dict")
    return path


def _score(results: Path, out: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    return _eval(
        [
            "--world-size",
            "tiny",
            "--results-json",
            str(results),
            "--n-boot",
            "0",
            "--no-plots",
            "--out",
            str(out),
            *extra,
        ],
        capsys,
    )


def _add_unrelated(out: Path) -> None:
    (out / "notes.txt").write_text("my notes\n")
    (out / "thesis.tex").write_text("\\documentclass{article}\n")
    (out / "src").mkdir()
    (out / "src" / "model.py").write_text("print('mine')\n")
    (out / "src" / "data").mkdir()


# --------------------------------------------------------------------------- row 1: --out never deletes
def test_out_with_a_run_and_unrelated_files_is_refused_and_overwrite_moves_it_aside_whole(dirs, capsys):
    out = dirs / "out"
    a, b = _results_file(dirs / "model_a.json", 0), _results_file(dirs / "model_b.json", 10)
    assert _score(a, out, capsys)[0] == 0
    old_run = _tree(out)
    _add_unrelated(out)
    before = _tree(out)

    rc, err = _score(b, out, capsys)
    assert _tree(out) == before  # every file intact, byte for byte
    assert rc == 2 and len(err) == 1 and "Traceback" not in "\n".join(err), err
    assert err[0].startswith(f"error: --out {out}: holds files (breakdowns.csv, metrics.csv, ")
    assert "--overwrite" in err[0]

    rc, err = _score(b, out, capsys, "--overwrite")
    assert rc == 0, err
    after = _tree(out)
    (aside,) = dirs.glob("out.replaced-*")
    assert _tree(aside) == before  # the earlier folder, whole: the run and the user's files, byte for byte
    assert after["metrics.csv"] != old_run["metrics.csv"] and b"model_b" in after["metrics.csv"]
    import json

    listed = set(json.loads(after["run_manifest.json"])["files"])
    assert listed == {name for name, data in after.items() if data is not None} - {"run_manifest.json"}


def test_out_with_run_named_files_is_refused_and_with_overwrite_moved_aside_whole(dirs, capsys):
    """No file is taken for a run's by its name: the folder is moved aside whole, or left as it is."""
    out = dirs / "thesis"
    out.mkdir()
    (out / "metrics.csv").write_text("model,score\nmine,1\n")
    _add_unrelated(out)
    before = _tree(out)
    a = _results_file(dirs / "model_a.json", 0)
    rc, err = _score(a, out, capsys)
    assert rc == 2 and len(err) == 1, err
    assert "holds files (metrics.csv, notes.txt, src/, thesis.tex)" in err[0]
    assert _tree(out) == before
    assert _score(a, out, capsys, "--overwrite")[0] == 0
    (aside,) = dirs.glob("thesis.replaced-*")
    assert _tree(aside) == before


def test_changed_file_of_an_earlier_run_is_kept(dirs, capsys):
    out = dirs / "out"
    a = _results_file(dirs / "model_a.json", 0)
    assert _score(a, out, capsys)[0] == 0
    (out / "report.md").write_text("my edited report\n")
    before = _tree(out)
    rc, err = _score(a, out, capsys, "--overwrite")
    assert rc == 0, err
    (aside,) = dirs.glob("out.replaced-*")
    assert _tree(aside) == before


# --------------------------------------------------------------------------- rows 2-4: the app's flags
@pytest.mark.parametrize(
    "argv, expect",
    [
        (["--port", "99999"], "error: --port 99999: must be a port number (0-65535)"),
        (["--port", "-1"], "error: --port -1: must be a port number (0-65535)"),
        (["--concurrency", "0"], "error: --concurrency 0: must be a positive number"),
        (["--queue-size", "-1"], "error: --queue-size -1: must be a positive number"),
        (["--queue-size", "0"], "error: --queue-size 0: must be a positive number"),
        (["--threads", "0"], "error: --threads 0: must be a positive number"),
        (["--benchmark", "cir"], "error: --benchmark: unknown benchmark 'cir'. Did you mean"),
        (["--retrievers", "world-cri"], "error: --retrievers: unknown retriever 'world-cri'. Did you mean 'world-cir'"),
    ],
)
def test_app_flags_are_checked_before_launch(dirs, monkeypatch, capsys, argv, expect):
    from cir_demo.ui import app as ui_app

    def no_launch(*a, **k):  # the checks must stop the app before any socket
        raise AssertionError("launched")

    monkeypatch.setattr(ui_app, "launch_app", no_launch)
    monkeypatch.setattr(ui_app, "ServiceLoader", no_launch)
    assert ui_app.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expect), err


@pytest.mark.parametrize(
    "env, expect",
    [
        ("99999", "error: GRADIO_SERVER_PORT=99999: must be a port number (0-65535)"),
        ("http", "error: GRADIO_SERVER_PORT=http: must be a port number (0-65535)"),
    ],
)
def test_app_port_from_the_environment_is_checked_like_the_flag(dirs, monkeypatch, capsys, env, expect):
    """gradio binds $GRADIO_SERVER_PORT when --port is absent: 99999 was its OverflowError traceback."""
    from cir_demo.ui import app as ui_app

    monkeypatch.setattr(ui_app, "launch_app", lambda *a, **k: pytest.fail("launched"))
    monkeypatch.setattr(ui_app, "ServiceLoader", lambda *a, **k: pytest.fail("launched"))
    monkeypatch.setenv("GRADIO_SERVER_PORT", env)
    assert ui_app.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expect), err


@pytest.mark.parametrize(
    "argv, env, expect",
    [
        (["--server-name", "no.such.host.invalid"], {}, "error: --server-name no.such.host.invalid: cannot listen on"),
        ([], {"GRADIO_SERVER_NAME": "no.such.host.invalid"}, "error: GRADIO_SERVER_NAME=no.such.host.invalid: cannot"),
    ],
)
def test_app_interface_is_checked_before_launch(dirs, monkeypatch, capsys, argv, env, expect):
    """A host this machine cannot listen on was gradio's 'Cannot find empty port' traceback after 100 tries."""
    from cir_demo.ui import app as ui_app

    monkeypatch.setattr(ui_app, "launch_app", lambda *a, **k: pytest.fail("launched"))
    monkeypatch.setattr(ui_app, "ServiceLoader", lambda *a, **k: pytest.fail("launched"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert ui_app.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expect), err


def test_app_port_in_use_is_refused_before_launch(dirs, monkeypatch, capsys):
    from cir_demo.ui import app as ui_app

    monkeypatch.setattr(ui_app, "launch_app", lambda *a, **k: pytest.fail("launched"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert ui_app.main(["--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--port {port}: cannot listen on 127.0.0.1:{port} (in use)" in err[0], err


def test_app_port_out_of_range_in_a_process(dirs):
    proc = subprocess.run(
        [sys.executable, "app.py", "--port", "99999"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: --port 99999: must be a port number (0-65535)"]


# --------------------------------------------------------------------------- row 5: benchmark names first
@pytest.mark.parametrize("extra", [[], ["--retrievers", "world-clip-fusion"]])
def test_eval_unknown_benchmark_is_named_first_with_exit_2(dirs, capsys, extra):
    rc, err = _eval(["--benchmark", "cir", *extra], capsys)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: --benchmark: unknown benchmark 'cir'. Did you mean") and "'cirr'" in err[0]
    assert not (dirs / "runs").exists()


# --------------------------------------------------------------------------- rows 6-7: results-file faults
@pytest.mark.parametrize(
    "name, text, expect",
    [
        (
            "run.json",
            '{"%s": {"%s": NaN, "%s": 1.0}}',
            "read as run-dict results: score must be a finite number, got nan",
        ),
        ("run.json", '{"%s": {"%s": 1.0, "%s": -Infinity}}', "read as run-dict results: score must be a finite number"),
        ("run.trec", "%s Q0 %s 1 inf t\n%s Q0 x 2 1.0 t\n", "read as trec results: the score of image"),
        (
            "pp.json",
            '{"%s": {"retrieved_items": ["%s", "%s"], "scores": [1.0, NaN]}}',
            "read as pinpoint results: the score of image",
        ),
    ],
)
def test_non_finite_scores_name_format_and_fault_once_with_exit_2(dirs, capsys, name, text, expect):
    from cir_demo.world import load_world

    bench = load_world(size="tiny")
    key, ids = bench.results_key(bench.queries[0].query_id), sorted(bench.corpus_set)
    path = dirs / name
    path.write_text(text % (key, ids[0], ids[1] if "trec" not in name else key))
    rc, err = _eval(["--world-size", "tiny", "--results-json", str(path), "--out", str(dirs / "out")], capsys)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {path}, ") and err[0].count("error:") == 1, err
    assert expect in err[0] and "fits none" not in err[0], err
    assert not (dirs / "out").exists()


# --------------------------------------------------------------------------- rows 8-9: the app's log and status
def test_app_log_and_status_line_state_missing_weights_in_one_line_without_server_paths(dirs, monkeypatch, capsys):
    from cir_demo import paths
    from cir_demo.explorer import ServiceConfig, ServiceLoader
    from cir_demo.ui.app import configure_log, status_markdown

    assets = dirs / "assets"
    shutil.copytree(paths.assets_dir(), assets)
    (assets / "world-cir" / "world_cir.safetensors").unlink()
    monkeypatch.setattr(paths, "assets_dir", lambda: assets)
    (dirs / "cache").mkdir()
    (dirs / "cache" / "app").write_text("a file where the app's caches go (as if the folder were read-only)")
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [handler])
    configure_log(debug=False)
    config = ServiceConfig(
        benchmark="world",
        benchmark_kwargs={"size": "tiny"},
        retrievers=("world-cir",),
        reranker="none",
        limit_groups=2,
        warm_thumbnails=False,
        device="cpu",
    )
    loader = ServiceLoader(config)
    service = loader.wait(600)
    text = log.getvalue()
    failed = [line for line in text.splitlines() if "retriever world-cir failed to load" in line]
    assert len(failed) == 1 and "damaged: assets/world-cir/world_cir.safetensors: missing" in failed[0], text
    assert "Traceback" not in text
    status = status_markdown(service, loader.status())
    for server_path in {str(dirs), str(dirs.resolve()), str(REPO)}:
        assert server_path not in status, status
    assert "pixel cache the cache folder cannot be used" in status.replace("\\", "")
    assert "world-cir could not be loaded" in status.replace("\\", "")
    service.engine.close()


def test_app_log_keeps_tracebacks_with_debug(monkeypatch):
    from cir_demo.integrity import DamagedFileError
    from cir_demo.ui.app import configure_log

    log = io.StringIO()
    handler = logging.StreamHandler(log)
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    for debug in (False, True):
        configure_log(debug=debug)
        try:
            raise DamagedFileError(["damaged: assets/x/y.safetensors: missing"])
        except DamagedFileError:
            logging.getLogger("cir_demo.explorer.loader").exception("retriever %s failed to load", "x")
    lines = log.getvalue().splitlines()
    assert lines[0].endswith("retriever x failed to load: damaged: assets/x/y.safetensors: missing")
    assert "Traceback (most recent call last):" in lines[1:]


# --------------------------------------------------------------------------- other commands that write a folder
@pytest.mark.parametrize("argv", [["world", "generate", "--size", "tiny"], ["train", "world-cir", "--max-steps", "1"]])
def test_world_generate_and_train_refuse_an_out_folder_holding_other_files(dirs, capsys, argv):
    from cir_demo.cli import main

    out = dirs / "mine"
    out.mkdir()
    (out / "manifest.json").write_text('{"mine": true}')  # a name these commands write, not theirs
    (out / "notes.txt").write_text("mine")
    before = _tree(out)
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds files" in err[0] and "manifest.json, notes.txt" in err[0], err
    assert _tree(out) == before


@pytest.mark.parametrize("command", [["submission"], ["rerank", "--backend", "world-verifier"]])
def test_other_commands_reading_results_files_say_error_once_with_exit_2(dirs, capsys, command):
    from cir_demo.cli import main
    from cir_demo.world import load_world

    bench = load_world(size="tiny")
    path = dirs / "run.json"
    path.write_text('{"%s": {"%s": NaN}}' % (bench.results_key(bench.queries[0].query_id), sorted(bench.corpus_set)[0]))
    capsys.readouterr()
    rc = main(
        [
            *command,
            "--benchmark",
            "world",
            "--world-size",
            "tiny",
            "--results-json",
            str(path),
            "--out",
            str(dirs / "out.json"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].count("error:") == 1, err
    assert "read as run-dict results: score must be a finite number, got nan" in err[0]


def test_hide_paths_says_what_a_server_path_is_and_leaves_the_rest(dirs):
    from cir_demo import paths
    from cir_demo.explorer.public_text import hide_paths

    weights = paths.assets_dir() / "world-cir" / "world_cir.safetensors"
    text = (
        f"pixel cache {dirs / 'cache' / 'app' / 'pixels.sqlite'} cannot be used; index {dirs / 'indexes' / 'w'}; "
        f"missing {weights}; log /srv/other/x.log; retriever 1/4 at 12 it/s, https://huggingface.co/a/b; "
        "`git checkout assets/world-cir/`"
    )
    assert hide_paths(text) == (
        "pixel cache the cache folder cannot be used; index the indexes folder; missing the weights of world-cir; "
        "log a server file; retriever 1/4 at 12 it/s, https://huggingface.co/a/b; `git checkout assets/world-cir/`"
    )


def test_hide_paths_touches_server_paths_only():
    """Markup, a placeholder's layout and an endpoint's name are no paths of the server; a file's is one."""
    from cir_demo.explorer.public_text import hide_paths

    kept = [
        "the answer ended with </script> and <b>bold</b>",
        "unpack them so that the paths resolve under <root>/img_raw/ (found there by default)",
        "see the /failures endpoint and /evaluate",
        "retriever 1/4 at 12 it/s, ./train/x.png, runs/a/b, https://example.org/a/b",
    ]
    for text in kept:
        assert hide_paths(text) == text
    assert hide_paths("cannot read /etc/passwd or /tmp") == "cannot read a server file or a server file"
    assert hide_paths("log /no/such/folder/x.log is gone") == "log a server file is gone"


def test_an_error_quotes_at_most_a_hundred_characters_of_each_input():
    from cir_demo.explorer.public_text import cut_inputs

    long_id = "w" * 5000
    text = f"benchmark 'world' has no query {long_id!r}; unknown retriever(s) {'r' * 300}, ok"
    cut = cut_inputs(text, [long_id, ["r" * 300, "ok"]])
    assert cut == f"benchmark 'world' has no query '{'w' * 100}…'; unknown retriever(s) {'r' * 100}…, ok"
    assert len(cut_inputs("x" * 10_000, [])) == 2000
