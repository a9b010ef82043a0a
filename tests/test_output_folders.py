"""Output folders that can never lose a user's file (issue 50): nothing is deleted (an earlier folder
or file is moved aside whole), nothing read from the folder is taken as an instruction, one writer
at a time, and --dry-run writes nothing.

The oracle is independent of the code under test: every regular file's bytes and every link's target
found under --out's parent before a command must still be found there afterwards (as a multiset,
wherever the file now is), and --out must be one whole write, the same files and bytes as the same
command writes into a fresh folder. Kills are real: a forked child runs the command with
CIR_DEMO_KILL_AT naming the step (owned_folder.STEPS) before which it SIGKILLs itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import threading
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cir_demo.utils.owned_folder import RUN_MANIFEST, STEPS, FolderInTheWay, staged_run_dir
from test_index_cli import env, run_cli  # noqa: F401 (the tiny model and benchmark of `index build`)


# --------------------------------------------------------------------------- the oracle
def _contents(root: Path) -> Counter:
    """Every regular file's bytes (by sha256) and every link's target under `root`, no link followed."""
    seen: Counter = Counter()
    for top, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            path = os.path.join(top, name)
            if os.path.islink(path):
                seen["link:" + os.readlink(path)] += 1
            elif os.path.isfile(path):
                seen[hashlib.sha256(Path(path).read_bytes()).hexdigest()] += 1
    return seen


def _lost(before: Counter, root: Path) -> Counter:
    return before - _contents(root)


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _user_files(parent: Path, out: Path | None) -> None:
    """The user's files: beside --out, in it (after an earlier write), and links and hard links."""
    (parent / "thesis.tex").write_text("\\documentclass{article} mine")
    (parent / "docs").mkdir(exist_ok=True)
    (parent / "docs" / "report.md").write_text("my report")
    if out is not None:
        (out / "notes.txt").write_text("my notes inside the run folder")
        os.symlink(parent / "docs", out / "my-docs")
        os.link(parent / "thesis.tex", out / "thesis-link.tex")


def _fork(run, step: str | None) -> int | str:
    """Run `run()` in a forked child that dies by SIGKILL before `step`: "killed", or its exit code."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            if step:
                os.environ["CIR_DEMO_KILL_AT"] = step
            code = run()
        finally:
            os._exit(code if isinstance(code, int) else 1)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "killed" if os.WTERMSIG(status) == signal.SIGKILL else f"signal {os.WTERMSIG(status)}"
    return os.WEXITSTATUS(status)


def _main(argv: list[str]) -> int:
    from cir_demo.cli import main

    return main(argv)


# --------------------------------------------------------------------------- the writing commands
@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory):
    """A cache folder holding the tiny world's test part (installed once for the module)."""
    from cir_demo.world import load_world

    cache = tmp_path_factory.mktemp("tiny_cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_CACHE", str(cache))
    load_world(size="tiny", progress=False)
    mp.undo()
    return cache


@pytest.fixture()
def dirs(tmp_path, monkeypatch, tiny_cache):
    cache = shutil.copytree(tiny_cache, tmp_path / "cache")
    for var, path in (("CIR_DEMO_CACHE", cache), ("CIR_DEMO_RUNS", tmp_path / "runs")):
        monkeypatch.setenv(var, str(path))
    monkeypatch.delenv("CIR_DEMO_KILL_AT", raising=False)
    return tmp_path


def _results_file(path: Path) -> Path:
    """A results file of the tiny world: every query ranked by the corpus's order (what a results file
    holds does not matter here, only the folder written from it)."""
    from cir_demo.results import write_results
    from cir_demo.world import load_world

    bench = load_world(size="tiny", progress=False)
    ids = sorted(bench.corpus_set)
    write_results(path, bench, {q.query_id: ids[:10] for q in bench.queries}, fmt="run-dict")
    return path


def _circo(root: Path) -> tuple[Path, Path]:
    from test_circo_submission import circo_folder

    folder = root / "CIRCO" if (root / "CIRCO").is_dir() else circo_folder(root / "CIRCO")
    (root / "mine.json").write_text(json.dumps({str(i): [str(1059 - j) for j in range(55)] for i in range(3)}))
    return folder, root / "mine.json"


def _record_seeds(out: Path) -> None:
    from test_seed_record import SEEDS, _made_by, _seed_folder

    for s, v in SEEDS.items():
        _seed_folder(out, s, *v)
    (out / "record.json").write_text(json.dumps({"made_by": _made_by(out, SEEDS)}))


def _argv(command: str, root: Path, out: Path) -> list[str]:
    if command == "world render":
        return ["world", "render", "w-te-000001", "w-te-000002", "--size", "tiny", "--pixels", "32", "--out", str(out)]
    if command == "world generate":
        return ["world", "generate", "--size", "tiny", "--out", str(out), "--force"]
    if command == "eval":
        results = root / "model_a.json"
        if not results.exists():
            _results_file(results)
        args = ["--world-size", "tiny", "--results-json", str(results), "--n-boot", "0", "--no-plots"]
        return ["eval", *args, "--out", str(out), "--overwrite"]
    if command == "submission":
        folder, mine = _circo(root)
        circo = ["--benchmark", "circo", "--annotations", str(folder), "--split", "test"]
        return ["submission", *circo, "--corpus-ids", str(folder / "corpus.txt"), "--results-json", str(mine)]
    assert command == "record"
    return ["record", "--seeds", "7", "11", "--out", str(out)]


WRITERS = {  # command: (the --out folder's name, the flag that replaces an earlier write)
    "world render": ("out", ["--overwrite"]),
    "world generate": ("out", []),  # --force is in its argv: the world is written again
    "eval": ("out", []),
    "submission": ("sub", ["--out", "{out}", "--overwrite"]),
    "record": ("rec", []),
}


def _command(command: str, root: Path) -> tuple[list[str], Path]:
    name, extra = WRITERS[command]
    out = root / name
    return _argv(command, root, out) + [e.format(out=out) for e in extra], out


def _whole(command: str, out: Path, reference: dict[str, bytes]) -> None:
    """`out` is one whole write: the reference's files, each with the bytes its record says."""
    got = _tree(out)
    if command in ("submission", "record"):  # files written into a folder that is the user's too
        assert {k: got.get(k) for k in reference} == reference
        return
    manifest = json.loads(got.pop(RUN_MANIFEST))["files"]
    assert set(got) == set(manifest) == set(reference) - {RUN_MANIFEST}
    assert all(hashlib.sha256(got[k]).hexdigest() == manifest[k]["sha256"] for k in got)
    if command != "eval":  # eval's run_info.json holds its timings; the rest are the same bytes every time
        assert got == {k: v for k, v in reference.items() if k != RUN_MANIFEST}


@pytest.mark.parametrize("command", list(WRITERS))
def test_a_kill_before_every_step_then_the_same_command_again_loses_nothing(dirs, command, capsys):
    """Each writing command, run over an earlier write with the user's files in and beside it, killed
    before each file-system change, then run again: every user byte is still under the parent, and
    --out is one whole write."""
    template = dirs / "template"
    template.mkdir()
    if command == "record":
        _record_seeds(template / "rec")
    argv, out = _command(command, template)
    assert _main(argv) == 0, capsys.readouterr().err  # the earlier write (also what a whole one holds)
    reference = {k: v for k, v in _tree(out).items() if not k.startswith(("seed-", "record.json.replaced"))}
    _user_files(template, None if command == "record" else out)  # a record's folder is refused with others' files
    # world generate: the step between its two renames (each run generates a world; render and eval,
    # which share its folder code, are killed at every step)
    steps = STEPS if command != "world generate" else ("in",)
    for step in steps:
        root = dirs / f"kill-{step}"
        shutil.copytree(template, root, symlinks=True)
        before = _contents(root)
        argv, out = _command(command, root)
        killed = _fork(lambda argv=argv: _main(argv), step)
        assert killed in ("killed", 0), step  # 0: the command has no such step (no .partial to make, ...)
        assert not _lost(before, root), (step, _lost(before, root))
        if killed == "killed":
            assert _main(argv) == 0, (step, capsys.readouterr().err)
        assert not _lost(before, root), (step, _lost(before, root))
        _whole(command, out, reference)
    capsys.readouterr()


def test_index_build_force_into_a_users_folder_moves_the_earlier_index_aside(env, tmp_path):
    """`index build --force --out-dir`: killed before the set-aside or the rename in, then again."""
    argv = ["build", "--benchmark", "tinybench", "--retriever", "tiny-conv", "--no-progress", "--force"]
    template = tmp_path / "template"
    template.mkdir()
    assert run_cli([*argv, "--out-dir", str(template / "index")]) == 0
    reference = _tree(template / "index")
    (template / "notes.txt").write_text("mine, beside the index")
    for step in ("aside", "in"):
        root = shutil.copytree(template, tmp_path / f"kill-{step}")
        before = _contents(root)
        assert _fork(lambda root=root: run_cli([*argv, "--out-dir", str(root / "index")]), step) == "killed"
        assert not _lost(before, root)
        assert run_cli([*argv, "--out-dir", str(root / "index")]) == 0
        index = _tree(root / "index")  # its manifest holds the build's time
        assert (
            not _lost(before, root) and index.keys() == reference.keys() and index["ids.json"] == reference["ids.json"]
        )
        assert list(root.glob("index.replaced-*")), "the earlier index is kept, moved aside whole"


# --------------------------------------------------------------------------- the cases of the issue
def test_a_forged_journal_is_a_file_like_any_other(dirs, capsys):
    """Issue 50's repro: a `.cir_demo-replacing.json` naming the user's report.md deletes nothing,
    with or without --overwrite; nothing in the folder is read as an instruction."""
    out = dirs / "U"
    out.mkdir()
    (out / "report.md").write_text("mine\n")
    digest = hashlib.sha256(b"mine\n").hexdigest()
    journal = {"written_by": "cir_demo", "outputs": "eval", "aside": "replaced-00000000-U", "phase": "moving"}
    (out / ".cir_demo-replacing.json").write_text(
        json.dumps({**journal, "old": [RUN_MANIFEST], "new": {"report.md": digest}})
    )
    before = _contents(dirs)
    argv = _argv("eval", dirs, out)[:-1]  # without --overwrite
    assert _main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds files (.cir_demo-replacing.json, report.md)" in err[0], err
    assert not _lost(before, dirs) and (out / "report.md").read_text() == "mine\n"
    assert _main([*argv, "--overwrite"]) == 0
    assert not _lost(before, dirs)
    (aside,) = dirs.glob("U.replaced-*")
    assert (aside / "report.md").read_text() == "mine\n" and (out / "report.md").read_text() != "mine\n"


def test_a_forged_run_manifest_naming_the_users_files_removes_none(dirs, capsys):
    out = dirs / "out"
    argv = _argv("world render", dirs, out)
    assert _main(argv) == 0
    for name in ("w-te-000001.png", "plots/.hidden.png", "report.md", "metrics.csv"):
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_bytes(b"the user's " + name.encode())
    files = {p: {"size": 1, "sha256": "0" * 64} for p in ("report.md", "metrics.csv", "plots/.hidden.png", "../x")}
    (out / RUN_MANIFEST).write_text(json.dumps({"written_by": "cir_demo", "kind": "run", "files": files}))
    before = _contents(dirs)
    assert _main([*argv, "--overwrite"]) == 0
    assert not _lost(before, dirs)
    assert "moved the earlier" in capsys.readouterr().err


def test_a_symlinked_staging_folder_lock_or_out_is_refused_before_any_work(dirs, capsys):
    docs = dirs / "docs"
    docs.mkdir()
    (docs / "report.md").write_text("my report")
    argv = _argv("world render", dirs, dirs / "out")
    for link in (dirs / ".partial", dirs / "out"):
        os.symlink(docs, link)
        before = _contents(dirs)
        for extra in ([], ["--overwrite"]):
            assert _main([*argv, *extra]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "symbolic link" in err[0], err
            assert not _lost(before, dirs) and _contents(dirs) == before
        link.unlink()
    (dirs / ".partial").mkdir()
    os.symlink(docs / "report.md", dirs / ".partial" / "out.lock")
    assert _main([*argv, "--overwrite"]) == 2
    assert "symbolic link" in capsys.readouterr().err and (docs / "report.md").read_text() == "my report"


def test_a_link_where_the_earlier_folder_would_go_is_left_and_another_name_taken(tmp_path, monkeypatch):
    """Issue 50, case 2: the set-aside name is never written through a link placed there."""
    from cir_demo.utils import owned_folder

    monkeypatch.setattr(owned_folder.time, "strftime", lambda fmt: "T")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "report.md").write_text("my report")
    os.symlink(docs, tmp_path / "out.replaced-T")
    with staged_run_dir(tmp_path / "out") as d:
        (d / "a.txt").write_text("earlier")
    before = _contents(tmp_path)
    with staged_run_dir(tmp_path / "out", overwrite=True) as d:
        (d / "a.txt").write_text("new")
    assert not _lost(before, tmp_path) and os.readlink(tmp_path / "out.replaced-T") == str(docs)
    assert sorted(p.name for p in docs.iterdir()) == ["report.md"]
    assert (tmp_path / "out.replaced-T-2" / "a.txt").read_text() == "earlier"


def test_dry_run_with_results_files_writes_nothing(dirs, capsys):
    results = _results_file(dirs / "model_a.json")
    before = {p: p.stat().st_mtime_ns for p in dirs.rglob("*")}
    args = ["--world-size", "tiny", "--results-json", str(results), "--out", str(dirs / "out"), "--dry-run"]
    assert _main(["eval", *args]) == 0
    out = capsys.readouterr().out
    assert "nothing was created" in out and "wrote" not in out
    assert {p: p.stat().st_mtime_ns for p in dirs.rglob("*")} == before


# --------------------------------------------------------------------------- one writer at a time
@contextlib.contextmanager
def _holding_writer(out: Path, overwrite: bool = True):
    """A forked child inside staged_run_dir(out) until told to finish: yields (pid, finish())."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            with staged_run_dir(out, overwrite) as d:
                (d / "first.txt").write_text("the first writer's")
                os.write(ready_w, b"x")
                os.read(go_r, 1)
        finally:
            os._exit(0)
    assert os.read(ready_r, 1) == b"x"

    def finish() -> int:
        os.write(go_w, b"x")
        return os.waitpid(pid, 0)[1]

    try:
        yield pid, finish
    finally:
        with contextlib.suppress(ChildProcessError, OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_two_writers_at_once_the_second_is_refused_in_one_line_or_waits(dirs, capsys):
    out = dirs / "out"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    before = _contents(dirs)
    with _holding_writer(out) as (pid, finish):
        _the_second_writer(dirs, out, pid, finish, capsys)
    assert not _lost(before, dirs)
    asides = sorted(dirs.glob("out.replaced-*"))
    assert len(asides) == 2 and any((a / "first.txt").exists() for a in asides)  # both writes whole
    assert (out / "w-te-000001.png").exists() and not any((dirs / ".partial").glob("*"))


def _the_second_writer(dirs, out, pid, finish, capsys) -> None:
    argv = [*_argv("world render", dirs, out), "--overwrite"]
    assert _main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out}: in use by process {pid} (another command is writing it)" in err[0], err
    with pytest.raises(FolderInTheWay, match=f"in use by process {pid}"):
        with staged_run_dir(out, True):
            pass
    waited: list[int] = []
    waiter = threading.Thread(target=lambda: waited.append(_main([*argv, "--wait"])))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # waiting for the first writer
    assert finish() == 0
    waiter.join(60)
    assert waited == [0]


def test_a_writer_in_this_process_excludes_a_second_one_here(tmp_path):
    with staged_run_dir(tmp_path / "out") as d:
        (d / "a.txt").write_text("a")
        with pytest.raises(FolderInTheWay, match=f"in use by process {os.getpid()}"):
            with staged_run_dir(tmp_path / "out", True):
                pass
    assert _tree(tmp_path / "out")["a.txt"] == b"a"


def test_a_read_only_parent_is_refused_before_any_work(dirs, capsys, monkeypatch):
    from cir_demo.preflight import folders

    parent = dirs / "readonly"
    (parent / "out").mkdir(parents=True)
    real = os.access
    monkeypatch.setattr(folders.os, "access", lambda p, mode: Path(p) != parent and real(p, mode))
    argv = _argv("eval", dirs, parent / "out")
    assert _main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not writable" in err[0], err
    assert not (parent / ".partial").exists()


# --------------------------------------------------------------------------- hostile contents
NAMES = [
    RUN_MANIFEST,
    "Run_Manifest.json",
    "run_manif\u0435st.json",  # a Cyrillic e
    ".cir_demo-replacing.json",
    "report.md",
    "REPORT.MD",
    "re\u0301port.md",  # decomposed accent
    "plots/a.png",
    ".hidden",
]
PARTIAL_KINDS = [
    "none",
    "empty",
    "forged staging",
    "complete forged staging",
    "link",
    "file",
    "lock link",
    "lock hard link",
]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    names=st.lists(st.sampled_from(NAMES), max_size=5, unique=True),
    out_kind=st.sampled_from(["missing", "empty", "files", "link to a folder", "a file"]),
    partial=st.sampled_from(PARTIAL_KINDS),
    links=st.booleans(),
    overwrite=st.booleans(),
)
def test_hostile_folder_contents_never_lose_a_users_byte(tmp_path_factory, names, out_kind, partial, links, overwrite):
    root = tmp_path_factory.mktemp("hostile")
    out, mine = root / "out", root / "mine"
    mine.mkdir()
    (mine / "precious.txt").write_text("precious")
    _place(out, out_kind, mine)
    for name in names if out_kind == "files" else []:
        (out / name).parent.mkdir(exist_ok=True)
        forged = {"written_by": "cir_demo", "kind": "run", "files": {"../mine/precious.txt": {}}, "phase": "done"}
        (out / name).write_text(json.dumps(forged) if name.endswith(".json") else f"user's {name}")
    if links and out_kind == "files":
        os.symlink(mine / "precious.txt", out / "a-link")
        os.link(mine / "precious.txt", out / "a-hard-link")
    _hostile_partial(root, partial, mine)
    before = _contents(root)
    try:
        with staged_run_dir(out, overwrite) as d:
            (d / "metrics.csv").write_text("new")
        written = True
    except FolderInTheWay as exc:
        assert "\n" not in str(exc)
        written = False
    assert not _lost(before, root), _lost(before, root)
    assert (mine / "precious.txt").read_text() == "precious"
    in_the_way = out_kind == "files" and (names or links) and not overwrite
    refused = (
        in_the_way or out_kind in ("link to a folder", "a file") or partial in ("link", "file") or "lock " in partial
    )
    assert written == (not refused)
    if written:
        assert not out.is_symlink() and set(_tree(out)) == {"metrics.csv", RUN_MANIFEST}


def _place(path: Path, kind: str, mine: Path) -> None:
    """`path` as `kind` says: missing, a link to the user's folder, a file, or a folder."""
    if kind.startswith("link"):
        os.symlink(mine, path)
    elif kind in ("file", "a file"):
        path.write_text("a file named like a folder")
    elif kind not in ("missing", "none"):
        path.mkdir()


def _hostile_partial(root: Path, kind: str, mine: Path) -> None:
    partial = root / ".partial"
    _place(partial, kind, mine)
    if "staging" in kind:  # a dead process's staging folder of `out`, named as this code names them
        forged = partial / "999999999-deadbeef-out"
        forged.mkdir()
        (forged / "mine.txt").write_text("named like a staging folder, but mine")
        if kind.startswith("complete"):
            (forged / RUN_MANIFEST).write_text("{}")
    if kind == "lock link":
        os.symlink(mine / "precious.txt", partial / "out.lock")
    if kind == "lock hard link":
        os.link(mine / "precious.txt", partial / "out.lock")
