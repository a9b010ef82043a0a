"""Replacing an earlier run's files in a folder that may also hold the user's, so that a kill at any
step leaves one whole run and every file of the user's: a rollback journal, as SQLite's atomic commit.

Before the first rename, `JOURNAL` is written in the folder (atomically, synced): which of the earlier
run's files move aside (to `<parent>/.partial/replaced-...`), and the sha256 of every new file. Then the
earlier run's files move aside (its manifest first), the new ones move in (the new manifest last), the
journal is marked done, the set-aside files are removed and the journal last. `settle`, which every
command writing that folder calls first, completes a journal marked done or else undoes it: each new
file there (the same bytes as the journal records) is removed and the set-aside files are put back,
the earlier manifest last. Each step of both is repeatable, so a kill while settling is settled again.
Only paths inside the folder that the journal's command declares (owned_folder.OUTPUTS) are touched.
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from pathlib import Path

from cir_demo.utils.io import sha256_file
from cir_demo.utils.owned_folder import (
    JOURNAL,
    OUTPUTS,
    RUN_MANIFEST,
    WRITTEN_BY,
    FolderInTheWay,
    Outputs,
    entry_problem,
)

PARTIAL = ".partial"
_ASIDE = re.compile(r"replaced-[0-9a-f]{8}-[^/]+")


def _sync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot sync a folder
        pass
    finally:
        os.close(fd)


def _write_journal(out: Path, journal: dict, scratch: Path) -> None:
    """The journal in `out`, whole or not at all: written in `scratch`, synced, then renamed in."""
    tmp = scratch / f".journal-{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(journal, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out / JOURNAL)
    _sync_dir(out)


def _move(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.rename(src, dst)


def _remove_empty_dirs(folder: Path, rels) -> None:
    """Remove the folders above `rels` inside `folder` that are now empty (deepest first)."""
    dirs = {"/".join(rel.split("/")[:i]) for rel in rels for i in range(1, rel.count("/") + 1)}
    for d in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
        try:
            (folder / d).rmdir()
        except OSError:  # not empty (something else is in it) or already gone
            pass


def replace_under_journal(new: Path, out: Path, old: list[str], new_files: list[str], outputs: Outputs) -> None:
    """Replace the earlier run's files `old` in `out` by the staged run `new` (its files `new_files` and
    its manifest); `old` and `new_files` are entries `outputs` declares, checked by the caller."""
    aside = new.parent / f"replaced-{uuid.uuid4().hex[:8]}-{out.name}"
    record = json.loads((new / RUN_MANIFEST).read_text(encoding="utf-8"))["files"]
    hashes = {rel: record[rel]["sha256"] for rel in new_files}
    hashes[RUN_MANIFEST] = sha256_file(new / RUN_MANIFEST)
    journal = {
        "written_by": WRITTEN_BY,
        "outputs": outputs.key,
        "aside": aside.name,
        "phase": "moving",
        "old": [RUN_MANIFEST, *old],
        "new": hashes,
    }
    _write_journal(out, journal, new)
    for rel in journal["old"]:  # the earlier manifest first: a half-moved folder is never taken for a run
        _move(out / rel, aside / rel)
    _remove_empty_dirs(out, old)
    for rel in new_files:
        _move(new / rel, out / rel)
    _move(new / RUN_MANIFEST, out / RUN_MANIFEST)  # last: the folder is a complete run again
    _sync_dir(out)
    _write_journal(out, {**journal, "phase": "done"}, new)  # the commit point
    _finish(out, aside, journal)


def _finish(out: Path, aside: Path, journal: dict) -> None:
    """After the commit point: the set-aside files removed, then the journal."""
    for rel in journal["old"]:
        try:
            os.unlink(aside / rel)
        except FileNotFoundError:
            pass
    _remove_empty_dirs(aside, journal["old"])
    try:
        aside.rmdir()
    except OSError:
        pass
    os.unlink(out / JOURNAL)


def _undo(out: Path, aside: Path, journal: dict) -> int:
    """Before the commit point: the new files that moved in removed, the set-aside ones put back
    (the earlier manifest last), then the journal removed. Returns how many files were put back."""
    old = set(journal["old"])
    for rel, digest in journal["new"].items():
        path = out / rel
        moved_in = rel not in old or os.path.lexists(aside / rel)  # else what is there is the earlier file
        if moved_in and path.is_file() and not path.is_symlink() and sha256_file(path) == digest:
            os.unlink(path)
    _remove_empty_dirs(out, journal["new"])
    back = 0
    for rel in [*journal["old"][1:], journal["old"][0]]:
        if os.path.lexists(aside / rel) and not os.path.lexists(out / rel):
            _move(aside / rel, out / rel)
            back += 1
    _remove_empty_dirs(aside, journal["old"])
    try:
        aside.rmdir()
    except OSError:  # something could not be put back (its place was taken): kept, and said
        print(f"warning: {aside} keeps files of the earlier run in {out} that could not be put back", file=sys.stderr)
    os.unlink(out / JOURNAL)
    return back


def _read_journal(out: Path) -> tuple[dict, Path]:
    """The journal in `out` and its set-aside folder, checked entry by entry against its command's outputs."""
    try:
        journal = json.loads((out / JOURNAL).read_text(encoding="utf-8"))
        outputs = OUTPUTS[journal["outputs"]]
        entries = [*journal["old"], *journal["new"]]
        ok = (
            journal["written_by"] == WRITTEN_BY
            and journal["phase"] in ("moving", "done")
            and _ASIDE.fullmatch(journal["aside"])
            and journal["old"][:1] == [RUN_MANIFEST]
            and all(isinstance(d, str) for d in journal["new"].values())
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        ok = False
    if not ok or any(rel != RUN_MANIFEST and entry_problem(out, rel, outputs) for rel in entries):
        raise FolderInTheWay(
            f"{out}: holds {JOURNAL}, which is no journal of a cir_demo replacement; "
            "move it away or name another folder"
        )
    return journal, out.parent / PARTIAL / journal["aside"]


def settle(out: Path) -> None:
    """Complete or undo a replacement in `out` that a kill interrupted (nothing to do without a journal)."""
    if not os.path.lexists(out / JOURNAL):
        return
    journal, aside = _read_journal(out)
    if journal["phase"] == "done":
        _finish(out, aside, journal)
        print(f"note: {out}: completed the replacement of its run that a stop interrupted", file=sys.stderr)
    else:
        n = _undo(out, aside, journal)
        print(
            f"note: {out}: undid the replacement of its run that a stop interrupted ({n} files of the "
            "earlier run put back)",
            file=sys.stderr,
        )
