"""The world on disk in two parts: the test part (what the benchmark reads) written alone, byte-identical
to a whole generation's; the train split generated when a train reader asks; damage found; one writer
at a time; the app's start generating the test part in a child process."""

from __future__ import annotations

import shutil
import threading

import pytest

from cir_demo.world import disk as G
from cir_demo.world.disk import (
    MANIFEST,
    TEST_FILES,
    TEST_MANIFEST,
    TRAIN_FILES,
    generate_world,
    read_manifest,
    world_problems,
)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The tiny world generated whole, the reference for every byte below."""
    return generate_world("tiny", 0, tmp_path_factory.mktemp("whole") / "w", progress=False)


@pytest.fixture(scope="module")
def generated_test_part(tmp_path_factory):
    """The tiny world's test part generated alone, once for the module (read-only: `test_part` copies it)."""
    return generate_world("tiny", 0, tmp_path_factory.mktemp("test_part") / "w", progress=False, part="test")


@pytest.fixture()
def test_part(generated_test_part, tmp_path):
    """This test's own copy of `generated_test_part`: tests damage it or add the train split to it."""
    shutil.copytree(generated_test_part, tmp_path / "w")
    return tmp_path / "w"


def _bytes(root, names):
    return {name: (root / name).read_bytes() for name in names}


def test_the_test_part_alone_is_the_whole_worlds_test_files(whole, test_part):
    assert _bytes(test_part, TEST_FILES + (TEST_MANIFEST,)) == _bytes(whole, TEST_FILES + (TEST_MANIFEST,))
    assert not any((test_part / name).exists() for name in TRAIN_FILES + (MANIFEST,))
    assert world_problems(test_part, "tiny", 0, part="test") == []
    assert world_problems(test_part, "tiny", 0)[0].startswith("missing")  # the whole world is not there
    full, test = read_manifest(whole), read_manifest(whole, TEST_MANIFEST)
    assert test == G.test_manifest_of(full) and set(test["files"]) == set(TEST_FILES)
    assert test["checksum"] != full["checksum"] and test["stats"] == full["stats"]
    assert not any(key.startswith("train_") for key in test["counts"])


def test_a_train_reader_generates_the_train_part_on_demand(whole, test_part):
    from cir_demo.world.loader import load_train, load_world, open_world

    bench = load_world(test_part, progress=False)
    assert bench.info["checksum"] == read_manifest(test_part, TEST_MANIFEST)["checksum"]  # the benchmark's key
    assert not (test_part / MANIFEST).exists()
    # a train image id read through a world opened for its test part: the train split is made first
    world = open_world(test_part, progress=False)
    assert world.scene("w-tr-000000") is not None
    assert _bytes(test_part, TRAIN_FILES + (MANIFEST,)) == _bytes(whole, TRAIN_FILES + (MANIFEST,))
    train = load_train(test_part)
    assert train.world.manifest["checksum"] == read_manifest(whole)["checksum"]  # what the world models record
    assert load_world(test_part, split="train", progress=False).info["checksum"] == read_manifest(whole)["checksum"]
    assert _bytes(test_part, TEST_FILES) == _bytes(whole, TEST_FILES)


def test_a_damaged_test_file_is_found_and_written_again(whole, test_part, capsys):
    from cir_demo.world.loader import open_world

    path = test_part / "test_queries.jsonl"
    path.write_bytes(path.read_bytes()[:-10])  # truncated
    problems = world_problems(test_part, "tiny", 0, verify=False, part="test")
    assert len(problems) == 1 and "test_queries.jsonl" in problems[0]
    open_world(test_part, progress=False)
    assert "regenerating" in capsys.readouterr().err
    assert path.read_bytes() == (whole / "test_queries.jsonl").read_bytes()
    data = bytearray(path.read_bytes())
    data[5] ^= 1  # the same size, other bytes: found when verified
    path.write_bytes(bytes(data))
    assert world_problems(test_part, "tiny", 0, verify=False, part="test") == []
    assert "test_queries.jsonl" in " ".join(world_problems(test_part, "tiny", 0, verify=True, part="test"))
    generate_world("tiny", 0, test_part, progress=False, part="test")
    assert path.read_bytes() == (whole / "test_queries.jsonl").read_bytes()


def test_a_whole_world_of_the_earlier_layout_gets_its_test_manifest_without_generating(whole, tmp_path, monkeypatch):
    root = tmp_path / "old"
    shutil.copytree(whole, root)
    (root / TEST_MANIFEST).unlink()

    def refuse(*a, **k):
        raise AssertionError("generated again")

    monkeypatch.setattr(G, "build_test_part", refuse)
    generate_world("tiny", 0, root, progress=False, part="test")
    assert (root / TEST_MANIFEST).read_bytes() == (whole / TEST_MANIFEST).read_bytes()


@pytest.mark.parametrize("part", ["test", "full"])
def test_concurrent_generations_write_once(tmp_path, monkeypatch, part):
    writes = []
    real = G.write_world

    def counting(world, out_dir):
        writes.append(type(world).__name__)
        return real(world, out_dir)

    monkeypatch.setattr(G, "write_world", counting)
    root, errors = tmp_path / "w", []

    def run():
        try:
            generate_world("tiny", 0, root, progress=False, part=part)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(writes) == 1
    assert world_problems(root, "tiny", 0, part=part) == []


def test_concurrent_processes_write_once(tmp_path):
    """Two processes started together on an empty folder: one writes, the other waits and finds it written."""
    import subprocess
    import sys

    from cir_demo.paths import REPO_ROOT

    code = (
        "import sys; from cir_demo.world.disk import generate_world; "
        "generate_world('tiny', 0, sys.argv[1], progress=True, part='test')"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path / "w")], cwd=str(REPO_ROOT), stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    logs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    assert sum("wrote " in log for log in logs) == 1, logs
    assert sum("written by another process meanwhile" in log for log in logs) == 1, logs
    assert world_problems(tmp_path / "w", "tiny", 0, part="test") == []


def test_world_on_disk_asks_for_the_part_the_split_reads(tmp_path, monkeypatch):
    from cir_demo.world.loader import world_on_disk

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    assert not world_on_disk(size="tiny", seed=0)
    generate_world("tiny", 0, progress=False, part="test")
    assert world_on_disk(size="tiny", seed=0) and world_on_disk(size="tiny", seed=0, split="compositional")
    assert not world_on_disk(size="tiny", seed=0, split="train")


def test_the_apps_start_generates_the_test_part_in_a_child_before_importing_gradio(tmp_path, monkeypatch):
    """`prepare` (what app.py runs before gradio's import) starts a child process on a first start; it
    ends with the test part written, which the loader then opens without generating; none when it is there."""
    from cir_demo.ui.startup import prepare
    from cir_demo.world.disk import world_dir

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    startup = prepare(["--world-size", "tiny", "--world-seed", "2", "--limit", "2", "--port", "0"])
    assert startup.world_child is not None
    assert startup.world_child.wait(timeout=120) == 0
    root = world_dir("tiny", 2)
    assert world_problems(root, "tiny", 2, part="test") == [] and not (root / MANIFEST).exists()
    assert prepare(["--world-size", "tiny", "--world-seed", "2", "--port", "0"]).world_child is None


def test_only_generated_data_is_made_aside(tmp_path, monkeypatch):
    from cir_demo.benchmarks.generate_aside import generate_aside

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    assert generate_aside("cirr", {"root": str(tmp_path)}) is None  # it reads its files
    assert generate_aside("world", {"root": str(tmp_path)}) is None  # a given folder is used as it is
    child = generate_aside("world", {"size": "tiny", "seed": 3})
    assert child is not None and child.wait(timeout=120) == 0
    assert generate_aside("world", {"size": "tiny", "seed": 3}) is None
