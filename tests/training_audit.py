"""The audited tiny training of each world model (conftest.py's `audited_training`): every file the
process opens and every rename recorded (a Python audit hook) while world-CLIP, world-CIR and the world
judge train for 2 steps, with the test-split accessors refusing. test_training_split.py checks what
was recorded; test_training_world.py checks the world-CIR and judge this same training wrote, so each
model trains once per suite for both."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_EVENTS: list[tuple[str, str]] = []  # (event, path) while recording
_RECORDING: list[bool] = [False]


def _hook(event: str, args) -> None:
    if not _RECORDING[0]:
        return
    if event == "open" and isinstance(args[0], (str, bytes, Path)):
        _EVENTS.append(("open", str(Path(args[0] if not isinstance(args[0], bytes) else args[0].decode()))))
    elif event == "os.rename":
        _EVENTS.append(("rename", str(args[1])))


sys.addaudithook(_hook)  # hooks cannot be removed; this one only records while a caller asks it to


def is_test_split(path: str) -> bool:
    """A file of the world's test splits (test_intents.jsonl, compositional_intents.jsonl, ...) or a cache made
    from one (pixel caches test-corpus-*.npy, test-refs-*.npy, embeddings of them)."""
    p = Path(path)
    # the suite's own test_*.py sources are read by linecache when a warning names a line: not world data
    return p.name.startswith(("test_", "test-", "compositional_")) and p.suffix not in (".py", ".pyc")


def recorded(fn):
    """(what `fn()` returned, the events recorded while it ran)."""
    _EVENTS.clear()
    _RECORDING[0] = True
    try:
        out = fn()
    finally:
        _RECORDING[0] = False
    return out, list(_EVENTS)


def audited_training(root: Path) -> dict:
    """Each world model trained for 2 steps into `root`/clip, cir, judge, with held-out evaluation off (the
    flag only adds the evaluation after the weights are saved) and the test-split accessors refusing:
    {"events": {folder name: events}, "manifests": {folder name: manifest}, "folders": {...},
    "test_tables_unread": whether the world's test scene tables were still unread afterwards}."""
    from cir_demo.training import evaluate as ev
    from cir_demo.training.pipeline import train_cir_command, train_clip_command, train_verifier_command
    from cir_demo.utils.threads import torch_threads
    from cir_demo.world import loader

    def refuse(*a, **k):
        raise AssertionError("training called a test-split accessor")

    loader.open_world(size="tiny", seed=0, progress=False)  # generated (if missing) before anything is recorded
    clip, cir, judge = (root / "clip", root / "cir", root / "judge")
    for folder in (clip, cir, judge):
        folder.mkdir(parents=True)
    steps = {
        "clip": lambda: train_clip_command("tiny", 0, 0, None, 2, clip, evaluate=False, progress=False,
                                           model_name="world-clip-split-test"),
        "cir": lambda: train_cir_command("tiny", 0, 0, 1, 2, cir, clip, str(clip), evaluate=False, progress=False),
        "judge": lambda: train_verifier_command("tiny", 0, 0, 1, 2, judge, clip, str(clip), evaluate=False,
                                                progress=False),
    }
    events, manifests = {}, {}
    with pytest.MonkeyPatch.context() as mp, torch_threads(1):
        for name in ("load_world", "load_test_captions"):
            mp.setattr(loader, name, refuse)
        mp.setattr(ev, "load_test_data", refuse)
        loader._WORLDS.clear()  # a fresh WorldData: its test tables unread
        for name, step in steps.items():
            manifests[name], events[name] = recorded(step)
        fresh = loader.open_world(size="tiny", seed=0, progress=False)
        unread = fresh._test_corpus is None and fresh._test_refs is None
    return {"events": events, "manifests": manifests, "folders": {"clip": clip, "cir": cir, "judge": judge},
            "test_tables_unread": unread}
