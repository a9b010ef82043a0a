"""The fault table of issue 41: output folders that cannot be turned against their user, and the last
defects of the table. One test (or more) per case; each targets the exact behaviour that failed.

| case | fault | test |
|---|---|---|
| 1 | a manifest entry `../../victim.txt` / an absolute one moved or removed files outside --out | test_manifest_entries_outside_the_folder_* |
| 2 | a manifest the project did not write was trusted (thesis.tex; world render; index --force) | test_a_forged_manifest_*, test_index_cli.py |
| 3 | index --out-dir, world generate --out, record --out recognised folders by file names | test_world_generate_*, test_record_*, test_index_cli.py |
| 4 | a kill during --overwrite left no whole run | tests/test_output_folders.py |
| 5 | two runs in one second shared runs/<time>-world; "wrote" printed before the final move | test_run_folders_*, test_wrote_* |
| 7 | --out / and /proc: a traceback, after walking the tree | test_system_folders_* |
| 8 | --out links, mount points, read-only parents failing after the work | test_out_* |
| 6, 9-15 | the app, the Report and results files | tests/test_fault_table_41_app.py |
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import pytest

from cir_demo.harness import cli as eval_cli


@pytest.fixture()
def dirs(tmp_path, monkeypatch):
    for var, sub in (("CIR_DEMO_CACHE", "cache"), ("CIR_DEMO_RUNS", "runs"), ("CIR_DEMO_INDEXES", "indexes")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    return tmp_path


def _eval(argv: list[str], capsys) -> tuple[int, list[str], str]:
    capsys.readouterr()
    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    rc = eval_cli.run(p.parse_args(argv))
    captured = capsys.readouterr()
    return rc, captured.err.strip().splitlines(), captured.out


def _results_file(path: Path) -> Path:
    from cir_demo.results import write_results
    from cir_demo.world import load_world

    bench = load_world(size="tiny")
    ids = sorted(bench.corpus_set)
    write_results(path, bench, {q.query_id: ids[:10] for q in bench.queries}, fmt="run-dict")
    return path


def _score(out: Path, capsys, *extra: str, results: Path | None = None):
    results = results or _results_file(out.parent / "model_a.json")
    return _eval(
        [
            "--world-size",
            "tiny",
            "--results-json",
            str(results),
            "--n-boot",
            "0",
            "--no-plots",
            "--out",
            str(out),
            *extra,
        ],
        capsys,
    )


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {p.relative_to(folder).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in folder.rglob("*")}


def _record(path: Path) -> dict:
    data = path.read_bytes()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _add_to_manifest(out: Path, entries: dict) -> None:
    manifest = json.loads((out / "run_manifest.json").read_text())
    manifest["files"].update(entries)
    (out / "run_manifest.json").write_text(json.dumps(manifest))


# --------------------------------------------------------------------------- cases 1-3 (issue 50: no manifest is read)
def test_manifest_entries_outside_the_folder_move_or_remove_nothing(dirs, capsys):
    out = dirs / "a" / "b" / "out"
    out.parent.mkdir(parents=True)
    assert _score(out, capsys)[0] == 0
    (dirs / "victim.txt").write_text("the user's, outside")
    (out / "victim.txt").write_text("the user's, inside")
    _add_to_manifest(out, {"../../../victim.txt": _record(dirs / "victim.txt"), str(dirs / "victim.txt"): {}})
    rc, err, _ = _score(out, capsys, "--overwrite")
    assert rc == 0, err
    assert (dirs / "victim.txt").read_text() == "the user's, outside"
    (aside,) = out.parent.glob("out.replaced-*")
    assert (aside / "victim.txt").read_text() == "the user's, inside"


@pytest.mark.parametrize("render", [False, True])
def test_a_forged_manifest_naming_a_users_file_leaves_it_whole(dirs, capsys, render):
    from cir_demo.cli import main

    u = dirs / "u"
    u.mkdir()
    (u / "thesis.tex").write_text("t\n")
    (u / "w-te-000001.png").write_text("my picture, named like a render")
    (u / "run_manifest.json").write_text(
        json.dumps({"written_by": "cir_demo", "kind": "run", "files": {"thesis.tex": _record(u / "thesis.tex")}})
    )
    before = _tree(u)
    render_argv = ["world", "render", "w-te-000001", "--size", "tiny", "--pixels", "32", "--out", str(u)]
    for extra in ((), ("--overwrite",)):
        if render:
            capsys.readouterr()
            rc, err = main([*render_argv, *extra]), capsys.readouterr().err.strip().splitlines()
        else:
            rc, err, _ = _score(u, capsys, *extra)
        assert rc == (0 if extra else 2), err
        assert extra or len(err) == 1 and "holds files (run_manifest.json, thesis.tex, w-te-000001.png)" in err[0]
    (aside,) = dirs.glob("u.replaced-*")
    assert _tree(aside) == before


def test_world_generate_moves_a_folder_that_is_not_this_world_aside_only_with_force(dirs, capsys):
    from cir_demo.cli import main

    w = dirs / "w"
    w.mkdir()
    (w / "manifest.json").write_text('{"files": {"manifest.json": 1}}')
    capsys.readouterr()
    assert main(["world", "generate", "--size", "tiny", "--out", str(w)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds files (manifest.json); add --force to move the folder aside whole" in err[0], err
    assert (w / "manifest.json").read_text() == '{"files": {"manifest.json": 1}}'


def test_world_generate_leaves_its_world_as_it_is_and_force_moves_it_aside(dirs, capsys):
    from cir_demo.cli import main

    w = dirs / "w"
    assert main(["world", "generate", "--size", "tiny", "--out", str(w)]) == 0
    before = _tree(w)
    assert main(["world", "generate", "--size", "tiny", "--out", str(w)]) == 0  # intact: nothing written
    assert _tree(w) == before
    manifest = json.loads((w / "manifest.json").read_text())
    manifest["files"]["notes.txt"] = _record(w / "manifest.json")  # an edited manifest names a user's file
    (w / "manifest.json").write_text(json.dumps(manifest))
    (w / "notes.txt").write_text("mine")
    before = _tree(w)
    assert main(["world", "generate", "--size", "tiny", "--out", str(w), "--force"]) == 0
    (aside,) = dirs.glob("w.replaced-*")
    assert _tree(aside) == before and not (w / "notes.txt").exists()


def test_record_refuses_a_users_record_md(dirs, capsys):
    from cir_demo.cli import main

    r = dirs / "R"
    r.mkdir()
    (r / "record.md").write_text("my record")
    capsys.readouterr()
    assert main(["record", "--seeds", "7", "--out", str(r)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds files that are not a record's (record.md)" in err[0], err
    assert (r / "record.md").read_text() == "my record"


# --------------------------------------------------------------------------- case 5
def test_run_folders_of_one_second_are_made_unique_by_exclusive_create(dirs):
    from cir_demo.results.run_folders import new_run_folder

    now = 1_800_000_000.0
    first, second = new_run_folder("world", now), new_run_folder("world", now)
    assert first != second and second.name == first.name + "-2"
    assert first.is_dir() and second.is_dir() and not any(first.iterdir())


def test_wrote_is_said_only_after_the_final_move(dirs, capsys, monkeypatch):
    from cir_demo.utils import owned_folder

    def refused(step):
        if step == "in":
            raise owned_folder.FolderInTheWay("taken meanwhile")

    monkeypatch.setattr(owned_folder, "kill_point", refused)
    rc, err, out_text = _eval(
        ["--world-size", "tiny", "--results-json", str(_results_file(dirs / "m.json")), "--n-boot", "0", "--no-plots"],
        capsys,
    )
    assert rc == 2 and "taken meanwhile" in err[-1], err
    assert "wrote" not in out_text
    assert not [p for p in (dirs / "runs").iterdir() if not p.name.startswith(".")]  # its reserved folder removed


# --------------------------------------------------------------------------- case 7
@pytest.mark.parametrize("folder", ["/", "/proc", "/usr", "/proc/self"])
def test_system_folders_are_refused_in_one_line_without_walking_them(dirs, capsys, monkeypatch, folder):
    def no_walk(*a, **k):
        raise AssertionError("walked the tree")

    monkeypatch.setattr(os, "walk", no_walk)
    monkeypatch.setattr(Path, "rglob", no_walk)
    rc, err, _ = _score(Path(folder), capsys, results=_results_file(dirs / "m.json"))
    assert rc == 2 and len(err) == 1 and "a system folder" in err[0] and err[0].startswith(f"error: --out {folder}"), (
        err
    )


def test_a_users_folder_is_refused_without_walking_its_tree(dirs, capsys, monkeypatch):
    home = dirs / "home"
    (home / "src" / "deep" / "er").mkdir(parents=True)
    (home / "src" / "deep" / "er" / "f.py").write_text("x")
    (home / "notes.txt").write_text("mine")
    results = _results_file(dirs / "m.json")

    def no_walk(*a, **k):
        raise AssertionError("walked the tree")

    monkeypatch.setattr(os, "walk", no_walk)
    monkeypatch.setattr(Path, "rglob", no_walk)
    rc, err, _ = _score(home, capsys, results=results)
    assert rc == 2 and len(err) == 1 and "holds files (notes.txt, src/)" in err[0], err


# --------------------------------------------------------------------------- case 8
def test_out_a_link_is_refused_before_any_work(dirs, capsys):
    """Issue 50: a link on a path the command renames is never written through."""
    target = dirs / "target"
    target.mkdir()
    link = dirs / "link"
    link.symlink_to(target)
    for extra in ((), ("--overwrite",)):
        rc, err, _ = _score(link, capsys, *extra)
        assert rc == 2 and len(err) == 1 and f"--out {link}: is a symbolic link (to {target})" in err[0], err
        assert link.is_symlink() and not any(target.iterdir())


def test_out_a_dangling_link_is_refused_before_any_work(dirs, capsys):
    link = dirs / "link"
    link.symlink_to(dirs / "nowhere")
    rc, err, _ = _score(link, capsys)
    assert rc == 2 and err == [
        f"error: --out {link}: a link to {dirs / 'nowhere'}, which does not exist; name a folder"
    ], err


def test_out_a_mount_point_is_refused_before_any_work(dirs, capsys, monkeypatch):
    from cir_demo.preflight import folders

    mount = dirs / "mnt"
    mount.mkdir()
    monkeypatch.setattr(folders.os.path, "ismount", lambda p: Path(p) == mount)
    rc, err, _ = _score(mount, capsys)
    assert rc == 2 and len(err) == 1 and "a mount point" in err[0], err


def test_out_in_a_read_only_parent_is_refused_before_any_work(dirs, capsys, monkeypatch):
    from cir_demo.preflight import folders

    parent = dirs / "readonly"
    (parent / "out").mkdir(parents=True)
    real = os.access
    monkeypatch.setattr(folders.os, "access", lambda p, mode: Path(p) != parent and real(p, mode))
    rc, err, _ = _score(parent / "out", capsys)
    assert rc == 2 and len(err) == 1 and f"its parent {parent} is not writable" in err[0], err
