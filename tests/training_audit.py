"""The audited tiny training of each world model (conftest.py's `audited_training`): every file-system
access of the process recorded while world-CLIP, world-CIR and the world judge train for 2 steps, with
the test-split accessors refusing. test_training_split.py checks what was recorded; test_training_world.py
checks the world-CIR and judge this same training wrote, so each model trains once per suite for both.

What is recorded: Python's audit events for opening a file (`open`, numpy's loads and memmaps
included), listing a folder (`os.listdir`, `os.scandir`), connecting to SQLite (`sqlite3.connect`),
copying, renaming and removing; and, for the reads no audit event reports, `os.stat` (`Path.exists`,
`is_file`), faiss's `read_index` and safetensors' `load_file`, wrapped while recording. (The world's
integrity check sizes the files of its own test part: that stat alone is let through.) The same is
recorded in the processes the recorded code starts: a forked worker inherits the hook and the wrappers
and appends what it sees to a log file the recording reads back; a new Python process (a subprocess,
a spawned multiprocessing worker) installs the hook from the `sitecustomize` module this recording puts
first on PYTHONPATH, and logs its audit events there too.

What it cannot see: a read that raises no Python audit event and goes through no wrapped entry point:
native readers that open files themselves (pyarrow's file system and datasets, faiss or safetensors
called otherwise than through the wrapped functions, torch's C++ loaders given a file name, a memory
map's pages read after the mapping was opened: the opening is seen); a new Python process's `os.stat`
(only its audit events); a Python started with -S or -I (no sitecustomize), or a child that is not
Python at all. Training reads none of these today (the world's tables are JSON lines and .npy files).

What counts as test data is decided by where it lies, never by its name (`TestLocations`): the files
the world's test part is made of (the world's own part table, `disk.PARTS["test"]`), every other file
in the world's folder that is not a declared train file (dot-prefixed temporary copies included), the
folders that hold what is computed from the benchmarks (embedding caches, score caches, the app's
caches, stored benchmarks, indexes, runs, the prebuilt files), and the files the test-side accessor
(`training.evaluate.load_test_data`, both test splits) writes, found by running it under the same
recording (its pixel caches)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

_EVENTS: list[tuple[str, str]] = []  # (event, path) while recording
_RECORDING: list[bool] = [False]
_OWNER = [os.getpid()]  # the recording process; a forked worker's list dies with it, so it logs instead
_LOG: list[str | None] = [None]  # the file the processes the recorded code starts append their events to
_LOG_ENV = "CIR_DEMO_AUDIT_LOG"
_IN_LOG = [False]  # writing the log raises an `open` event itself
# installed in every new Python process started while recording (its folder first on PYTHONPATH)
SITECUSTOMIZE = """
import os, sys
_log = os.environ.get("%s")
if _log:
    _busy = [False]
    _paths = %r
    def _hook(event, args):
        if _busy[0] or not args or not (event in _paths or event == "os.rename"):
            return
        value = args[1] if event == "os.rename" else args[_paths[event]]
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if not isinstance(value, (str, os.PathLike)):
            return
        _busy[0] = True
        try:
            fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            kind = "rename" if event == "os.rename" else event
            os.write(fd, ("%%s\\t%%s\\n" %% (kind, os.path.abspath(os.fspath(value)))).encode())
            os.close(fd)
        finally:
            _busy[0] = False
    sys.addaudithook(_hook)
"""
# audit event -> the position of its path argument
_PATH_EVENTS = {
    "open": 0,
    "os.listdir": 0,
    "os.scandir": 0,
    "sqlite3.connect": 0,
    "shutil.copyfile": 0,
    "os.remove": 0,
    "os.truncate": 0,
}


def _path(value) -> str | None:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, (str, os.PathLike)):
        return os.path.abspath(os.fspath(value))
    return None  # a file descriptor, or a folder listing of "."


def _note(kind: str, path: str) -> None:
    """Record one access: in the recording process's list, or, in a forked worker, in the log."""
    if os.getpid() == _OWNER[0]:
        _EVENTS.append((kind, path))
        return
    if _IN_LOG[0] or _LOG[0] is None:
        return
    _IN_LOG[0] = True
    try:
        fd = os.open(_LOG[0], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, f"{kind}\t{path}\n".encode())
        os.close(fd)
    finally:
        _IN_LOG[0] = False


def _hook(event: str, args) -> None:
    if not _RECORDING[0] or _IN_LOG[0]:
        return
    if event == "os.rename":
        _note("rename", _path(args[1]) or "")
        _note("rename-from", _path(args[0]) or "")
    elif event in _PATH_EVENTS and args:
        path = _path(args[_PATH_EVENTS[event]])
        if path is not None:
            _note(event, path)


sys.addaudithook(_hook)  # hooks cannot be removed; this one only records while a caller asks it to


def _recording(kind: str, fn):
    def wrapped(path, *a, **k):
        p = _path(path)
        if _RECORDING[0] and p is not None and not _IN_LOG[0]:
            _note(kind, p)
        return fn(path, *a, **k)

    return wrapped


def recorded(fn):
    """(what `fn()` returned, the (event, absolute path) accesses recorded while it ran, by it and by
    the processes it started)."""
    import tempfile

    _EVENTS.clear()
    with tempfile.TemporaryDirectory(prefix="cir-demo-audit-") as tmp, pytest.MonkeyPatch.context() as mp:
        (Path(tmp) / "sitecustomize.py").write_text(SITECUSTOMIZE % (_LOG_ENV, _PATH_EVENTS))
        log = Path(tmp) / "children.log"
        _LOG[0], _OWNER[0] = str(log), os.getpid()
        mp.setenv(_LOG_ENV, str(log))
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (tmp, os.environ.get("PYTHONPATH")) if p))
        out = _recording_in(mp, fn)
        if log.is_file():
            _EVENTS.extend(tuple(line.split("\t", 1)) for line in log.read_text().splitlines() if "\t" in line)
        _LOG[0] = None
    return out, list(_EVENTS)


def _recording_in(mp, fn):
    """`fn()` with the wrappers of the reads no audit event reports in place, recording."""
    mp.setattr(os, "stat", _recording("os.stat", os.stat))
    try:
        import faiss

        mp.setattr(faiss, "read_index", _recording("faiss.read_index", faiss.read_index))
    except ImportError:
        pass
    import safetensors.torch

    mp.setattr(safetensors.torch, "load_file", _recording("safetensors.load_file", safetensors.torch.load_file))
    _RECORDING[0] = True
    try:
        return fn()
    finally:
        _RECORDING[0] = False


@dataclass
class TestLocations:
    """Where test data and what is computed from it lie, for one world folder and data folder."""

    world_root: Path
    test_files: set = field(default_factory=set)  # the world's test part and the test side's own caches
    train_files: set = field(default_factory=set)  # what training may read in the world's folder
    derived_folders: list = field(default_factory=list)

    __test__ = False  # not a pytest test class

    world_part_files: set = field(default_factory=set)  # the files of the world's test part

    def holds(self, path: str) -> bool:
        # On the paths' strings (absolute, normalised by Path): a folder holds a path that starts with the
        # folder and a separator. A training records thousands of accesses, and `Path.parents` compares
        # part by part.
        p = Path(path)
        if p in self.test_files:
            return True
        s = str(p)
        if any(s == str(f) or s.startswith(os.path.join(str(f), "")) for f in self.derived_folders):
            return True
        return s.startswith(os.path.join(str(self.world_root), "")) and p not in self.train_files

    def violations(self, events) -> list[tuple[str, str]]:
        """The recorded accesses to test data. A stat of a file of the world's test part is its size: the
        world's integrity check sizes every file of the folder it opens, whose content it never reads;
        any other access there, and a stat anywhere else test data lies, counts."""
        return [
            (kind, path)
            for kind, path in events
            if self.holds(path) and not (kind == "os.stat" and Path(path) in self.world_part_files)
        ]


def locations_of(world_root: Path, test_side_events=()) -> TestLocations:
    """`TestLocations` of the world at `world_root` under the current data folder; `test_side_events`:
    what running the test-side accessor recorded (the files it wrote under the cache folder are test data)."""
    from cir_demo.paths import cache_dir, indexes_dir, prebuilt_root, runs_dir
    from cir_demo.world.disk import PARTS

    root = Path(os.path.abspath(world_root))
    manifest, full = PARTS["full"]
    test_manifest, test = PARTS["test"]
    cache = Path(os.path.abspath(cache_dir()))
    written = {Path(p) for kind, p in test_side_events if kind in ("rename", "rename-from")}
    opened_in_cache = {
        Path(p)
        for kind, p in test_side_events
        if kind == "open" and cache in Path(p).parents and root not in Path(p).parents
    }
    derived = [cache / name for name in ("embeddings", "rerank", "app", "benchmarks", "text_proxy")]
    derived += [Path(os.path.abspath(p)) for p in (indexes_dir(), runs_dir(), prebuilt_root())]
    if os.environ.get("CIR_DEMO_BENCHMARK_CACHE"):
        derived.append(Path(os.path.abspath(os.environ["CIR_DEMO_BENCHMARK_CACHE"])))
    return TestLocations(
        world_root=root,
        test_files={root / n for n in (test_manifest, *test)} | written | opened_in_cache,
        world_part_files={root / n for n in test},
        train_files={root / manifest} | {root / n for n in full if n not in test},
        derived_folders=derived,
    )


def audited_training(root: Path) -> dict:
    """Each world model trained for 2 steps into `root`/clip, cir, judge, with held-out evaluation off (the
    flag only adds the evaluation after the weights are saved) and the test-split accessors refusing:
    {"events": {folder name: events}, "manifests": {folder name: manifest}, "folders": {...},
    "locations": the `TestLocations` (the test side's pixel caches written first, as an evaluation would),
    "test_tables_unread": whether the world's test scene tables were still unread afterwards}."""
    from cir_demo.training import evaluate as ev
    from cir_demo.training.pipeline import train_cir_command, train_clip_command, train_verifier_command
    from cir_demo.utils.threads import torch_threads
    from cir_demo.world import loader

    def refuse(*a, **k):
        raise AssertionError("training called a test-split accessor")

    world = loader.open_world(size="tiny", seed=0, progress=False, part="full")  # generated before anything is recorded
    _, test_side = recorded(
        lambda: [ev.load_test_data("tiny", 0, progress=False, split=s) for s in ("test", "compositional")]
    )
    locations = locations_of(world.root, test_side)
    clip, cir, judge = (root / "clip", root / "cir", root / "judge")
    for folder in (clip, cir, judge):
        folder.mkdir(parents=True)
    steps = {
        "clip": lambda: train_clip_command(
            "tiny", 0, 0, None, 2, clip, evaluate=False, progress=False, model_name="world-clip-split-test"
        ),
        "cir": lambda: train_cir_command("tiny", 0, 0, 1, 2, cir, clip, str(clip), evaluate=False, progress=False),
        "judge": lambda: train_verifier_command(
            "tiny",
            0,
            0,
            1,
            2,
            judge,
            clip,
            str(clip),
            evaluate=False,
            progress=False,
            overrides={"choice_cir": str(cir)},
        ),
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
    return {
        "events": events,
        "manifests": manifests,
        "folders": {"clip": clip, "cir": cir, "judge": judge},
        "locations": locations,
        "test_tables_unread": unread,
    }
