"""A replacement (`--overwrite`) killed at any step, as SQLite's crash tests kill a commit: a child
process replaces an earlier run in a folder that also holds the user's files and `os._exit`s before its
N-th file-system change (rename, replace, unlink, rmdir, rmtree), for every N. Whatever N, the user's
files are intact, the next command (settling the journal) finds one whole run, the earlier or the new
one, byte for byte, and a rerun replaces it. And manifests with hostile entries (outside the folder,
through a link, names the command does not write) never move or remove anything but declared outputs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent

OLD_RUN = {
    "metrics.csv": "old metrics",
    "breakdowns.csv": "only the old run has it",
    "plots/a.png": "old plot",
    "results/m.json": "old results",
    "compositional/metrics.csv": "old split",
}
NEW_RUN = {
    "metrics.csv": "new metrics",
    "paired.csv": "only the new run has it",
    "plots/a.png": "new plot",
    "plots/b.png": "new plot b",
    "results/m.json": "new results",
    "compositional/metrics.csv": "new split",
}
USER = {
    "notes.txt": "my notes",
    "src/model.py": "print('mine')",
    "results/README.txt": "my note on results",
    "thesis.tex": "\\documentclass{article}",
}

# the child: every rename, replace, unlink, rmdir and rmtree counted; the N-th never happens
CHILD = r"""
import os, shutil, sys
stop, out = int(sys.argv[1]), sys.argv[2]
new = dict(arg.split("=", 1) for arg in sys.argv[3:])
count = [0]
def counted(fn):
    def step(*a, **k):
        count[0] += 1
        if count[0] == stop:
            os._exit(77)
        return fn(*a, **k)
    return step
for name in ("rename", "replace", "unlink", "remove", "rmdir"):
    setattr(os, name, counted(getattr(os, name)))
shutil.rmtree = counted(shutil.rmtree)
from pathlib import Path
from cir_demo.utils.staged_folder import staged_run_dir
with staged_run_dir(out, overwrite=True) as d:
    for rel, text in new.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
print(count[0])
"""


def _write(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()}


def _earlier_run(out: Path) -> None:
    """The earlier run, with hostile entries added to its manifest (the user's files with their right
    sizes and hashes, and a file outside the folder), then the user's files beside it."""
    from cir_demo.utils.io import sha256_file
    from cir_demo.utils.staged_folder import staged_run_dir

    with staged_run_dir(out) as d:
        _write(d, OLD_RUN)
    _write(out, USER)
    victim = out.parent / "victim.txt"
    victim.write_text("outside the folder")
    manifest = json.loads((out / "run_manifest.json").read_text())
    for rel, path in (("notes.txt", out / "notes.txt"), ("../victim.txt", victim), (str(victim), victim)):
        manifest["files"][rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    (out / "run_manifest.json").write_text(json.dumps(manifest))


def _child(stop: int, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(stop), str(out), *(f"{k}={v}" for k, v in NEW_RUN.items())],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _run_part(out: Path) -> dict[str, str]:
    return {rel: text for rel, text in _files(out).items() if rel not in USER and rel != "run_manifest.json"}


def test_a_kill_before_any_file_system_change_leaves_one_whole_run_and_every_user_file(tmp_path):
    from cir_demo.utils.folder_journal import settle
    from cir_demo.utils.owned_folder import read_manifest
    from cir_demo.utils.staged_folder import staged_run_dir

    template = tmp_path / "template"
    _earlier_run(template / "out")
    whole = _child(10**6, shutil.copytree(template, tmp_path / "whole") / "out")  # how many steps it takes
    assert whole.returncode == 0, whole.stderr
    steps = int(whole.stdout.split()[-1])
    assert steps >= 15  # the journal, the earlier run's 6 files aside, the new run's 7 in, the clean-up
    seen = set()
    for stop in range(1, steps + 1):
        root = shutil.copytree(template, tmp_path / f"kill-{stop}")
        out = root / "out"
        killed = _child(stop, out)
        assert killed.returncode == 77, (stop, killed.stderr)
        assert (root / "victim.txt").read_text() == "outside the folder", stop
        settle(out)  # what the next command in the folder does first
        files = _files(out)
        assert {rel: files.get(rel) for rel in USER} == USER, stop
        run = _run_part(out)
        assert run in (OLD_RUN, NEW_RUN), (stop, run)
        assert set(read_manifest(out)["files"]) >= set(run), stop  # the manifest there is that run's
        seen.add("new" if run == NEW_RUN else "old")
        with staged_run_dir(out, overwrite=True) as d:  # and the command run again replaces it
            _write(d, NEW_RUN)
        assert _run_part(out) == NEW_RUN and {rel: _files(out)[rel] for rel in USER} == USER, stop
        assert not (root / ".partial").exists() and not (out / ".cir_demo-replacing.json").exists(), stop
        assert (root / "victim.txt").read_text() == "outside the folder", stop
    assert seen == {"old", "new"}  # killed before and after the commit point


def test_a_journal_that_is_not_the_projects_is_refused_in_one_line(tmp_path):
    from cir_demo.utils.owned_folder import JOURNAL, FolderInTheWay
    from cir_demo.utils.folder_journal import settle

    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("mine")
    (out / JOURNAL).write_text(
        json.dumps(
            {
                "written_by": "cir_demo",
                "outputs": "eval",
                "aside": "replaced-0000abcd-x",
                "phase": "moving",
                "old": ["run_manifest.json"],
                "new": {"thesis.tex": "0" * 64},
            }
        )
    )
    with pytest.raises(FolderInTheWay, match="no journal of a cir_demo replacement"):
        settle(out)
    assert (out / "thesis.tex").read_text() == "mine"


# --------------------------------------------------------------------------- hostile manifests
HOSTILE = [
    "../victim.txt",
    "notes.txt",
    "src/model.py",
    "link/metrics.csv",
    "plots/../../victim.txt",
    "./metrics.csv",
    "plots//a.png",
    "/ABS/victim.txt",
    "metrics.csv",
    "results/m.json",
    "thesis.tex",
    "src",
    "",
    "results/README.txt",
    "plots/a.png",
    "..",
    "compositional/../notes.txt",
]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(entries=st.lists(st.sampled_from(HOSTILE), max_size=8, unique=True), overwrite=st.booleans())
def test_hostile_manifest_entries_never_move_or_remove_anything_but_declared_outputs(
    tmp_path_factory, entries, overwrite
):
    from cir_demo.utils.io import sha256_file
    from cir_demo.utils.owned_folder import FolderInTheWay
    from cir_demo.utils.staged_folder import staged_run_dir

    root = tmp_path_factory.mktemp("hostile")
    out, elsewhere = root / "out", root / "elsewhere"
    _write(elsewhere, {"metrics.csv": "a file the link leads to"})
    (root / "victim.txt").write_text("outside")
    _write(out, {"metrics.csv": "old", "plots/a.png": "old plot", "results/m.json": "old", **USER})
    os.symlink(elsewhere, out / "link")
    files = {}
    for rel in entries:
        path = Path(rel.replace("/ABS", str(root))) if rel.startswith("/ABS") else out / rel
        record = {"size": path.stat().st_size, "sha256": sha256_file(path)} if path.is_file() else {"size": 0}
        files[rel.replace("/ABS", str(root))] = record
    (out / "run_manifest.json").write_text(json.dumps({"written_by": "cir_demo", "kind": "run", "files": files}))
    outside = {"victim": (root / "victim.txt").read_text(), "elsewhere": _files(elsewhere)}
    try:
        with staged_run_dir(out, overwrite=overwrite) as d:
            _write(d, {"metrics.csv": "new", "report.md": "new"})
    except FolderInTheWay:
        pass
    assert {rel: _files(out).get(rel) for rel in USER} == USER
    assert outside == {"victim": (root / "victim.txt").read_text(), "elsewhere": _files(elsewhere)}
    assert os.path.islink(out / "link")


def test_every_staged_write_is_declared_or_said(tmp_path, capsys):
    """A command writing a name it does not declare (a defect) is said, and its run is kept."""
    from cir_demo.utils.staged_folder import staged_run_dir

    with staged_run_dir(tmp_path / "out") as d:
        _write(d, {"metrics.csv": "m", "notes/extra.txt": "x"})
    assert "wrote notes/extra.txt, which it does not declare" in capsys.readouterr().err
    assert (tmp_path / "out" / "notes" / "extra.txt").read_text() == "x"
