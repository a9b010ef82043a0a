"""Selection never sees test: a tiny training of each world model on the tiny world, with every file
the process opens and every rename recorded (a Python audit hook), reads no file of the world's test
split nor a cache made from one, and calls no test-split accessor. Loading the test benchmark does
show up in the same audit, so a leak would not go unnoticed."""
from __future__ import annotations

from pathlib import Path

import pytest

from training_audit import is_test_split, recorded


@pytest.fixture(scope="module", autouse=True)
def _threads(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def world():
    from cir_demo.world.loader import open_world

    return open_world(size="tiny", seed=0, progress=False)  # generated (if missing) before anything is recorded


def test_the_audit_sees_test_split_reads(world, tmp_path):
    from cir_demo.world.loader import load_world

    _, events = recorded(lambda: load_world(size="tiny", seed=0, progress=False))
    opened = {Path(p).name for kind, p in events if kind == "open" and is_test_split(p)}
    assert {"test_intents.jsonl", "test_queries.jsonl"} <= opened
    assert not is_test_split(str(world.root / "train_intents.jsonl"))


def test_training_reads_no_test_file_and_calls_no_test_accessor(audited_training):
    """Each world model trained for 2 steps with held-out evaluation off (the flag only adds the
    evaluation after the weights are saved; conftest.py's `audited_training`, the run whose models
    test_training_world.py checks): no test file opened, no test accessor called (each refuses), the
    world's test scene tables never loaded."""
    for name, events in audited_training["events"].items():
        folder = audited_training["folders"][name]
        assert [p for kind, p in events if kind == "open" and is_test_split(p)] == [], name
        assert any(kind == "rename" and Path(p).parent == folder for kind, p in events), name  # it wrote
    assert list(audited_training["events"]) == ["clip", "cir", "judge"]
    assert audited_training["test_tables_unread"]  # the world's test tables never loaded
