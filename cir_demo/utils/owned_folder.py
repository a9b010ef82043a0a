"""Folders this project writes into a place the user names (`--out`): a manifest lists every file
the project wrote there, so a later write removes or replaces only those files.

A run folder is recognised by its manifest (`run_manifest.json`, written last), never by file
names: a folder holding a `metrics.csv` the user made is not a run. `folder_state` says what is
in a folder (empty, a recorded earlier write, what else is there and what was changed since);
`replace_owned` puts a complete new write in place of an earlier one and touches nothing else.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cir_demo.errors import UserError
from cir_demo.utils.io import sha256_file, write_json_atomic

RUN_MANIFEST = "run_manifest.json"
WRITTEN_BY = "cir_demo"


def _files_under(folder: Path) -> list[str]:
    """Every file below `folder`, as a relative posix path, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())


def write_manifest(folder: Path, kind: str = "run") -> dict:
    """Record every file now in `folder` (size and sha256); the manifest file is written last."""
    files = {rel: {"size": (folder / rel).stat().st_size, "sha256": sha256_file(folder / rel)}
             for rel in _files_under(folder) if rel != RUN_MANIFEST}
    manifest = {"written_by": WRITTEN_BY, "kind": kind, "files": files}
    write_json_atomic(folder / RUN_MANIFEST, manifest)
    return manifest


def read_manifest(folder: Path) -> dict | None:
    """The manifest of an earlier write in `folder`; None when there is none or it is not ours."""
    try:
        manifest = json.loads((folder / RUN_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("written_by") != WRITTEN_BY \
            or not isinstance(manifest.get("files"), dict):
        return None
    return manifest


@dataclass
class FolderState:
    """What an existing folder holds, seen from a write that wants to put a run there."""

    empty: bool
    manifest: dict | None  # the earlier run's, when there is one
    foreign: list[str] = field(default_factory=list)  # top-level names not written by that run ("src/")
    changed: list[str] = field(default_factory=list)  # the run's files changed since it wrote them

    def names(self, which: list[str], limit: int = 4) -> str:
        shown = ", ".join(which[:limit])
        return shown + (f" and {len(which) - limit} more" if len(which) > limit else "")


def _top_level(rel: str, folder: Path) -> str:
    top = rel.split("/", 1)[0]
    return top + "/" if (folder / top).is_dir() else top


def folder_state(folder: Path) -> FolderState:
    """Classify an existing folder's contents against the manifest in it (if any)."""
    entries = sorted(os.listdir(folder))
    if not entries:
        return FolderState(True, None)
    manifest = read_manifest(folder)
    owned = set(manifest["files"]) if manifest else set()
    owned_dirs = {"/".join(rel.split("/")[:i]) for rel in owned for i in range(1, rel.count("/") + 1)}
    foreign: list[str] = []
    for rel in _files_under(folder) + _empty_dirs(folder):
        if rel != RUN_MANIFEST and rel not in owned and rel not in owned_dirs:
            name = _top_level(rel, folder)
            if name not in foreign:
                foreign.append(name)
    changed = []
    for rel, record in (manifest["files"].items() if manifest else []):
        path = folder / rel
        if path.is_file() and (path.stat().st_size != record.get("size") or sha256_file(path) != record.get("sha256")):
            changed.append(rel)
    return FolderState(False, manifest, sorted(foreign), changed)


def _empty_dirs(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_dir() and not any(p.iterdir()))


class FolderInTheWay(UserError):
    """The target folder holds something this write did not make (message: one line)."""


def replace_owned(new: Path, out: Path, overwrite: bool) -> None:
    """Move the complete write `new` (with its manifest) to `out`.

    `out` missing or empty: one rename. `out` an earlier run and `overwrite`: that run's files are
    set aside, the new ones moved in, then the set-aside ones removed; anything else there is left as it was (and a new file whose
    name is taken by something the earlier run did not write stops the move before it starts)."""
    if not out.exists() or (out.is_dir() and not os.listdir(out)):
        if out.exists():
            out.rmdir()
        os.rename(new, out)
        return
    state = folder_state(out)
    if state.manifest is None or not overwrite or state.changed:
        raise FolderInTheWay(f"{out}: {refusal(out, state)}")
    owned = set(state.manifest["files"])
    taken = [rel for rel in _files_under(new) if rel not in owned and rel != RUN_MANIFEST and (out / rel).exists()]
    if taken:
        raise FolderInTheWay(f"{out}: the new run would overwrite {state.names(taken)}, which the earlier run "
                             "did not write; move them or name another folder")
    if not state.foreign:  # only the earlier run: swap the folders (atomic for a reader)
        old = new.parent / f"replaced-{uuid.uuid4().hex[:8]}-{out.name}"  # kept if killed before the next line
        os.rename(out, old)
        os.rename(new, out)
        shutil.rmtree(old, ignore_errors=True)
        return
    _swap_beside_others(new, out, owned)


def _swap_beside_others(new: Path, out: Path, owned: set[str]) -> None:
    """The earlier run's files set aside (renamed into `.partial/replaced-...`, manifest first), the new
    ones moved in, the new manifest last, then the set-aside files removed. A kill midway leaves no
    manifest in `out` (so nothing there is taken for a run and removed later) and the earlier run whole
    under `replaced-...`, which no cleanup removes (docs/reliability.md: recovering it)."""
    aside = new.parent / f"replaced-{uuid.uuid4().hex[:8]}-{out.name}"
    for rel in [RUN_MANIFEST, *sorted(owned)]:
        if (out / rel).is_file():
            (aside / rel).parent.mkdir(parents=True, exist_ok=True)
            os.rename(out / rel, aside / rel)
    _remove_empty_parents(out, owned)
    for rel in _files_under(new):
        if rel != RUN_MANIFEST:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(new / rel, out / rel)
    os.replace(new / RUN_MANIFEST, out / RUN_MANIFEST)  # last: the folder is a complete run again
    shutil.rmtree(aside, ignore_errors=True)


def _remove_empty_parents(out: Path, owned: set[str]) -> None:
    """Remove the folders the earlier run made that its removal left empty (deepest first)."""
    dirs = {"/".join(rel.split("/")[:i]) for rel in owned for i in range(1, rel.count("/") + 1)}
    for d in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
        try:
            (out / d).rmdir()
        except OSError:  # not empty (something else is in it) or already gone
            pass


def refusal(out: Path, state: FolderState) -> str:
    """Why a run may not go into the existing folder `out`: one line naming what is in the way."""
    if state.manifest is None:
        listed = [_top_level(name, out) for name in sorted(os.listdir(out))]
        return (f"holds files that no cir_demo run recorded ({state.names(listed)}; no {RUN_MANIFEST}); "
                "name a new or empty folder")
    if state.changed:
        return (f"the earlier run's {state.names(state.changed)} changed since it was written; "
                "move them or name another folder")
    beside = f" and {state.names(state.foreign)}, which it did not write" if state.foreign else ""
    return (f"holds an earlier cir_demo run{beside}; add --overwrite to replace only that run's files, "
            "or name a new or empty folder")


def write_problem(out: Path, overwrite: bool) -> str | None:
    """Why a run may not be written to `out`, checked before any work; None when it may."""
    if not out.is_dir():
        return None
    state = folder_state(out)
    if state.empty or (state.manifest is not None and overwrite and not state.changed):
        return None
    return refusal(out, state)


def file_write_problem(path: Path, overwrite: bool) -> str | None:
    """Why one output file (a results file, a CSV, a PNG) may not be written at `path`; None when it
    may. A file there is replaced only with `overwrite`: no manifest says who wrote it, and a results
    file silently replaced is a lost result."""
    if path.is_dir():
        return "is a folder; name the file to write"
    if path.exists() and not overwrite:
        return "exists; add --overwrite to replace it, or name a new file"
    return None
