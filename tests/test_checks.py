"""Bad flags, folders and names are refused before any work: one line each, exit 2, nothing
created; runs appear under their final name only when complete; damaged committed weights are
named with the restoring command."""

from __future__ import annotations

import argparse
import json
import shutil

import pytest

from cir_demo.harness import cli as eval_cli


def parse(argv):
    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    return p.parse_args(argv)


@pytest.fixture()
def isolated(tmp_path, monkeypatch):
    """Empty runs and indexes folders, so "nothing created" can be checked."""
    monkeypatch.setenv("CIR_DEMO_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("CIR_DEMO_INDEXES", str(tmp_path / "indexes"))
    return tmp_path


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    "argv, expect",
    [
        (["--n-boot", "-5"], "--n-boot -5: must be"),
        (["--rerank", "doesnotexist"], "unknown reranker backend 'doesnotexist'"),
        (["--rerank-top-n", "-3"], "--rerank-top-n -3: must be"),
        (["--rerank-top-n", "0"], "--rerank-top-n 0: must be"),
        (["--retrievers", "doesnotexist"], "unknown retriever 'doesnotexist'"),
        (["--retrievers", " , "], "names no retriever"),
        (["--world-seed", "-1"], "--world-seed -1: must be"),
        (["--limit", "-1"], "--limit -1: must be"),
        (["--limit", "0"], "--limit 0: must be"),
        (["--bootstrap-seed", "-2"], "--bootstrap-seed -2: must be"),
        (["--results-json", "nowhere.json"], "--results-json nowhere.json: file not found"),
    ],
)
def test_bad_flag_is_one_line_exit_2_and_creates_nothing(isolated, capsys, argv, expect):
    out = isolated / "out"
    before = _listing(isolated)
    assert eval_cli.run(parse(["--world-size", "tiny", "--out", str(out), *argv])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and expect in err[0], err
    assert "Traceback" not in err[0]
    assert _listing(isolated) == before


def test_every_problem_is_reported_at_once(isolated, capsys):
    assert eval_cli.run(parse(["--world-size", "tiny", "--n-boot", "-1", "--limit", "-1", "--rerank", "nope"])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)


def test_out_that_is_a_file_or_a_foreign_folder_is_refused(isolated, capsys):
    f = isolated / "README.md"
    f.write_text("mine")
    assert eval_cli.run(parse(["--world-size", "tiny", "--out", str(f)])) == 2
    assert "an existing file, not a folder" in capsys.readouterr().err
    assert f.read_text() == "mine"
    foreign = isolated / "photos"
    foreign.mkdir()
    (foreign / "holiday.jpg").write_bytes(b"x")
    assert eval_cli.run(parse(["--world-size", "tiny", "--out", str(foreign)])) == 2
    assert "holds files (holiday.jpg); add --overwrite to move the folder aside whole" in capsys.readouterr().err
    assert _listing(foreign) == ["holiday.jpg"]


@pytest.mark.parametrize("var", ["CIR_DEMO_CACHE", "CIR_DEMO_RUNS", "CIR_DEMO_INDEXES"])
def test_data_folder_variable_naming_a_file(isolated, monkeypatch, capsys, var):
    f = isolated / "afile"
    f.write_text("x")
    monkeypatch.setenv(var, str(f))
    assert eval_cli.run(parse(["--world-size", "tiny", "--out", str(isolated / "o")])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {var}={f} is a file, not a folder; point {var} at a folder or unset it"]

    from cir_demo.cli import main

    assert main(["index", "status"]) == 2
    assert f"{var}={f} is a file" in capsys.readouterr().err


def test_index_build_flags_checked_first(isolated, capsys):
    from cir_demo.cli import main

    assert (
        main(
            [
                "index",
                "build",
                "--benchmark",
                "world",
                "--world-size",
                "tiny",
                "--retriever",
                "nope",
                "--batch-size",
                "0",
                "--world-seed",
                "-3",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert any("unknown retriever 'nope'" in e for e in err)
    assert any("--batch-size 0" in e for e in err) and any("--world-seed -3" in e for e in err)
    assert not (isolated / "indexes").exists()


@pytest.fixture()
def damaged_asset(tmp_path, monkeypatch):
    """A copy of assets/ with world-cir's weights truncated, served as the assets folder."""
    from cir_demo import paths

    assets = tmp_path / "assets"
    shutil.copytree(paths.assets_dir(), assets)
    weights = assets / "world-cir" / "world_cir.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    monkeypatch.setattr(paths, "assets_dir", lambda: assets)
    return json.loads((assets / "world-cir" / "manifest.json").read_text())["files"]["world_cir.safetensors"]


def test_damaged_weights_name_file_checksum_and_restoring_command(isolated, damaged_asset, capsys):
    assert eval_cli.run(parse(["--world-size", "tiny", "--out", str(isolated / "o"), "--retrievers", "world-cir"])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "damaged: assets/world-cir/world_cir.safetensors" in err[0] and damaged_asset in err[0]
    assert "`git checkout assets/world-cir/`" in err[0] and "`python -m cir_demo train world-cir`" in err[0]
    # the loader says the same (the app and other commands go through it)
    from cir_demo.integrity import DamagedFileError
    from cir_demo.retrievers.registry import load_retriever

    with pytest.raises(DamagedFileError, match="git checkout assets/world-cir/"):
        load_retriever("world-cir", device="cpu")


def test_intact_assets_pass():
    from cir_demo.integrity import check_asset

    for name in ("world-clip", "world-cir"):
        assert check_asset(name) == []


# --------------------------------------------------------------------------- staged run folders
def test_failed_run_leaves_nothing_listed_and_earlier_run_intact(tmp_path):
    from cir_demo.harness.staging import PARTIAL, staged_run_dir

    out = tmp_path / "runs" / "r1"
    with staged_run_dir(out) as d:
        (d / "metrics.csv").write_text("old")
    assert (out / "metrics.csv").read_text() == "old"
    with pytest.raises(RuntimeError):
        with staged_run_dir(out, overwrite=True) as d:
            (d / "metrics.csv").write_text("half")
            raise RuntimeError("killed")
    assert (out / "metrics.csv").read_text() == "old"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["r1"]
    with staged_run_dir(out, overwrite=True) as d:
        (d / "metrics.csv").write_text("new")
    assert (out / "metrics.csv").read_text() == "new"
    assert not (tmp_path / "runs" / PARTIAL).exists()


def test_abandoned_staging_of_a_dead_process_is_kept_and_said(tmp_path, capsys):
    """Its name alone says whose it is, and a name can be forged: it is never removed, only said."""
    from cir_demo.harness.staging import PARTIAL, staged_run_dir

    dead = tmp_path / PARTIAL / "999999999-abcd1234-run"
    dead.mkdir(parents=True)
    (dead / "metrics.csv").write_text("x")
    with staged_run_dir(tmp_path / "run") as d:
        (d / "metrics.csv").write_text("new")
    assert (dead / "metrics.csv").read_text() == "x"
    assert "999999999-abcd1234-run" in capsys.readouterr().err


def test_duplicate_query_key_in_results_file(tmp_path):
    from cir_demo.benchmarks.schema import BenchmarkError
    from cir_demo.results import read_results
    from cir_demo.world import load_world

    bench = load_world(size="tiny")
    key = bench.results_key(bench.queries[0].query_id)
    f = tmp_path / "dup.json"
    f.write_text('{"%s": {"retrieved_items": ["a"]}, "%s": {"retrieved_items": ["b"]}}' % (key, key))
    with pytest.raises(BenchmarkError) as exc:
        read_results(f, bench)
    assert str(f) in str(exc.value) and repr(key) in str(exc.value) and "appears twice" in str(exc.value)


@pytest.mark.parametrize(
    "argv, expect",
    [
        (["world", "generate", "--size", "tiny", "--seed", "-1"], "--seed -1: must be a non-negative integer"),
        (["world", "generate", "--size", "bogus"], "--size: unknown world size 'bogus'"),
        (["world", "stats", "--size", "tiny", "--seed", "-3"], "--seed -3: must be"),
        (
            ["world", "export", "--size", "tiny", "--seed", "-1", "--format", "jsonl", "--out", "{tmp}/export"],
            "--seed -1: must be",
        ),
        (
            ["world", "contact-sheet", "--size", "tiny", "--out", "{tmp}/sheet.png", "--per-category", "0"],
            "--per-category 0: must be",
        ),
        (
            ["world", "contact-sheet", "--size", "tiny", "--out", "{tmp}/sheet.png", "--sample-seed", "-1"],
            "--sample-seed -1: must be",
        ),
        (
            ["world", "render", "w-te-000000", "--size", "tiny", "--out", "{tmp}/render", "--pixels", "0"],
            "--pixels 0: must be",
        ),
        (["train", "world-clip", "--world-size", "tiny", "--seed", "-1", "--out", "{tmp}/model"], "--seed -1: must be"),
        (
            ["train", "world-clip", "--world-size", "tiny", "--data-seed", "-1", "--out", "{tmp}/model"],
            "--data-seed -1: must be",
        ),
        (
            ["train", "world-clip", "--world-size", "tiny", "--epochs", "-1", "--out", "{tmp}/model"],
            "--epochs -1.0: must be a positive",
        ),
        (
            ["train", "world-clip", "--world-size", "tiny", "--max-steps", "0", "--out", "{tmp}/model"],
            "--max-steps 0: must be",
        ),
        (
            ["train", "world-clip", "--world-size", "tiny", "--threads", "0", "--out", "{tmp}/model"],
            "--threads 0: must be",
        ),
        (
            ["train", "world-clip", "--world-size", "bogus", "--out", "{tmp}/model"],
            "--world-size: unknown world size 'bogus'",
        ),
        (["record", "--world-size", "bogus", "--out", "{tmp}/rec"], "--world-size: unknown world size 'bogus'"),
        (["eval", "--benchmark", "world", "--world-size", "bogus"], "--world-size: unknown world size 'bogus'"),
        (
            [
                "index",
                "build",
                "--benchmark",
                "world",
                "--world-size",
                "tiny",
                "--world-seed",
                "-1",
                "--retriever",
                "world-clip-image",
            ],
            "--world-seed -1: must be",
        ),
        (
            [
                "index",
                "build",
                "--benchmark",
                "world",
                "--world-size",
                "tiny",
                "--retriever",
                "world-clip-image",
                "--fetch-workers",
                "0",
            ],
            "--fetch-workers 0: must be",
        ),
        (
            ["validate", "--benchmark", "world", "--world-size", "tiny", "--world-seed", "-1"],
            "--world-seed -1: must be",
        ),
        (
            ["validate", "--benchmark", "world", "--world-size", "tiny", "--max-warnings", "-1"],
            "--max-warnings -1: must be",
        ),
        (
            [
                "rerank",
                "--world-size",
                "tiny",
                "--results-json",
                "{tmp}/r.json",
                "--out",
                "{tmp}/o.json",
                "--top-n",
                "0",
            ],
            "--top-n 0: must be",
        ),
        (
            ["images", "fetch", "--benchmark", "world", "--fetch-timeout", "-1"],
            "--fetch-timeout -1.0: must be a positive",
        ),
    ],
)
def test_bad_numeric_flag_of_any_command_is_one_line_exit_2_and_creates_nothing(
    isolated, monkeypatch, capsys, argv, expect
):
    from cir_demo import cli

    monkeypatch.setenv("CIR_DEMO_CACHE", str(isolated / "cache"))
    before = _listing(isolated)
    assert cli.main([a.replace("{tmp}", str(isolated)) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and expect in err[0], err
    assert _listing(isolated) == before


def test_train_without_world_clip_creates_no_output_folder(isolated, capsys):
    from cir_demo import cli

    with pytest.raises(SystemExit, match="no world-CLIP"):
        cli.main(
            [
                "train",
                "world-cir",
                "--world-size",
                "tiny",
                "--clip",
                str(isolated / "no-clip"),
                "--out",
                str(isolated / "model"),
            ]
        )
    assert not (isolated / "model").exists()


def test_world_render_checks_every_image_id_before_creating_out(tmp_path, capsys):
    from cir_demo import cli

    out = tmp_path / "render"
    assert cli.main(["world", "render", "w-te-000001", "not-an-id", "--size", "tiny", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'not-an-id' is not a world image id" in err[0], err
    assert not out.exists()  # the good id first does not leave a half-filled folder either
    assert cli.main(["world", "render", "w-te-000001", "--size", "tiny", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["run_manifest.json", "w-te-000001.png"]


def test_every_world_size_and_fold_passes_the_size_check_and_others_are_named():
    """The sizes a command accepts are generate.SIZES: each base size and each of its held-out folds."""
    from cir_demo.preflight.flags import GivenFlags, world_size_problems

    for size in ("tiny", "default", "tiny-fold1", "default-fold1"):
        assert world_size_problems(GivenFlags.of({"world_size": size}), "world_size") == []
    (line,) = world_size_problems(GivenFlags.of({"world_size": "default-fold9"}), "world_size")
    assert "default-fold9" in str(line) and "default-fold1" in str(line)
