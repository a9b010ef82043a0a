"""`python -m cir_demo images fetch` against a real local HTTP server: parallel, retried,
resumable after a kill, corrupt downloads refused, a report of what could not be fetched;
and `--eval --fetch-images` running on the images it has with a stated coverage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from cir_demo.cli import main
from pinpoint_images import ImageServer, write_pinpoint

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def bench_files(tmp_path, monkeypatch):
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CIR_DEMO_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("CIR_DEMO_INDEXES", str(tmp_path / "indexes"))
    parquet, corpus_file, ids = write_pinpoint(tmp_path / "pp")
    return parquet, corpus_file, ids, tmp_path / "cache" / "images" / "pinpoint"


def flags(parquet, corpus_file):
    return ["--benchmark", "pinpoint", "--annotations", str(parquet), "--corpus-ids", str(corpus_file)]


def decodes(path: Path) -> bool:
    try:
        with Image.open(path) as img:
            img.load()
        return True
    except Exception:
        return False


def test_fetch_gets_good_slow_and_flaky_refuses_corrupt_and_reports_missing(bench_files, capsys):
    parquet, corpus_file, ids, cache = bench_files
    behaviour = {ids[3]: "missing", ids[4]: "corrupt", ids[5]: "slow", ids[6]: "flaky", ids[7]: "slow"}
    report = cache / "fetch_failed.tsv"
    with ImageServer(behaviour) as server:
        rc = main(
            [
                "images",
                "fetch",
                *flags(parquet, corpus_file),
                "--url-pattern",
                server.url_pattern,
                "--fetch-workers",
                "4",
                "--fetch-retries",
                "2",
                "--fetch-timeout",
                "5",
                "--no-progress",
            ]
        )
        requests = dict(server.requests)
    out = capsys.readouterr()
    assert rc == 1  # the corrupt image failed in a way a rerun might fix
    good = [i for i in ids if i not in (ids[3], ids[4])]
    for i in good:
        assert decodes(cache / f"{i}.jpg"), i
    assert not (cache / f"{ids[3]}.jpg").exists() and not (cache / f"{ids[4]}.jpg").exists()
    assert not list(cache.glob(".*.tmp"))  # no partial files left
    # 404 is not retried; corrupt and flaky ones are
    assert requests[ids[3]] == 1 and requests[ids[4]] == 3 and requests[ids[6]] == 2
    lines = dict(line.split("\t") for line in report.read_text().splitlines()[1:])
    assert set(lines) == {ids[3], ids[4]}
    assert lines[ids[3]] == "HTTP 404" and "not a valid image" in lines[ids[4]]
    assert f"{len(good)} of {len(ids)} images present" in out.out and str(report) in out.out


def test_status_counts_and_names_the_fetch_command(bench_files, capsys):
    parquet, corpus_file, ids, cache = bench_files
    assert main(["images", "status", *flags(parquet, corpus_file)]) == 1
    out = capsys.readouterr().out
    assert f"0 of {len(ids)} corpus images" in out and "python -m cir_demo images fetch --benchmark pinpoint" in out


def test_fetch_resumes_after_a_kill(bench_files):
    parquet, corpus_file, ids, cache = bench_files
    with ImageServer(delay_s=0.4) as server:
        cmd = [
            sys.executable,
            "-m",
            "cir_demo",
            "images",
            "fetch",
            *flags(parquet, corpus_file),
            "--url-pattern",
            server.url_pattern,
            "--fetch-workers",
            "1",
            "--no-progress",
        ]
        env = {**os.environ, "CIR_DEMO_CACHE": str(cache.parent.parent), "HF_HUB_OFFLINE": "1"}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 180
            while time.time() < deadline and len(list(cache.glob("*.jpg"))) < 3:
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        done_before = sorted(p.stem for p in cache.glob("*.jpg"))
        assert 3 <= len(done_before) < len(ids), "the kill should land midway"
        assert all(decodes(cache / f"{i}.jpg") for i in done_before)  # only whole images under final names
        before = dict(server.requests)
        assert (
            main(
                ["images", "fetch", *flags(parquet, corpus_file), "--url-pattern", server.url_pattern, "--no-progress"]
            )
            == 0
        )
        after = dict(server.requests)
    assert all(after[i] == before[i] for i in done_before)  # resumed: nothing fetched twice
    assert all(decodes(cache / f"{i}.jpg") for i in ids)
    assert not list(cache.glob(".*.tmp"))


@pytest.fixture()
def tiny_clip(tmp_path):
    from cir_demo.retrievers import registry
    from cir_demo.testing.tiny_retrievers import build_tiny_open_clip, tiny_open_clip_config

    weights = build_tiny_open_clip(tmp_path / "w")
    registry.register_config(tiny_open_clip_config(weights, "tiny-fetch-fusion"), replace=True)
    yield "tiny-fetch-fusion"
    registry.unregister("tiny-fetch-fusion")


def test_eval_with_fetch_images_runs_on_the_images_it_has(bench_files, tiny_clip, tmp_path, capsys):
    from cir_demo.harness import cli as eval_cli

    parquet, corpus_file, ids, cache = bench_files
    out = tmp_path / "run"
    argv = [
        *flags(parquet, corpus_file),
        "--retrievers",
        tiny_clip,
        "--out",
        str(out),
        "--n-boot",
        "10",
        "--no-plots",
        "--device",
        "cpu",
    ]
    # no images at all: one line naming the count, the folder and the fetch command; nothing created
    assert eval_cli.run(_parse(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{len(ids)} benchmark images are missing" in err and str(cache) in err and "images fetch" in err
    assert not out.exists()
    # with --fetch-images: one corpus image is gone for good, one reference image too
    gone = {ids[9]: "missing", ids[1]: "missing"}  # ids[1] is the reference of queries 3 and 4
    with ImageServer(gone) as server:
        rc = eval_cli.run(
            _parse(argv + ["--fetch-images", "--url-pattern", server.url_pattern, "--fetch-retries", "0"])
        )
    err = capsys.readouterr().err
    assert rc == 0, err
    assert f"running on {len(ids) - 2} of {len(ids)} corpus images" in err and "2 of 4 queries" in err
    import json

    results = {
        k: v
        for k, v in json.loads((out / "results" / f"{tiny_clip}.json").read_text()).items()
        if not k.startswith("_")
    }
    assert sorted(results) == ["00001", "00002"]  # the queries whose reference image is present
    assert not any(i in gone for r in results.values() for i in r["retrieved_items"])
    info = json.loads((out / "run_info.json").read_text())
    assert info["benchmark_info"]["image_coverage"] == f"{len(ids) - 2} of {len(ids)} corpus images, 2 of 4 queries"


def _parse(argv):
    import argparse

    from cir_demo.harness import cli as eval_cli

    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    return p.parse_args(argv)
