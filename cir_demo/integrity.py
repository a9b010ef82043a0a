"""File integrity: size + sha256 records for the files a manifest covers, and the check of
the committed model weights under `assets/*/manifest.json`.

A record is `{"size": bytes, "sha256": hex}`. Checking a record is cheap without
`verify` (a size comparison: catches truncation and removal) and exact with it.
Every problem is one line that starts with "damaged: <file>: ".
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping


class DamagedFileError(ValueError):
    """A file that exists for a manifest but does not match it; `str()` is one line per file."""

    def __init__(self, problems: Iterable[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def file_record(path: str | os.PathLike) -> dict:
    from cir_demo.utils.io import sha256_file

    path = Path(path)
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def check_record(
    path: str | os.PathLike, record: Mapping[str, Any] | str, verify: bool = False, label: str | None = None
) -> str | None:
    """Why `path` does not match `record` (a record, or a bare sha256 string), else None.

    Without `verify` only presence and size are checked (records without a size are
    then hashed anyway, so an old manifest is never trusted blindly)."""
    from cir_demo.utils.io import sha256_file

    path = Path(path)
    label = label or str(path)
    if isinstance(record, str):
        record = {"sha256": record}
    if not path.is_file():
        return f"damaged: {label}: missing"
    size = record.get("size")
    actual = path.stat().st_size
    if size is not None and actual != size:
        return f"damaged: {label}: {actual} bytes, the manifest records {size}"
    if (verify or size is None) and record.get("sha256"):
        digest = sha256_file(path)
        if digest != record["sha256"]:
            return f"damaged: {label}: sha256 {digest[:12]}... does not match the manifest's {record['sha256']}"
    return None


def check_records(
    root: str | os.PathLike, records: Mapping[str, Any], verify: bool = False, label_root: str | None = None
) -> list[str]:
    """`check_record` for every `{relative name: record}` under `root`."""
    root = Path(root)
    out = []
    for name, record in records.items():
        problem = check_record(root / name, record, verify, label=f"{label_root or root}/{name}")
        if problem:
            out.append(problem)
    return out


# --------------------------------------------------------------------------- committed weights
def read_packed_manifest(path: Path, fmt: int, what: str) -> dict:
    """The manifest of files the repository ships packed (`format`, `key`, and `files`: per file the record
    of its content and of its `stored` form); ValueError, one line naming `path`, when it cannot be used."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from None
    if (
        not isinstance(data, dict)
        or data.get("format") != fmt
        or not isinstance(data.get("files"), dict)
        or not isinstance(data.get("key"), dict)
    ):
        raise ValueError(f"{path}: not a format-{fmt} manifest of {what} (key, files)")
    return data


def stored_problems(directory: Path, manifest: Mapping[str, Any]) -> list[str]:
    """`check_records` (sha256 verified) of the stored forms a packed manifest records under `directory`."""
    stored = {k: v for f in manifest["files"].values() for k, v in (f.get("stored") or {}).items()}
    return check_records(directory, stored, verify=True)


def refuse_unrecorded_files(directory: Path, manifest_name: str) -> None:
    """ValueError (one line naming the folder and the files) when `directory` holds a file that its packed
    manifest does not record (the manifest aside): replacing the folder as a whole would delete something
    the packer did not write. An absent or empty folder passes; with no readable manifest, every file counts."""
    if not directory.is_dir():
        return
    try:
        manifest = json.loads((directory / manifest_name).read_text(encoding="utf-8"))
        recorded = {k for f in manifest["files"].values() for k in (f.get("stored") or {})}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        recorded = set()
    present = (p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir())
    foreign = sorted(rel for rel in present if rel not in recorded and rel != manifest_name)
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise ValueError(
            f"{directory}: holds {', '.join(foreign[:5])}{more}, which its {manifest_name} does not "
            "record; nothing replaced (move them elsewhere first)"
        )


def _assets_root() -> Path:
    from cir_demo.paths import assets_dir

    return assets_dir()


def asset_names_in(obj: Any) -> list[str]:
    """The `assets/<name>` folders a config mentions (any string value starting with "assets/")."""
    found: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, str):
            parts = x.replace("\\", "/").split("/")
            if len(parts) >= 2 and parts[0] == "assets" and parts[1]:
                found.add(parts[1])
        elif isinstance(x, Mapping):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(obj)
    return sorted(found)


def restore_hint(name: str, manifest: Mapping[str, Any] | None = None) -> str:
    model = (manifest or {}).get("model") or name
    return f"restore it with `git checkout assets/{name}/` or retrain with `python -m cir_demo train {model}`"


def check_asset(name: str, verify: bool = True, _seen: set[str] | None = None) -> list[str]:
    """Problems with the committed weights in `assets/<name>/` and the assets its manifest depends on
    (e.g. the world-CLIP a head was trained on). [] when every file matches its sha256."""
    seen = _seen if _seen is not None else set()
    if name in seen:
        return []
    seen.add(name)
    folder = _assets_root() / name
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        return [f"damaged: assets/{name}/manifest.json: missing; {restore_hint(name)}"]
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = manifest["files"]
        if not isinstance(files, dict):
            raise TypeError("'files' is not an object")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"damaged: assets/{name}/manifest.json: unreadable ({type(exc).__name__}: {exc}); {restore_hint(name)}"]
    problems = [
        f"{p}; {restore_hint(name, manifest)}"
        for p in check_records(folder, files, verify=verify, label_root=f"assets/{name}")
    ]
    for dep in asset_names_in({k: v for k, v in manifest.items() if k != "files"}):
        if (_assets_root() / dep).is_dir():
            problems += check_asset(dep, verify, seen)
    return problems


def check_assets_of(config: Any, verify: bool = True) -> list[str]:
    """Problems with every `assets/<name>` a retriever config or reranker setting refers to."""
    problems: list[str] = []
    seen: set[str] = set()
    for name in asset_names_in(config):
        problems += check_asset(name, verify, seen)
    return problems


def require_assets_of(config: Any, verify: bool = True) -> None:
    """DamagedFileError unless every asset `config` names matches its manifest."""
    problems = check_assets_of(config, verify)
    if problems:
        raise DamagedFileError(problems)
