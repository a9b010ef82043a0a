"""Selection never sees test: a tiny training of each world model on the tiny world, with every file
the process opens and every rename recorded (a Python audit hook), reads no file of the world's test
split nor a cache made from one, and calls no test-split accessor. Loading the test benchmark does
show up in the same audit, so a leak would not go unnoticed."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import torch

_EVENTS: list[tuple[str, str]] = []  # (event, path) while recording
_RECORDING: list[bool] = [False]


def _hook(event: str, args) -> None:
    if not _RECORDING[0]:
        return
    if event == "open" and isinstance(args[0], (str, bytes, Path)):
        _EVENTS.append(("open", str(Path(args[0] if not isinstance(args[0], bytes) else args[0].decode()))))
    elif event == "os.rename":
        _EVENTS.append(("rename", str(args[1])))


sys.addaudithook(_hook)  # hooks cannot be removed; this one only records while a test asks it to


def is_test_split(path: str) -> bool:
    """A file of the world's test splits (test_intents.jsonl, compositional_intents.jsonl, ...) or a cache made
    from one (pixel caches test-corpus-*.npy, test-refs-*.npy, embeddings of them)."""
    p = Path(path)
    # the suite's own test_*.py sources are read by linecache when a warning names a line: not world data
    return p.name.startswith(("test_", "test-", "compositional_")) and p.suffix not in (".py", ".pyc")


def recorded(fn):
    _EVENTS.clear()
    _RECORDING[0] = True
    try:
        fn()
    finally:
        _RECORDING[0] = False
    return list(_EVENTS)


@pytest.fixture(scope="module", autouse=True)
def _threads(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def world():
    from cir_demo.world.loader import open_world

    return open_world(size="tiny", seed=0, progress=False)  # generated (if missing) before anything is recorded


def test_the_audit_sees_test_split_reads(world, tmp_path):
    from cir_demo.world.loader import load_world

    events = recorded(lambda: load_world(size="tiny", seed=0, progress=False))
    opened = {Path(p).name for kind, p in events if kind == "open" and is_test_split(p)}
    assert {"test_intents.jsonl", "test_queries.jsonl"} <= opened
    assert not is_test_split(str(world.root / "train_intents.jsonl"))


def test_training_reads_no_test_file_and_calls_no_test_accessor(world, tmp_path, monkeypatch):
    """Each world model trained for 2 steps with held-out evaluation off (the flag only adds the
    evaluation after the weights are saved): no test file opened, no test accessor called, the
    world's test scene tables never loaded."""
    from cir_demo.training import evaluate as ev
    from cir_demo.training.pipeline import train_cir_command, train_clip_command, train_verifier_command
    from cir_demo.world import loader

    def refuse(*a, **k):
        raise AssertionError("training called a test-split accessor")

    for name in ("load_world", "load_test_captions"):
        monkeypatch.setattr(loader, name, refuse)
    monkeypatch.setattr(ev, "load_test_data", refuse)
    loader._WORLDS.clear()  # a fresh WorldData: its test tables unread
    clip, cir, judge = (tmp_path / "clip", tmp_path / "cir", tmp_path / "judge")
    for folder in (clip, cir, judge):
        folder.mkdir()
    steps = [
        lambda: train_clip_command("tiny", 0, 0, None, 2, clip, evaluate=False, progress=False,
                                   model_name="world-clip-split-test"),
        lambda: train_cir_command("tiny", 0, 0, None, 2, cir, clip, str(clip), evaluate=False, progress=False),
        lambda: train_verifier_command("tiny", 0, 0, None, 2, judge, clip, str(clip), evaluate=False, progress=False,
                                       overrides={"attr_steps": 2}),
    ]
    for folder, step in zip((clip, cir, judge), steps):
        events = recorded(step)
        assert [p for kind, p in events if kind == "open" and is_test_split(p)] == [], folder.name
        assert any(kind == "rename" and Path(p).parent == folder for kind, p in events), folder.name  # it wrote
    fresh = loader.open_world(size="tiny", seed=0, progress=False)
    assert fresh._test_corpus is None and fresh._test_refs is None  # the world's test tables never loaded
