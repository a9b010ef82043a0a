"""Folders this project writes into a place the user names (`--out`): a manifest lists every file
the project wrote there, so a later write removes or replaces only those files.

The ownership rule, the one place every command that writes a folder asks: a manifest entry is
honoured only when it is
  * a plain relative path inside the folder (no `..`, no absolute path, no symbolic link on the way),
  * and a name the command declares it writes (`Outputs`: metrics.csv, plots/*.png, ... for `--eval`).
Anything else a manifest lists is ignored (and said), so an edited, unpacked or hand-made manifest can
at worst name the command's own output files. No folder is recognised by file names alone: a run folder
by its `run_manifest.json` (written last), an index or a world by a manifest of its own kind.

`replace_owned` puts a complete new write in place of an earlier one under a journal (`JOURNAL`, in the
folder, written before the first rename): every command that meets a journal first completes or undoes
that replacement (`settle`), so after a kill at any step the folder holds one whole run and every file
of the user's.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from cir_demo.errors import UserError
from cir_demo.utils.io import sha256_file, write_json_atomic

RUN_MANIFEST = "run_manifest.json"
JOURNAL = ".cir_demo-replacing.json"
WRITTEN_BY = "cir_demo"


# --------------------------------------------------------------------------- declared outputs
@dataclass(frozen=True)
class Outputs:
    """The file names a command declares it writes into its folder: patterns of one path part each
    (`*` never crosses a `/`)."""

    key: str  # the registry key, recorded in a journal
    command: str  # as messages name it
    patterns: tuple[str, ...]

    def declares(self, rel: str) -> bool:
        parts = rel.split("/")
        return any(
            len(p := pattern.split("/")) == len(parts) and all(map(fnmatchcase, parts, p)) for pattern in self.patterns
        )


_EVAL_FILES = (
    "metrics.csv",
    "metrics.json",
    "per_query.csv",
    "breakdowns.csv",
    "paired.csv",
    "report.md",
    "run_info.json",
    "report.tex",
    "plots/*.png",
    "plots/*.svg",
    "plots/*.pdf",
    "results/*.json",
)
# the side splits an --eval writes into OUT/<split>/ (benchmarks/registry.py's eval_splits after the first)
SPLIT_FOLDERS = ("compositional",)
_IMAGE = ("*.png", "*.jpg", "*.jpeg")
# world export's formats (benchmarks/{pinpoint,jsonl,cirr,fashioniq,circo}.py): their files and image folders
_EXPORT_FILES = (
    "pinpoint_licensed.parquet",
    "index_signatures.txt",
    "reference_signatures.txt",
    "query_id_map.json",
    "benchmark.json",
    "queries.jsonl",
    "judgments.jsonl",
    "corpus.txt",
    "extra_images.txt",
    "captions/cap.*.json",
    "image_splits/split.*.json",
    "annotations/val.json",
    "image_info_unlabeled2017.json",
) + tuple(
    f"{folder}/{image}" for folder in ("images", "img_raw/*", "COCO2017_unlabeled/unlabeled2017") for image in _IMAGE
)

OUTPUTS = {
    o.key: o
    for o in (
        Outputs("eval", "--eval", _EVAL_FILES + tuple(f"{s}/{p}" for s in SPLIT_FOLDERS for p in _EVAL_FILES)),
        Outputs("world-export", "world export", _EXPORT_FILES),
        Outputs("world-render", "world render", _IMAGE),
        # written in place or swapped in whole, with a manifest of their own kind (no journal): their names
        Outputs("index", "index build", ("index.faiss", "ids.json", "manifest.json")),
        Outputs(
            "world-generate",
            "world generate",
            (
                "manifest.json",
                "test_manifest.json",
                ".generate.lock",
                "*.npy",
                "test_*.jsonl",
                "train_*.jsonl",
                "compositional_*.jsonl",
                "validation_*.jsonl",
            ),
        ),
    )
}
EVAL_RUN = OUTPUTS["eval"]


def path_problem(folder: Path, rel: object) -> str | None:
    """Why `rel` is not a plain relative path inside `folder` (None when it is): not a string, absolute,
    with `..` or an empty part, or passing through a symbolic link (a link is never followed out)."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\0" in rel:
        return "not a relative path"
    if rel.startswith("/") or os.path.isabs(rel):
        return "an absolute path"
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "not a plain path inside the folder"
    here = folder
    for part in parts:
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            return None
        except OSError:
            return "cannot be read"
        if stat.S_ISLNK(mode):
            return "passes through a symbolic link"
    return None


def entry_problem(folder: Path, rel: object, outputs: Outputs) -> str | None:
    """Why a manifest's entry `rel` is not honoured for `outputs`' command; None when it is."""
    why = path_problem(folder, rel)
    if why is None and not outputs.declares(rel):
        why = f"not a file {outputs.command} writes"
    return why


# --------------------------------------------------------------------------- manifests
def _files_under(folder: Path) -> list[str]:
    """Every file below `folder` (no link followed), as a relative posix path, sorted."""
    found = []
    for top, dirs, files in os.walk(folder):
        rel_top = Path(top).relative_to(folder)
        found += [(rel_top / name).as_posix() for name in files]
        found += [(rel_top / d).as_posix() for d in dirs if os.path.islink(os.path.join(top, d))]
    return sorted(found)


def write_manifest(folder: Path, kind: str = "run", outputs: Outputs = EVAL_RUN) -> dict:
    """Record every file now in `folder` (size and sha256); the manifest file is written last. A file
    the command does not declare (a defect of the command: OUTPUTS) is said, and kept: a later
    --overwrite then refuses to replace it rather than the run being lost now."""
    rels = [rel for rel in _files_under(folder) if rel != RUN_MANIFEST]
    undeclared = [rel for rel in rels if not outputs.declares(rel)]
    if undeclared:
        print(
            f"warning: {outputs.command} wrote {', '.join(undeclared[:4])}, which it does not declare "
            "(cir_demo/utils/owned_folder.py OUTPUTS); a later --overwrite will not replace it",
            file=sys.stderr,
        )
    files = {rel: {"size": (folder / rel).stat().st_size, "sha256": sha256_file(folder / rel)} for rel in rels}
    manifest = {"written_by": WRITTEN_BY, "kind": kind, "files": files}
    write_json_atomic(folder / RUN_MANIFEST, manifest)
    return manifest


def read_manifest(folder: Path) -> dict | None:
    """The manifest of an earlier write in `folder` as written; None when there is none or it is not ours.
    Which of its entries count is `owned_entries`' business."""
    try:
        manifest = json.loads((folder / RUN_MANIFEST).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return None
    if (
        not isinstance(manifest, dict)
        or manifest.get("written_by") != WRITTEN_BY
        or not isinstance(manifest.get("files"), dict)
    ):
        return None
    return manifest


def owned_entries(folder: Path, listed, outputs: Outputs) -> tuple[dict, list[str]]:
    """({entry: record} honoured, ["entry (why)" ignored]) of a manifest's `listed` files."""
    honoured, ignored = {}, []
    for rel, record in listed.items() if isinstance(listed, dict) else []:
        why = entry_problem(folder, rel, outputs) or (None if isinstance(record, dict) else "no size and sha256")
        if why:
            ignored.append(f"{rel!r:.80} ({why})")
        else:
            honoured[rel] = record
    return honoured, ignored


@dataclass
class FolderState:
    """What an existing folder holds, seen from a write that wants to put a run there."""

    empty: bool
    manifest: dict | None  # the earlier run's, its `files` only the honoured entries
    foreign: list[str] = field(default_factory=list)  # top-level names not written by that run ("src/")
    changed: list[str] = field(default_factory=list)  # the run's files changed since it wrote them
    ignored: list[str] = field(default_factory=list)  # manifest entries not honoured, with why

    def names(self, which: list[str], limit: int = 4) -> str:
        shown = ", ".join(which[:limit])
        return shown + (f" and {len(which) - limit} more" if len(which) > limit else "")


def _shown(folder: Path, name: str) -> str:
    return name + "/" if os.path.isdir(folder / name) and not os.path.islink(folder / name) else name


def folder_state(folder: Path, outputs: Outputs = EVAL_RUN) -> FolderState:
    """Classify an existing folder's contents against the manifest in it (if any). Only the folder's own
    top level and the subfolders the run wrote into are listed: a user's tree beside it is never walked."""
    entries = sorted(e for e in os.listdir(folder) if e != JOURNAL)
    if not entries:
        return FolderState(True, None)
    manifest = read_manifest(folder)
    owned, ignored = owned_entries(folder, manifest["files"], outputs) if manifest else ({}, [])
    if manifest is not None and not owned and any(e != RUN_MANIFEST for e in entries):
        manifest = None  # a manifest naming nothing the command writes records no run of it
    owned_dirs = {"/".join(rel.split("/")[:i]) for rel in owned for i in range(1, rel.count("/") + 1)}
    foreign: list[str] = []
    for name in entries:
        if name == RUN_MANIFEST and manifest is not None or name in owned:
            continue
        if name not in owned_dirs or os.path.islink(folder / name):
            foreign.append(_shown(folder, name))
            continue
        below = [f"{name}/{rel}" for rel in _files_under(folder / name) + _empty_dirs(folder / name)]
        if any(rel not in owned and rel not in owned_dirs for rel in below):
            foreign.append(_shown(folder, name))
    changed = [rel for rel, record in owned.items() if _changed(folder / rel, record)]
    kept = None if manifest is None else {**manifest, "files": owned}
    return FolderState(False, kept, foreign, changed, ignored)


def _changed(path: Path, record: dict) -> bool:
    return path.is_file() and (path.stat().st_size != record.get("size") or sha256_file(path) != record.get("sha256"))


def _empty_dirs(folder: Path) -> list[str]:
    return sorted(
        Path(top).relative_to(folder).as_posix()
        for top, dirs, files in os.walk(folder)
        if not dirs and not files and Path(top) != folder
    )


class FolderInTheWay(UserError):
    """The target folder holds something this write did not make (message: one line)."""


def ignored_note(out: Path, state: FolderState) -> str | None:
    """The warning line for manifest entries left alone, or None."""
    if not state.ignored:
        return None
    return (
        f"warning: {out / RUN_MANIFEST}: ignored {state.names(state.ignored, 3)}; "
        "only files inside the folder that this command writes are ever replaced"
    )


def replace_owned(new: Path, out: Path, overwrite: bool, outputs: Outputs = EVAL_RUN) -> None:
    """Move the complete write `new` (with its manifest) to `out`.

    `out` missing or empty: one rename. `out` an earlier run and `overwrite`: under a journal, that run's
    files (the entries its manifest lists that `outputs` declares) are set aside, the new ones moved in,
    then the set-aside ones removed; anything else there is left as it was (and a new file whose name is
    taken by something the earlier run did not write stops the move before it starts)."""
    from cir_demo.utils.folder_journal import replace_under_journal, settle

    if not os.path.lexists(out):
        os.rename(new, out)
        return
    settle(out)
    if out.is_dir() and not os.listdir(out):
        os.rename(new, out)  # onto an empty folder: one atomic step, the folder's name never free
        return
    state = folder_state(out, outputs)
    if state.manifest is None or not overwrite or state.changed:
        raise FolderInTheWay(f"{out}: {refusal(out, state)}")
    if state.ignored:
        print(ignored_note(out, state), file=sys.stderr)
    owned = set(state.manifest["files"])
    new_files = [rel for rel in _files_under(new) if rel != RUN_MANIFEST]
    taken = [rel for rel in new_files if rel not in owned and os.path.lexists(out / rel)]
    taken += [rel for rel in new_files if rel not in taken and path_problem(out, rel)]
    if taken:
        raise FolderInTheWay(
            f"{out}: the new run would overwrite {state.names(taken)}, which the earlier run "
            "did not write; move them or name another folder"
        )
    old = [rel for rel in sorted(owned) if os.path.isfile(out / rel)]
    replace_under_journal(new, out, old, new_files, outputs)


def refusal(out: Path, state: FolderState) -> str:
    """Why a run may not go into the existing folder `out`: one line naming what is in the way."""
    if state.manifest is None:
        listed = [_shown(out, name) for name in sorted(os.listdir(out)) if name != JOURNAL]
        why = (
            f"its {RUN_MANIFEST} names none of them as this command's outputs"
            if os.path.lexists(out / RUN_MANIFEST)
            else f"no {RUN_MANIFEST}"
        )
        return f"holds files that no cir_demo run recorded ({state.names(listed)}; {why}); name a new or empty folder"
    if state.changed:
        return (
            f"the earlier run's {state.names(state.changed)} changed since it was written; "
            "move them or name another folder"
        )
    beside = f" and {state.names(state.foreign)}, which it did not write" if state.foreign else ""
    return (
        f"holds an earlier cir_demo run{beside}; add --overwrite to replace only that run's files, "
        "or name a new or empty folder"
    )


def write_problem(out: Path, overwrite: bool, outputs: Outputs = EVAL_RUN) -> str | None:
    """Why a run may not be written to `out`, checked before any work; None when it may. A replacement
    a kill interrupted there is completed or undone first."""
    if not out.is_dir():
        return None
    from cir_demo.utils.folder_journal import settle

    settle(out)
    state = folder_state(out, outputs)
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
