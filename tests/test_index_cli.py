"""`index build|status|list` end to end, with the tiny real model standing in for a registry name."""

from __future__ import annotations

import argparse
import hashlib

import pytest

from cir_demo.harness import index_run
from cir_demo.index import cli
from cir_demo.index.manifest import read_manifest
from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark


# this module is the "tiny" retriever family the pre-checks ask (a seeded random model: nothing to fetch)
PARAMS: dict = {}


def weights(config: dict) -> list:
    return []


def load(config: dict, device: str, **_) -> TinyConvRetriever:
    return TinyConvRetriever(seed=0, name=config["name"])


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return index_run.run(parser.parse_args(argv))


@pytest.fixture()
def env(tmp_path, monkeypatch):
    """Indexes under tmp; benchmark and retriever names resolve to the tiny ones; `seed` picks the model."""
    import cir_demo.retrievers.registry as registry

    monkeypatch.setenv("CIR_DEMO_INDEXES", str(tmp_path / "indexes"))
    state = {"seed": 0, "n": 20, "loaded": []}

    def load_benchmark(choice, name=None):
        return tiny_benchmark(state["n"], name=name or choice.name)

    def load_retriever(name, device=None, trust_remote_code=False, **kw):
        r = TinyConvRetriever(seed=state["seed"], name=name)
        state["loaded"].append((name, device))
        return r

    monkeypatch.setattr(index_run, "_load_benchmark", load_benchmark)
    monkeypatch.setattr(registry, "load_retriever", load_retriever)
    monkeypatch.setattr(registry, "get_config", lambda name: {"name": name, "family": "tiny"})  # for the pre-checks
    monkeypatch.setitem(registry.FAMILIES, "tiny", __name__)
    import dataclasses

    from cir_demo.benchmarks import registry as benchmarks

    # a declared benchmark, so the pre-checks (unknown --benchmark names first) let it through
    monkeypatch.setitem(
        benchmarks.BENCHMARKS, "tinybench", dataclasses.replace(benchmarks.BENCHMARKS["jsonl"], name="tinybench")
    )
    state["root"] = tmp_path / "indexes"
    return state


def test_build_status_list(env, capsys):
    assert run_cli(["build", "--benchmark", "tinybench", "--retriever", "tiny-conv", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "flat index of 20 images x 16 dims" in out
    directory = env["root"] / "tinybench" / "tiny-conv"
    assert read_manifest(directory).count == 20

    assert run_cli(["list"]) == 0
    listing = capsys.readouterr().out
    assert "tinybench" in listing and "tiny-conv" in listing and " 20 " in listing

    assert run_cli(["status"]) == 0
    assert capsys.readouterr().out.startswith("fresh")

    env["seed"], env["n"] = 1, 21  # new weights and a grown corpus
    assert run_cli(["status", "--benchmark", "tinybench"]) == 1
    status = capsys.readouterr().out
    assert status.startswith("stale") and "weights changed" in status and "corpus changed" in status

    assert run_cli(["status", "--benchmark", "edir"]) == 0
    assert "no indexes found" in capsys.readouterr().out
    assert run_cli(["status", "--benchmark", "ediir"]) == 2  # an unknown name is a bad flag
    assert "Did you mean 'edir'" in capsys.readouterr().err

    # The build command rebuilds what is stale.
    assert (
        run_cli(
            [
                "build",
                "--benchmark",
                "tinybench",
                "--retriever",
                "tiny-conv",
                "--no-progress",
                "--kind",
                "hnsw",
                "--M",
                "8",
            ]
        )
        == 0
    )
    m = read_manifest(directory)
    assert (m.count, m.kind, m.params["M"]) == (21, "hnsw", 8)
    assert run_cli(["status"]) == 0
    # Without --kind a fresh index is kept as it is (no conversion back to flat).
    assert run_cli(["build", "--benchmark", "tinybench", "--retriever", "tiny-conv", "--no-progress"]) == 0
    assert read_manifest(directory).built_at == m.built_at and read_manifest(directory).kind == "hnsw"
    assert (
        run_cli(["build", "--benchmark", "tinybench", "--retriever", "tiny-conv", "--no-progress", "--kind", "flat"])
        == 0
    )
    assert read_manifest(directory).kind == "flat"


def test_bad_options_are_errors(env, capsys):
    code = run_cli(["build", "--benchmark", "tinybench", "--retriever", "tiny-conv", "--nprobe", "4"])
    assert code == 2 and "--nprobe do(es) not apply to --kind (not given)" in capsys.readouterr().err
    code = run_cli(["build", "--benchmark", "tinybench", "--retriever", "tiny-conv", "--kind", "flat", "--M", "4"])
    assert code == 2 and "--M do(es) not apply to --kind flat" in capsys.readouterr().err
    assert run_cli([]) == 2


def test_sharded_build_in_one_process(env, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert run_cli(["build", "--benchmark", "tinybench", "--retriever", "tiny-conv", "--no-progress", "--sharded"]) == 0
    assert read_manifest(env["root"] / "tinybench" / "tiny-conv").num_shards == 1
    assert "flat index of 20 images" in capsys.readouterr().out


def test_build_never_replaces_a_folder_holding_other_files(env, tmp_path, capsys):
    """A build swaps the whole index folder in: a folder holding anything but an index's own files is
    refused before any encoding, and stays as it was (with or without --force)."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "ids.json").write_text("[]")  # an index file name, beside something that is not one
    for extra in ([], ["--force"]):
        code = run_cli(
            [
                "build",
                "--benchmark",
                "tinybench",
                "--retriever",
                "tiny-conv",
                "--no-progress",
                "--out-dir",
                str(out),
                *extra,
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert (
            code == 2 and len(err) == 1 and "holds files that are not part of an index (ids.json, notes.txt)" in err[0]
        ), err
        assert sorted(p.name for p in out.iterdir()) == ["ids.json", "notes.txt"]
        assert (out / "notes.txt").read_text() == "mine" and (out / "ids.json").read_text() == "[]"
    assert env["loaded"] == []  # refused before a model was loaded
    # an index's own folder is rebuilt with --force as before
    index = tmp_path / "index"
    assert (
        run_cli(
            ["build", "--benchmark", "tinybench", "--retriever", "tiny-conv", "--no-progress", "--out-dir", str(index)]
        )
        == 0
    )
    assert (
        run_cli(
            [
                "build",
                "--benchmark",
                "tinybench",
                "--retriever",
                "tiny-conv",
                "--no-progress",
                "--out-dir",
                str(index),
                "--force",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in index.iterdir()) == ["ids.json", "index.faiss", "manifest.json"]


def test_build_never_takes_a_folder_for_an_index_by_its_file_names(env, tmp_path, capsys):
    """Issue 41, cases 2-3: a user's manifest.json and ids.json alone are no index; an index manifest whose
    `files` lists a user's file does not make that file the index's, with or without --force."""
    import json

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "manifest.json").write_text('{"files": {}}')
    (mine / "ids.json").write_text('["a"]')
    argv = ["build", "--benchmark", "tinybench", "--retriever", "tiny-conv", "--no-progress"]
    assert run_cli([*argv, "--out-dir", str(mine)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not part of an index (ids.json, manifest.json)" in err[0], err
    assert (mine / "manifest.json").read_text() == '{"files": {}}' and (mine / "ids.json").read_text() == '["a"]'
    index = tmp_path / "index"
    assert run_cli([*argv, "--out-dir", str(index)]) == 0
    (index / "thesis.tex").write_text("mine")
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["files"]["thesis.tex"] = {"size": 4, "sha256": hashlib.sha256(b"mine").hexdigest()}
    (index / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert run_cli([*argv, "--out-dir", str(index), "--force"]) == 2
    assert "not part of an index (thesis.tex)" in capsys.readouterr().err
    assert (index / "thesis.tex").read_text() == "mine"


def test_sharded_build_removes_only_its_shards_from_shard_dir(env, tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    shards = tmp_path / "shared"
    shards.mkdir()
    (shards / "keep.txt").write_text("mine")
    assert (
        run_cli(
            [
                "build",
                "--benchmark",
                "tinybench",
                "--retriever",
                "tiny-conv",
                "--no-progress",
                "--sharded",
                "--shard-dir",
                str(shards),
            ]
        )
        == 0
    )
    assert [p.name for p in shards.iterdir()] == ["keep.txt"]


def test_kind_auto_new_kinds_and_memory_budget(env, capsys, monkeypatch):
    from cir_demo.index import choose

    directory = env["root"] / "tinybench" / "tiny-conv"
    build = ["build", "--benchmark", "tinybench", "--retriever", "tiny-conv", "--no-progress"]
    assert (
        run_cli(
            build
            + [
                "--kind",
                "ivfpq",
                "--nlist",
                "2",
                "--pq-m",
                "8",
                "--k-factor",
                "8",
                "--refine-bits",
                "8",
                "--ef-search",
                "40",
            ]
        )
        == 0
    )
    m = read_manifest(directory)
    assert (m.kind, m.factory, m.choice) == ("ivfpq", "IVF2_HNSW32,PQ8x4fs,Refine(SQ8)", "requested")
    assert (m.params["k_factor"], m.params["quantizer_efSearch"]) == (8, 40)
    assert "faiss IVF2_HNSW32,PQ8x4fs,Refine(SQ8), requested" in capsys.readouterr().out
    # --kind auto: the choice for 20 x 16 is flat; with a limit below 20 and a budget too small for float32
    # rows it is PQ codes re-ranked on 8-bit vectors
    assert run_cli(build + ["--kind", "auto"]) == 0 and read_manifest(directory).kind == "flat"
    monkeypatch.setattr(choose, "FLAT_MIN_VECTORS", 10)
    monkeypatch.setattr(choose, "FLAT_MAX_WORK", 1)
    assert run_cli(build + ["--kind", "auto", "--memory-budget", str(20 * 40 / 2**30)]) == 0
    m = read_manifest(directory)
    assert (m.kind, m.params["refine_bits"]) == ("ivfpq", 8) and "over the memory budget" in m.choice
    capsys.readouterr()
    assert run_cli(build + ["--kind", "auto", "--memory-budget", "0"]) == 2
    assert "--memory-budget must be a positive number of GiB, got 0.0" in capsys.readouterr().err
    assert run_cli(build + ["--kind", "auto", "--nprobe", "3"]) == 2
    assert "--nprobe do(es) not apply to --kind auto; name the kind with --kind" in capsys.readouterr().err
    assert run_cli(build + ["--kind", "hnsw", "--k-factor", "3"]) == 2
    assert "--k-factor do(es) not apply to --kind hnsw" in capsys.readouterr().err
