"""Faults: every kind of file truncated, corrupted or removed, and `--eval` / `index build` killed
midway. Each case must give a clear message (no traceback), rebuild what has a source, and leave
results byte-identical to an undisturbed run.

One reference run of world-CLIP fusion + the world verifier on 8 paraphrase groups of the tiny
world (isolated cache, indexes and runs folders) is compared with every disturbed run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cir_demo.harness import cli as eval_cli

RETRIEVER = "world-clip-fusion"
EVAL = [
    "--world-size",
    "tiny",
    "--limit",
    "8",
    "--retrievers",
    RETRIEVER,
    "--rerank",
    "world-verifier",
    "--rerank-top-n",
    "10",
    "--n-boot",
    "0",
    "--no-plots",
]
COMPARED = ("metrics.csv", "per_query.csv", f"results/{RETRIEVER}.json", f"results/{RETRIEVER}+rerank.json")
REPO = Path(__file__).resolve().parent.parent


def _eval(out: Path, capsys) -> tuple[int, str]:
    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    rc = eval_cli.run(p.parse_args([*EVAL, "--out", str(out)]))
    return rc, capsys.readouterr().err


def _status(capsys, *extra) -> tuple[int, str]:
    from cir_demo.cli import main

    rc = main(["index", "status", "--benchmark", "world", "--world-size", "tiny", "--retriever", RETRIEVER, *extra])
    return rc, capsys.readouterr().out


def _snapshot(run: Path) -> dict[str, bytes]:
    return {name: (run / name).read_bytes() for name in COMPARED}


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_world_seed):
    """Isolated data folders with the reference run done (module-wide: the suite shares its caches). The
    cache starts as a private copy of conftest.py's `tiny_world_seed` (the tiny world and its two corpus
    encodings); the tests that damage or remove those files check that they are encoded again."""
    from conftest import private_seed_copy

    root = tmp_path_factory.mktemp("faults")
    env = {
        "CIR_DEMO_CACHE": str(root / "cache"),
        "CIR_DEMO_INDEXES": str(root / "indexes"),
        "CIR_DEMO_RUNS": str(root / "runs"),
    }
    mp = pytest.MonkeyPatch()
    private_seed_copy(tiny_world_seed, root / "cache", mp)
    for k, v in env.items():
        mp.setenv(k, v)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    assert eval_cli.run(p.parse_args([*EVAL, "--out", str(root / "runs" / "reference")])) == 0
    ref = _snapshot(root / "runs" / "reference")
    index_dir = root / "indexes" / "world-tiny-s0" / RETRIEVER
    yield {"root": root, "env": env, "ref": ref, "index": index_dir}
    torch.set_num_threads(threads)
    mp.undo()


def _assert_identical(world, out: Path) -> None:
    assert _snapshot(out) == world["ref"]
    listed = [d.name for d in (world["root"] / "runs").iterdir() if (d / "metrics.csv").is_file()]
    assert all(not n.startswith(".") for n in listed)


def _truncate(path: Path, keep: int = 40) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) - 64, len(data) - 32):  # inside the vectors of a flat index
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    ["truncate index", "truncate ids", "garbage ids", "flip index bytes", "remove manifest", "garbage manifest"],
)
def test_damaged_index_reported_then_rebuilt(world, capsys, damage):
    d = world["index"]
    target = (
        d
        / {"index": "index.faiss", "ids": "ids.json", "manifest": "manifest.json"}[
            "index" if "index" in damage else damage.split()[-1]
        ]
    )
    if damage.startswith("truncate"):
        _truncate(target)
    elif damage.startswith("garbage"):
        target.write_text('{"not": "what it should be"' if "manifest" in damage else '["w-te-000001", 3')
    elif damage.startswith("flip"):
        _flip(target)
    else:
        target.unlink()

    if damage == "flip index bytes":  # same size: only the checksum sees it
        rc, out = _status(capsys, "--verify")
    else:
        rc, out = _status(capsys)
    if damage != "remove manifest":  # without a manifest it is no index at all: nothing to report
        assert rc == 1 and out.startswith("damaged"), out
        assert f"damaged: {target}" in out, out
        assert "Traceback" not in out

    rc, err = _eval(world["root"] / "runs" / f"after-{damage.replace(' ', '-')}", capsys)
    assert rc == 0, err
    assert "rebuilding from the corpus" in err or damage == "remove manifest", err
    assert "Traceback" not in err
    _assert_identical(world, world["root"] / "runs" / f"after-{damage.replace(' ', '-')}")
    assert _status(capsys, "--verify")[0] == 0


@pytest.fixture()
def corpus_opened_in_threads(monkeypatch):
    """The corpus opened in this process's loader threads, as on a one-CPU machine, not in render
    workers (tests/test_corpus_workers.py checks those give the same bits): the renderer's in-process
    cache (1,024 images) keeps the tiny corpus, so of the two passes below only the first renders it."""
    from cir_demo.index import corpus_encode as build

    monkeypatch.setattr(build, "_opening_workers", lambda images, n_batches: 0)


@pytest.mark.parametrize("which", ["one", "all"])
def test_damaged_embedding_cache_is_encoded_again(world, capsys, which, corpus_opened_in_threads):
    """The retriever's and the reranker's corpus caches (world-CLIP, the world judge): one damaged is
    encoded again alone; all damaged are encoded again in one shared pass. Either way it is said."""
    caches = sorted((Path(world["env"]["CIR_DEMO_CACHE"]) / "embeddings").rglob("*.npy"))
    assert len(caches) == 2, caches
    damaged = caches[:1] if which == "one" else caches
    for npy in damaged:
        _truncate(npy, 200)
    shutil.rmtree(world["index"], ignore_errors=True)  # so the index is rebuilt from the embedding cache
    out = world["root"] / "runs" / f"after-embeddings-{which}"
    rc, err = _eval(out, capsys)
    assert rc == 0 and "encoding the corpus again" in err, err
    for npy in damaged:
        assert f"damaged: {npy}" in err, err
    _assert_identical(world, out)


@pytest.mark.parametrize("name", ["test_queries.jsonl", "test_corpus.npy"])
def test_damaged_world_file_is_regenerated(world, capsys, name):
    path = Path(world["env"]["CIR_DEMO_CACHE"]) / "world" / "tiny-seed0" / name
    _truncate(path, 100)
    from cir_demo.world import loader

    loader._WORLDS.clear()  # as a new process would start
    out = world["root"] / "runs" / f"after-world-{name}"
    rc, err = _eval(out, capsys)
    assert rc == 0 and f"damaged: {path}" in err and "regenerating" in err, err
    _assert_identical(world, out)


@pytest.mark.parametrize("fault", ["garbage", "blocked folder"])
def test_score_cache_fault_degrades_with_one_warning(world, capsys, fault):
    rerank_dir = Path(world["env"]["CIR_DEMO_CACHE"]) / "rerank"
    if fault == "garbage":
        for db in rerank_dir.glob("*.sqlite"):
            db.write_bytes(b"not a database" * 300)
    else:
        shutil.rmtree(rerank_dir)
        rerank_dir.write_text("a file where the folder should be (as if the cache were read-only)")
    out = world["root"] / "runs" / f"after-score-cache-{fault.replace(' ', '-')}"
    rc, err = _eval(out, capsys)
    assert rc == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: reranker score cache")]
    assert len(warnings) == 1, err
    assert ("moved it aside" if fault == "garbage" else "in memory") in warnings[0]
    _assert_identical(world, out)
    if fault != "garbage":
        rerank_dir.unlink()


def test_damaged_weights_stop_before_any_work(world, capsys, tmp_path, monkeypatch):
    from cir_demo import paths

    assets = tmp_path / "assets"
    shutil.copytree(paths.assets_dir(), assets)
    _truncate(assets / "world-clip" / "world_clip.safetensors", 1000)
    monkeypatch.setattr(paths, "assets_dir", lambda: assets)
    out = world["root"] / "runs" / "never"
    rc, err = _eval(out, capsys)
    assert rc == 2 and not out.exists()
    assert "damaged: assets/world-clip/world_clip.safetensors" in err and "git checkout assets/world-clip/" in err
    assert "Traceback" not in err


def _spawn(argv: list[str], env: dict) -> subprocess.Popen:
    # one torch thread, as in this process: the same float results
    env = {**os.environ, **env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "cir_demo", *argv], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _kill_when(proc: subprocess.Popen, marker: str, timeout: float = 120) -> str:
    """SIGKILL `proc` as soon as its output shows `marker` (progress bars included); returns what it printed."""
    seen = b""
    deadline = time.monotonic() + timeout
    while marker.encode() not in seen and time.monotonic() < deadline:
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    return seen.decode("utf-8", "replace")


def test_killed_eval_lists_nothing_and_rerun_is_identical(world, capsys):
    out = world["root"] / "runs" / "killed"
    printed = _kill_when(_spawn(["eval", *EVAL, "--out", str(out)], world["env"]), "retrieve")
    assert "run directory" in printed and "wrote" not in printed, printed
    assert not out.exists()
    from cir_demo.harness.staging import PARTIAL

    assert all(d.name == PARTIAL or (d / "metrics.csv").is_file() for d in (world["root"] / "runs").iterdir())
    rc, err = _eval(out, capsys)
    assert rc == 0, err
    _assert_identical(world, out)
    # the killed run's staging folder is kept (its name can be forged, so no name makes a folder removable)
    left = [d.name for d in (world["root"] / "runs" / PARTIAL).iterdir()]
    assert left and all(name.endswith("-killed") or name == "killed.lock" for name in left), left


def test_wrote_is_said_only_once_the_run_is_in_place(world, capsys, monkeypatch):
    """Issue 41, case 5: a run whose final move failed (another run took its folder meanwhile) said
    "wrote N files" first, then exited 2 and its run was gone."""
    from cir_demo.utils import owned_folder

    def taken(step):
        if step == "in":
            raise owned_folder.FolderInTheWay("taken by another run meanwhile")

    monkeypatch.setattr(owned_folder, "kill_point", taken)
    out = world["root"] / "runs" / "taken"
    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    capsys.readouterr()
    rc = eval_cli.run(p.parse_args([*EVAL, "--out", str(out)]))
    printed = capsys.readouterr()
    assert rc == 2 and "taken by another run meanwhile" in printed.err, printed.err
    assert "run directory" in printed.out and "wrote" not in printed.out, printed.out
    assert not out.exists()


def test_killed_index_build_leaves_old_index_serving(world, capsys):
    before = {p.name: p.read_bytes() for p in world["index"].iterdir()}
    # so the rebuild has to encode (slowly, 2 images a batch) and can be killed midway; put back after the
    # kill, so that the rerun below encodes no corpus image again (its outputs are what it checks)
    embeddings = Path(world["env"]["CIR_DEMO_CACHE"]) / "embeddings"
    embeddings.rename(world["root"] / "embeddings-aside")
    proc = _spawn(
        [
            "index",
            "build",
            "--benchmark",
            "world",
            "--world-size",
            "tiny",
            "--retriever",
            RETRIEVER,
            "--force",
            "--batch-size",
            "2",
            "--device",
            "cpu",
        ],
        world["env"],
    )
    printed = _kill_when(proc, "img")
    assert "Traceback" not in printed
    shutil.rmtree(embeddings, ignore_errors=True)
    (world["root"] / "embeddings-aside").rename(embeddings)
    assert {p.name: p.read_bytes() for p in world["index"].iterdir()} == before
    rc, out = _status(capsys, "--verify")
    assert rc == 0 and out.startswith("fresh"), out
    run = world["root"] / "runs" / "after-killed-build"
    rc, err = _eval(run, capsys)
    assert rc == 0, err
    _assert_identical(world, run)


@pytest.mark.parametrize("fault", ["garbage", "blocked folder"])
def test_thumbnail_and_pixel_caches_degrade_to_memory(tmp_path, fault):
    from PIL import Image

    from cir_demo.explorer.images import PixelCachedStore, ThumbnailStore, usable_blob_db

    if fault == "garbage":
        db = tmp_path / "thumbs.sqlite"
        db.write_bytes(b"not a database" * 300)
    else:
        (tmp_path / "app").write_text("a file where the cache folder should be")
        db = tmp_path / "app" / "thumbs.sqlite"
    store = ThumbnailStore(lambda i: Image.new("RGB", (8, 8), (200, 10, 10)), db, size=8)
    assert store.warning and ("moved it aside" if fault == "garbage" else "working in memory") in store.warning
    uri = store.get("w-te-000001")
    assert uri.startswith("data:image/jpeg;base64,") and store.get("w-te-000001") == uri
    path, warning = usable_blob_db(tmp_path / "app" / "pixels.sqlite" if fault != "garbage" else db, "pixel cache")
    if fault == "garbage":  # already replaced by a fresh file above
        assert path == db and warning is None
        assert isinstance(PixelCachedStore(object(), path), PixelCachedStore)
    else:
        assert path is None and "working in memory" in warning
