"""Every command that writes where the user names (`--out`) follows one rule (issues 27, 50): a folder
is new or empty, or with --overwrite moved aside whole before the new one is renamed in; an existing
output file is replaced only with --overwrite, and then moved aside, never removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture()
def dirs(tmp_path, monkeypatch):
    for var, sub in (("CIR_DEMO_CACHE", "cache"), ("CIR_DEMO_RUNS", "runs"), ("CIR_DEMO_INDEXES", "indexes")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    return tmp_path


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {p.relative_to(folder).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in folder.rglob("*")}


def _cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    from cir_demo.cli import main

    capsys.readouterr()
    rc = main(argv)
    return rc, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    "argv",
    [
        ["world", "render", "w-te-000001", "w-te-000002", "--size", "tiny", "--pixels", "32"],
        ["world", "export", "--format", "cirr", "--size", "tiny"],
    ],
)
def test_world_export_and_render_refuse_other_files_and_overwrite_only_their_own(dirs, capsys, argv):
    out = dirs / "out"
    assert _cli([*argv, "--out", str(out)], capsys)[0] == 0
    own = set(_tree(out))
    assert "run_manifest.json" in own
    (out / "notes.txt").write_text("mine\n")
    (out / "src").mkdir()
    (out / "src" / "model.py").write_text("print('mine')\n")
    before = _tree(out)

    rc, err = _cli([*argv, "--out", str(out)], capsys)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: --out {out}: holds files (") and "notes.txt, " in err[0]
    assert "add --overwrite to move the folder aside whole" in err[0]
    assert _tree(out) == before

    assert _cli([*argv, "--out", str(out), "--overwrite"], capsys)[0] == 0
    assert set(_tree(out)) == own
    (aside,) = dirs.glob("out.replaced-*")
    assert _tree(aside) == before  # the earlier folder, whole, the user's files in it
    assert not (dirs / ".partial").exists()


def test_world_export_into_a_folder_of_the_users_moves_it_aside_whole_only_with_overwrite(dirs, capsys):
    out = dirs / "thesis"
    out.mkdir()
    (out / "captions").mkdir()
    (out / "captions" / "cap.rc2.val.json").write_text("my captions")  # a name the export writes
    before = _tree(out)
    argv = ["world", "export", "--format", "cirr", "--size", "tiny", "--out", str(out)]
    rc, err = _cli(argv, capsys)
    assert rc == 2 and len(err) == 1 and "holds files (captions/)" in err[0], err
    assert _tree(out) == before
    assert _cli([*argv, "--overwrite"], capsys)[0] == 0
    (aside,) = dirs.glob("thesis.replaced-*")
    assert _tree(aside) == before and (out / "run_manifest.json").is_file()


def test_an_existing_output_file_is_replaced_only_with_overwrite(dirs, capsys):
    sheet = dirs / "sheet.png"
    sheet.write_bytes(b"my picture")
    argv = ["world", "contact-sheet", "--size", "tiny", "--out", str(sheet)]
    rc, err = _cli(argv, capsys)
    assert rc == 2 and err == [f"error: --out {sheet}: exists; add --overwrite to replace it, or name a new file"]
    assert sheet.read_bytes() == b"my picture"
    assert _cli([*argv, "--overwrite"], capsys)[0] == 0
    assert sheet.read_bytes().startswith(b"\x89PNG")
    (aside,) = dirs.glob("sheet.png.replaced-*")
    assert aside.read_bytes() == b"my picture"


@pytest.mark.parametrize(
    "command, outputs",
    [
        (["failures", "--sort", "worst"], ["out.csv"]),
        (["rerank", "--backend", "world-verifier"], ["out.json", "out.rerank.json"]),
    ],
)
def test_results_outputs_are_not_replaced_without_overwrite(dirs, capsys, command, outputs):
    """A reranked file or a failures CSV named like an existing file (the first-stage results, say)."""
    (dirs / "r.json").write_text("{}")
    for name in outputs:
        (dirs / name).write_text("my results")
    rc, err = _cli(
        [*command, "--world-size", "tiny", "--results-json", str(dirs / "r.json"), "--out", str(dirs / outputs[0])],
        capsys,
    )
    assert rc == 2 and err == [
        f"error: --out {dirs / name}: exists; add --overwrite to replace it, or name a new file" for name in outputs
    ]
    assert all((dirs / name).read_text() == "my results" for name in outputs)


# a kill at any step of a write: tests/test_output_folders.py


def test_images_fetch_report_replaces_only_an_earlier_report(dirs, capsys):
    from cir_demo.images.fetch import REPORT_HEADER
    from cir_demo.preflight.flags import GivenFlags
    from cir_demo.preflight.folders import fetch_report_problems

    mine = dirs / "failed.tsv"
    mine.write_text("my table\n")
    rc, err = _cli(["images", "fetch", "--world-size", "tiny", "--benchmark", "world", "--report", str(mine)], capsys)
    assert rc == 2 and err == [
        f"error: --report {mine}: exists and is not a report of an earlier fetch; name a new file"
    ], err
    assert mine.read_text() == "my table\n"
    earlier = dirs / "earlier.tsv"
    earlier.write_text(REPORT_HEADER + "w1\tHTTP 404\n")
    given = {"command": "images", "images_command": "fetch", "report": str(earlier)}
    assert fetch_report_problems(GivenFlags.of(given)) == []
    assert fetch_report_problems(GivenFlags.of({**given, "report": str(dirs / "new.tsv")})) == []


def test_a_fetch_removes_only_the_partial_files_its_atomic_writes_leave(tmp_path):
    from cir_demo.images.fetch import _remove_partial_files
    from cir_demo.utils.io import atomic_path

    with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "w1.jpg") as tmp:
        partial = tmp
        partial.write_bytes(b"half")
        os.link(partial, tmp_path / "kept-link")  # what the kill leaves: the temporary name, still there
        raise KeyboardInterrupt
    os.rename(tmp_path / "kept-link", partial)
    mine = [tmp_path / ".draft.tmp", tmp_path / ".notes.tmp"]
    for p in mine:
        p.write_text("mine")
    _remove_partial_files(tmp_path)
    assert not partial.exists() and all(p.read_text() == "mine" for p in mine)
