"""Selection never sees test: a tiny training of each world model on the tiny world, with every
file-system access of the process recorded (`tests/training_audit.py`: Python audit events for opens,
listings, SQLite, copies and renames, plus os.stat, faiss and safetensors reads), touches nothing where
the world's test data or what is computed from it lies (decided by place, not by name), and calls no
test-split accessor. Loading the test benchmark, and each kind of access on its own, do show up in the
same audit, so a leak would not go unnoticed."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from training_audit import locations_of, recorded


@pytest.fixture(scope="module", autouse=True)
def _threads(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def world():
    from cir_demo.world.loader import open_world

    return open_world(size="tiny", seed=0, progress=False, part="full")  # generated before anything is recorded


def _in_forked_worker(fn) -> None:
    """`fn()` in a forked child process (as a fork-based worker pool runs it), waited for."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            fn()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def test_the_audit_sees_test_split_reads(world):
    from cir_demo.world.loader import load_world

    _, events = recorded(lambda: load_world(size="tiny", seed=0, progress=False))
    seen = {Path(p).name for _, p in locations_of(world.root).violations(events)}
    assert {"test_intents.jsonl", "test_queries.jsonl"} <= seen
    assert not locations_of(world.root).holds(str(world.root / "train_intents.jsonl"))


def test_the_audit_sees_every_kind_of_access_wherever_the_name(world, tmp_path):
    """Each access a name-based check missed: a dot-prefixed copy of a test file, an embedding cache
    read as a numpy memmap, a score cache over SQLite, a FAISS index, a stat of a test file; and reads
    by a forked worker and by a new Python process the recorded code starts."""
    import faiss

    from cir_demo.paths import cache_dir, indexes_dir

    from cir_demo.training.evaluate import load_test_data

    _, test_side = recorded(lambda: load_test_data("tiny", 0, progress=False))
    cache = cache_dir().resolve()
    pixels = next(
        Path(p)
        for kind, p in test_side  # the test corpus's pixel cache, written or read
        if kind in ("rename", "open") and cache in Path(p).parents and world.root.resolve() not in Path(p).parents
    )
    assert locations_of(world.root, test_side).holds(str(pixels))
    hidden = world.root / ".t-0001.tmp"
    shutil.copyfile(world.root / "test_intents.jsonl", hidden)
    embeddings = cache_dir() / "embeddings" / "world-tiny-s0" / "0123abcd.npy"
    embeddings.parent.mkdir(parents=True, exist_ok=True)
    np.save(embeddings, np.zeros((2, 4), np.float32))
    scores = cache_dir() / "rerank" / "world-0123.sqlite"
    scores.parent.mkdir(parents=True, exist_ok=True)
    index = indexes_dir() / "world-tiny-s0" / "some-retriever" / "index.faiss"
    index.parent.mkdir(parents=True, exist_ok=True)
    faiss.write_index(faiss.IndexFlatIP(4), str(index))
    reads = {
        "open": lambda: hidden.read_bytes(),
        "open (memmap)": lambda: np.load(embeddings, mmap_mode="r"),
        "sqlite3.connect": lambda: sqlite3.connect(scores).close(),
        "faiss.read_index": lambda: faiss.read_index(str(index)),
        "os.stat": lambda: embeddings.exists(),
        "os.stat (a test-side pixel cache)": lambda: pixels.is_file(),
        "open in a forked worker": lambda: _in_forked_worker(hidden.read_bytes),
        "open in a new Python process": lambda: subprocess.run(
            [sys.executable, "-c", f"open({str(hidden)!r}, 'rb').read()"], check=True, timeout=60
        ),
        "a listing in a new Python process": lambda: subprocess.run(
            [sys.executable, "-c", f"import os; os.listdir({str(embeddings.parent)!r})"], check=True, timeout=60
        ),
    }
    try:
        for what, read in reads.items():
            _, events = recorded(read)
            assert locations_of(world.root, test_side).violations(events), f"{what}: not seen"
        _, events = recorded(lambda: (world.root / "train_intents.jsonl").read_bytes())
        assert locations_of(world.root).violations(events) == []  # a train file is no test data
    finally:
        hidden.unlink()
        shutil.rmtree(cache_dir() / "embeddings" / "world-tiny-s0", ignore_errors=True)
        scores.unlink(missing_ok=True)
        shutil.rmtree(index.parent, ignore_errors=True)


def test_training_touches_no_test_data_and_calls_no_test_accessor(audited_training):
    """Each world model trained for 2 steps with held-out evaluation off (the flag only adds the
    evaluation after the weights are saved; conftest.py's `audited_training`, the run whose models
    test_training_world.py checks): no access where test data or what is computed from it lies (the
    test side's pixel caches among them, written before the training), no test accessor called (each
    refuses), the world's test scene tables never loaded."""
    locations = audited_training["locations"]
    assert any("test-" in Path(p).name for p in locations.test_files if "world_models" in p.parts), (
        "the test side's pixel caches were found"
    )  # else the audit would not watch them
    for name, events in audited_training["events"].items():
        folder = audited_training["folders"][name]
        assert locations.violations(events) == [], name
        assert any(kind == "rename" and Path(p).parent == folder for kind, p in events), name  # it wrote
        assert any(kind == "os.stat" for kind, _ in events) and any(kind == "open" for kind, _ in events), name
    assert list(audited_training["events"]) == ["clip", "cir", "judge"]
    assert audited_training["test_tables_unread"]  # the world's test tables never loaded
