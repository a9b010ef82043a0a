"""Eval run folders of a benchmark: where the store finds stored runs and the Report lists them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cir_demo.benchmarks.registry import BENCHMARKS
from cir_demo.utils.lru import LRU


@dataclass
class RunSummary:
    path: Path
    label: str
    # "fingerprint" (same benchmark files), "name" (same benchmark name, no fingerprint recorded), or for a
    # folder given to `--runs`: "given" (no record of its benchmark), "other" (another benchmark's files)
    matches: str


def list_runs(
    benchmark_name: str, fingerprint: str, root: Path | None = None, extra: Sequence[str | Path] = ()
) -> list[RunSummary]:
    """Eval run folders (with metrics.csv) of this benchmark, newest first: those under runs/, those
    `--eval --results-json` wrote elsewhere (cir_demo/results/run_folders.py) and the `extra` folders
    given to the app (`--runs FOLDER`); and a run's other test splits (`<run>/compositional/`).

    A copy of shipped outputs installed by other code is left out (it is not what this code
    writes). A run matches by the benchmark fingerprint (its files' checksums and split) that
    `run_info.json` or metrics.json names; a run of other files of a benchmark with the same name is
    left out. Only a run that names no fingerprint (written by older code) matches by the benchmark
    name in metrics.json or the folder name suffix `-<benchmark>` ("name"). An `extra` folder is listed
    whatever it holds ("other" when it names another fingerprint) and comes first: the folder given to
    `--runs` is the Report's default.
    """
    from cir_demo.index.prebuilt_run import stale_installed_copy
    from cir_demo.paths import runs_dir
    from cir_demo.results.run_folders import recorded_run_folders

    root = Path(root) if root is not None else runs_dir()
    folders = list(root.iterdir()) if root.is_dir() else []
    folders += recorded_run_folders() if root == runs_dir() else []
    given = {Path(f).resolve() for f in extra}
    out, seen = [], set()
    for d in [*folders, *given, *split_folders([*folders, *given])]:
        # a dot-folder is work in progress (staging, an install being written), never a run
        if (
            d.resolve() in seen
            or d.name.startswith(".")
            or not (d.is_dir() and (d / "metrics.csv").is_file())
            or stale_installed_copy(d)
            or (d.name in _SPLIT_FOLDERS and stale_installed_copy(d.parent))
        ):
            continue
        seen.add(d.resolve())
        is_given = d.resolve() in given
        match = _match(d, benchmark_name, fingerprint)
        if match == "other" and not is_given:
            continue
        match = match or ("given" if is_given else None)
        if match:
            out.append(((is_given, match == "fingerprint", d.stat().st_mtime), RunSummary(d, _label(d, root), match)))
    out.sort(key=lambda t: (*t[0], t[1].label), reverse=True)
    return [r for _, r in out]


# the folders in which one `--eval` run holds its other test splits (`compositional/`): each is a run of
# its own split (its run_info.json names that split's fingerprint)
_SPLIT_FOLDERS = tuple(dict.fromkeys(s for spec in BENCHMARKS.values() for s in spec.eval_splits[1:]))


def split_folders(folders: Sequence[Path]) -> list[Path]:
    return [
        d / name
        for d in folders
        if not d.name.startswith(".")
        for name in _SPLIT_FOLDERS
        if (d / name / "metrics.csv").is_file()
    ]


# (folder, benchmark name, fingerprint, the two files' states) -> `_match`: every page load lists the runs,
# and a world run's metrics.json (~100 KB) parsed again each time was most of the listing's CPU
_MATCHES = LRU(1024)


def _file_state(path: Path) -> tuple | None:
    """What changes when a file is written (atomic writes replace it: a new inode), None when absent."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns)


def _match(d: Path, benchmark_name: str, fingerprint: str) -> str | None:
    """`_read_match`, read again only when metrics.json or run_info.json changed."""
    key = (str(d), benchmark_name, fingerprint, _file_state(d / "metrics.json"), _file_state(d / "run_info.json"))
    found = _MATCHES.get(key)
    if found is None:
        found = (_read_match(d, benchmark_name, fingerprint),)
        _MATCHES.put(key, found)
    return found[0]


def _read_match(d: Path, benchmark_name: str, fingerprint: str) -> str | None:
    """ "fingerprint" (these files), "other" (another benchmark's or other files'), "name" (no fingerprint
    recorded, same benchmark name) or None."""
    meta = read_json(d / "metrics.json") or {}
    named = (read_json(d / "run_info.json") or {}).get("benchmark_fingerprint") or meta.get("benchmark_fingerprint")
    if named:
        return "fingerprint" if named == fingerprint else "other"
    if (d / "run_info.json").is_file():  # a pipeline run's record without a fingerprint: not of these files
        return "other"
    return "name" if meta.get("benchmark") == benchmark_name or d.name.endswith(f"-{benchmark_name}") else None


def _label(d: Path, root: Path) -> str:
    """The folder's name under runs/; elsewhere its last two parts (a run's server path is never shown whole)."""
    return d.name if d.parent == root else "/".join(d.parts[-2:])


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
