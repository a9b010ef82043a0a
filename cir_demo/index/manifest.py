"""On-disk corpus indexes: layout, manifest, staleness checks, loading.

Layout: `indexes/<benchmark>/<retriever>/` holds
- `index.faiss`   the faiss index (row i is corpus image ids[i]),
- `ids.json`      the ordered corpus image ids,
- `manifest.json` what the index was built from (`IndexManifest`).

An index whose manifest does not match the retriever or corpus being served is
stale; `load_index` refuses it (`StaleIndexError` lists the reasons) unless
`allow_stale=True`, in which case `LoadedIndex.stale_reasons` says what is off.

A directory is replaced as a whole: the new one is written beside it and swapped
in with two renames (`replace_dir`). A crash between the renames leaves the old
directory under a hidden `.NAME.old-*` name, which `recover_dir` (run before
every read) moves back. A folder holding anything but an index's own files is never
replaced (`refuse_foreign`, checked before a build encodes anything).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from cir_demo.errors import UserError
from cir_demo.paths import indexes_dir
from cir_demo.utils import versions
from cir_demo.utils.io import new_dir_beside, replace_dir, write_json_atomic  # noqa: F401 (re-exported)

INDEX_FILE = "index.faiss"
IDS_FILE = "ids.json"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1
# Libraries whose major version change invalidates an index (file format or numerics).
CHECKED_LIBRARIES = ("faiss", "numpy", "torch")


class StaleIndexError(RuntimeError):
    """An index that is missing, damaged or built for another retriever/corpus."""

    def __init__(self, directory: str | os.PathLike, reasons: Sequence[str]):
        self.directory = Path(directory)
        self.reasons = list(reasons)
        super().__init__(f"index {self.directory} is not usable: " + "; ".join(self.reasons))


class MissingIndexError(StaleIndexError):
    """No complete index in the directory (never built, or files removed)."""


# --------------------------------------------------------------------------- manifest
@dataclass
class IndexManifest:
    benchmark: str
    retriever: str
    retriever_spec: dict
    spec_hash: str
    weights_sha256: str | None
    corpus_sha256: str
    dim: int
    count: int
    kind: str
    params: dict
    library_versions: dict
    built_at: str
    build_seconds: float
    # Optional extras: a benchmark-provided fingerprint of image content
    # (benchmark.info["corpus_fingerprint"]), the encoding device, shard count.
    corpus_fingerprint: str | None = None
    device: str | None = None
    num_shards: int = 1
    format: int = MANIFEST_FORMAT
    # {file name: {"size": bytes, "sha256": hex}} for index.faiss and ids.json (see cir_demo.integrity);
    # empty in manifests written before it existed, whose files are then checked by loading them
    files: dict = field(default_factory=dict)
    # where a committed (prebuilt) file came from: the world's size, seed and generator version, the
    # code version, the retrievers sharing it (`cir_demo.index.prebuilt`); empty for built indexes
    provenance: dict = field(default_factory=dict)
    # the faiss index_factory string of `kind` with `params`, and how the kind was chosen ("auto: <why>"
    # from `choose.choose_index`, or "requested"); None in manifests written before kinds were chosen
    factory: str | None = None
    choice: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, source: str = "manifest") -> "IndexManifest":
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        missing = sorted(required - set(data))
        if missing:
            raise ValueError(f"{source}: missing field(s) {', '.join(missing)}")
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{source}: unknown field(s) {', '.join(unknown)}")
        for name, typ in (
            ("dim", int),
            ("count", int),
            ("retriever_spec", dict),
            ("params", dict),
            ("library_versions", dict),
            ("files", dict),
            ("provenance", dict),
        ):
            if name not in data:
                continue
            if not isinstance(data[name], typ) or isinstance(data[name], bool):
                raise ValueError(f"{source}: field {name!r} must be {typ.__name__}, got {data[name]!r:.80}")
        return cls(**data)


def corpus_checksum(ids: Sequence[str]) -> str:
    """sha256 of the ordered id list (as compact JSON, so no separator is ambiguous)."""
    ids = list(ids)
    bad = [i for i, x in enumerate(ids) if not isinstance(x, str)]
    if bad:
        raise ValueError(f"corpus ids must be strings; position {bad[0]} holds {ids[bad[0]]!r}")
    blob = json.dumps(ids, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def weights_checksum(spec: dict) -> str | None:
    """The weights sha256 a retriever spec declares (`weights_sha256`, or `weights.sha256`), else None.

    A per-file mapping ({file name: sha256}, several weight shards) is folded
    into one sha256 of its canonical JSON.
    """
    value = spec.get("weights_sha256")
    if value is None and isinstance(spec.get("weights"), dict):
        value = spec["weights"].get("sha256")
    if isinstance(value, dict):
        blob = json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()
    return str(value) if value is not None else None


def index_code() -> dict:
    """The code key of a built index file (`cir_demo.utils.code_hash`): the faiss build and search code
    and what it imports, and the libraries that lay out its bits (the vectors' own code is in the spec)."""
    from cir_demo.utils.code_hash import code_key

    return code_key(("cir_demo.index.faiss_index",), ("faiss", "numpy"))


def library_versions() -> dict[str, str | None]:
    """Versions of the libraries an index depends on (read from package metadata, no imports)."""
    return versions.library_versions("faiss", "numpy", "torch", "cir_demo")


def _major(version: str | None) -> str | None:
    return None if version is None else str(version).split(".")[0]


# --------------------------------------------------------------------------- layout
_SAFE_NAME = re.compile(r"[A-Za-z0-9._+-]+")


def safe_component(name: str) -> str:
    """`name` as one safe path component; unsafe names get a readable form plus a short hash."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"index directory name must be a non-empty string, got {name!r}")
    if _SAFE_NAME.fullmatch(name) and not name.startswith("."):
        return name
    readable = re.sub(r"[^A-Za-z0-9._+-]+", "_", name).strip("._") or "name"
    return f"{readable}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:8]}"


def index_dir(benchmark_name: str, retriever_name: str) -> Path:
    """`indexes/<benchmark>/<retriever>/` under `cir_demo.paths.indexes_dir()`."""
    return indexes_dir() / safe_component(benchmark_name) / safe_component(retriever_name)


def _siblings(directory: Path, tag: str) -> list[Path]:
    if not directory.parent.is_dir():
        return []
    prefix = f".{directory.name}.{tag}-"
    return sorted(p for p in directory.parent.iterdir() if p.name.startswith(prefix))


def recover_dir(directory: str | os.PathLike) -> None:
    """Finish or undo a directory swap that a crash interrupted (see module doc)."""
    directory = Path(directory)
    olds = _siblings(directory, "old")
    if not olds:
        return
    if not directory.exists():
        newest = max(olds, key=lambda p: p.stat().st_mtime)
        with contextlib.suppress(FileNotFoundError):  # another process may have recovered it
            os.rename(newest, directory)
        olds = [p for p in olds if p != newest]
    for old in olds if _project_folder(directory) else []:  # a user's folder: nothing there is removed
        shutil.rmtree(old, ignore_errors=True)


class IndexFolderInTheWay(UserError):
    """An index folder holds files that are not the index's own (message: one line naming them)."""


def _project_folder(directory: Path) -> bool:
    """`directory` is inside the project's own indexes folder (no user names it)."""
    try:
        root = indexes_dir().resolve()
    except Exception:  # a data folder variable naming a file: no folder is the project's
        return False
    return root in directory.resolve().parents


def foreign_entries(directory: Path) -> list[str]:
    """What `directory` holds besides an index's own files, which a build replaces with the folder. Only
    the layout's three files are an index's (its manifest's `files` can name nothing else), and in a
    folder the user named (`--out-dir`) only when its manifest.json is an index manifest: a folder is
    never taken for an index by its file names alone. In the project's indexes folder a damaged index
    (its manifest unreadable) is still the project's to rebuild."""
    if not directory.is_dir():
        return []
    if not _project_folder(directory):
        try:
            read_manifest(directory)
        except Exception:  # no index manifest: nothing here is an index's
            return sorted(os.listdir(directory))
    return sorted(name for name in os.listdir(directory) if name not in (INDEX_FILE, IDS_FILE, MANIFEST_FILE))


def index_folder_problem(directory: Path) -> str | None:
    """Why an index may not be written to (and so replace) `directory`; None when it may."""
    if directory.is_symlink():
        return "is a symbolic link; links are not written through, name the folder itself"
    foreign = foreign_entries(directory)
    if not foreign:
        return None
    shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
    return (
        f"holds files that are not part of an index ({shown}); a build replaces the whole folder, "
        "so name a new or empty folder"
    )


def refuse_foreign(directory: Path) -> None:
    """IndexFolderInTheWay when building into `directory` would remove something that is not the index's."""
    problem = index_folder_problem(directory)
    if problem:
        raise IndexFolderInTheWay(f"index folder {directory}: {problem}")


@contextlib.contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """An exclusive lock per index directory so two builders never interleave (POSIX only)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: no lock, swaps are still atomic per build
        yield
        return
    with open(directory.with_name(f".{directory.name}.lock"), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            # Holding the lock, no other build is running: its leftovers are garbage.
            for tmp in _siblings(directory, "tmp") if _project_folder(directory) else []:
                shutil.rmtree(tmp, ignore_errors=True)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_index_files(out: Path, index, ids: Sequence[str], manifest: IndexManifest) -> None:
    """Write the three files of an index into directory `out` (manifest last, recording the
    size and sha256 of the other two)."""
    from cir_demo.index.faiss_index import write_index
    from cir_demo.integrity import file_record

    write_index(index, out / INDEX_FILE)
    write_json_atomic(out / IDS_FILE, list(ids), indent=None)
    manifest.files = {name: file_record(out / name) for name in (INDEX_FILE, IDS_FILE)}
    write_json_atomic(out / MANIFEST_FILE, manifest.to_dict())


# --------------------------------------------------------------------------- reading
def read_manifest(directory: str | os.PathLike) -> IndexManifest:
    path = Path(directory) / MANIFEST_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    return IndexManifest.from_dict(data, source=str(path))


def _spec_difference(old: dict, new: dict) -> str:
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return ", ".join(keys[:6]) + (" ..." if len(keys) > 6 else "")


def kind_reasons(manifest: IndexManifest) -> list[str]:
    """ "index kind unknown" / "index parameters invalid" for a kind or parameters this version cannot
    build or set (a manifest from another version, or edited by hand); [] when they are fine."""
    from cir_demo.index.kinds import INDEX_KINDS, resolve_params

    if manifest.kind == "milvus":  # a Milvus collection's manifest (index/milvus_build.py)
        from cir_demo.index.milvus_build import milvus_param_reasons

        return milvus_param_reasons(manifest)
    if manifest.kind not in INDEX_KINDS:
        return [f"index kind unknown: {manifest.kind!r} is none of {', '.join(INDEX_KINDS)}"]
    try:
        resolve_params(manifest.kind, max(manifest.count, 1), manifest.dim, **manifest.params)
    except (ValueError, TypeError) as exc:
        return [f"index parameters invalid: {exc}"]
    return []


def stale_reasons(
    manifest: IndexManifest,
    retriever=None,
    corpus_ids: Sequence[str] | None = None,
    corpus_fingerprint: str | None = None,
) -> list[str]:
    """Why `manifest` does not describe an index of `retriever` over `corpus_ids` ([] = fresh)."""
    reasons: list[str] = []
    if manifest.format != MANIFEST_FORMAT:
        reasons.append(f"manifest format {manifest.format} is not the current format {MANIFEST_FORMAT}")
    reasons += kind_reasons(manifest)
    if retriever is not None:
        if manifest.retriever != retriever.name:
            reasons.append(f"retriever changed: built for {manifest.retriever!r}, serving {retriever.name!r}")
        if manifest.spec_hash != retriever.spec_hash():
            differ = _spec_difference(manifest.retriever_spec, retriever.spec)
            reasons.append(
                f"retriever spec changed ({differ or 'excluded keys only'}): "
                f"spec hash {manifest.spec_hash[:12]} -> {retriever.spec_hash()[:12]}"
            )
        weights = weights_checksum(retriever.spec)
        if manifest.weights_sha256 != weights:
            reasons.append(f"weights changed: sha256 {str(manifest.weights_sha256)[:12]} -> {str(weights)[:12]}")
        if manifest.dim != int(retriever.dim):
            reasons.append(f"dim mismatch: index holds {manifest.dim}-d vectors, retriever gives {retriever.dim}-d")
    if corpus_ids is not None:
        checksum = corpus_checksum(corpus_ids)
        if manifest.corpus_sha256 != checksum:
            reasons.append(
                f"corpus changed: built over {manifest.count} images (sha256 {manifest.corpus_sha256[:12]}), "
                f"corpus now has {len(corpus_ids)} (sha256 {checksum[:12]})"
            )
    if corpus_fingerprint is not None and manifest.corpus_fingerprint != corpus_fingerprint:
        reasons.append(
            f"corpus images changed: fingerprint {str(manifest.corpus_fingerprint)[:12]} -> {corpus_fingerprint[:12]}"
        )
    if INDEX_FILE in manifest.files and manifest.provenance.get("index_code") != index_code():
        reasons.append(
            "index code or libraries changed: built by "
            f"{str((manifest.provenance.get('index_code') or {}).get('sha256'))[:12]}, running "
            f"{index_code()['sha256'][:12]}"
        )
    now = library_versions()
    for lib in CHECKED_LIBRARIES:
        built, current = manifest.library_versions.get(lib), now.get(lib)
        if built and current and _major(built) != _major(current):
            reasons.append(f"library major version change: {lib} {built} -> {current}")
    return reasons


def _missing_files(directory: Path) -> list[str]:
    if not directory.is_dir():
        return [f"missing: no index at {directory}"]
    return [
        f"missing: {name} not found in {directory}"
        for name in (MANIFEST_FILE, INDEX_FILE, IDS_FILE)
        if not (directory / name).is_file()
    ]


def damage_reasons(directory: Path, manifest: IndexManifest, verify: bool = False) -> list[str]:
    """ "damaged: <file>: <what>" for index files that do not match the manifest's records
    (size always; sha256 with `verify`)."""
    from cir_demo.integrity import check_records

    return check_records(directory, manifest.files, verify=verify)


def check_index(
    directory: str | os.PathLike,
    retriever=None,
    corpus_ids: Sequence[str] | None = None,
    corpus_fingerprint: str | None = None,
    verify: bool = False,
) -> list[str]:
    """Human-readable reasons why the index in `directory` cannot serve `retriever` over `corpus_ids`.

    [] means fresh. Reasons start with a short tag: "missing", "unreadable
    manifest", "damaged" (a file does not match the manifest's size, or sha256 with
    `verify`), "retriever changed", "retriever spec changed", "weights changed",
    "dim mismatch", "corpus changed", "library major version change".
    """
    directory = Path(directory)
    recover_dir(directory)
    missing = _missing_files(directory)
    if missing:
        return missing
    try:
        manifest = read_manifest(directory)
    except (OSError, ValueError, TypeError) as exc:
        return [f"unreadable manifest: {exc}"]
    return damage_reasons(directory, manifest, verify) + stale_reasons(
        manifest, retriever, corpus_ids, corpus_fingerprint
    )


@dataclass
class LoadedIndex:
    """An index read from disk: the faiss index, its ordered ids and its manifest."""

    manifest: IndexManifest
    index: Any
    ids: list[str]
    directory: Path | None = None
    stale_reasons: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def is_stale(self) -> bool:
        return bool(self.stale_reasons)

    def search_arrays(self, xq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw (D, I) with -1/-inf padding (see `faiss_index.search`)."""
        from cir_demo.index.faiss_index import search

        return search(self.index, xq, k)

    def search(self, xq: np.ndarray, k: int) -> list[tuple[list[str], np.ndarray]]:
        """Per query row: (image ids best first, float32 scores), padding stripped."""
        D, I = self.search_arrays(xq, k)
        out = []
        for d_row, i_row in zip(D, I):
            keep = i_row >= 0
            out.append(([self.ids[i] for i in i_row[keep]], d_row[keep]))
        return out


def _kind_damage(index, manifest: IndexManifest) -> list[str]:
    """ "damaged: ..." when the faiss index is not of the kind its manifest records (a known kind only)."""
    from cir_demo.index.faiss_index import index_kind
    from cir_demo.index.kinds import KINDS

    if manifest.kind not in KINDS:
        return []
    try:
        found = index_kind(index)
    except ValueError as exc:
        found = str(exc)
    if found != manifest.kind:
        return [f"damaged: {INDEX_FILE} holds a {found!r} index, the manifest records {manifest.kind!r}"]
    return []


def load_index(
    directory: str | os.PathLike,
    retriever=None,
    corpus_ids: Sequence[str] | None = None,
    allow_stale: bool = False,
    corpus_fingerprint: str | None = None,
) -> LoadedIndex:
    """Read the index in `directory`, refusing a stale one unless `allow_stale`.

    Missing or damaged files always raise (`MissingIndexError` / `StaleIndexError`).
    """
    from cir_demo.index.faiss_index import read_index

    directory = Path(directory)
    reasons = check_index(directory, retriever, corpus_ids, corpus_fingerprint)
    if any(r.startswith(("missing", "unreadable", "damaged")) for r in reasons):
        cls = MissingIndexError if reasons[0].startswith("missing") else StaleIndexError
        raise cls(directory, reasons)
    if reasons and not allow_stale:
        raise StaleIndexError(directory, reasons)
    manifest = read_manifest(directory)
    ids_path = directory / IDS_FILE
    try:
        ids = json.loads(ids_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise StaleIndexError(directory, [f"damaged: {ids_path} is not valid JSON ({exc})"]) from None
    if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
        raise StaleIndexError(directory, [f"damaged: {ids_path} must be a JSON list of strings"])
    try:
        index = read_index(directory / INDEX_FILE)
    except RuntimeError as exc:  # faiss refuses a damaged file
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise StaleIndexError(
            directory, [f"damaged: {directory / INDEX_FILE}: faiss cannot read it ({first[:200]})"]
        ) from None
    damage = []
    if corpus_checksum(ids) != manifest.corpus_sha256:
        damage.append(f"damaged: {IDS_FILE} does not match the manifest's corpus checksum")
    if int(index.ntotal) != len(ids) or len(ids) != manifest.count:
        damage.append(
            f"damaged: index holds {index.ntotal} vectors, {IDS_FILE} {len(ids)} ids, manifest says {manifest.count}"
        )
    if int(index.d) != manifest.dim:
        damage.append(f"damaged: index dimension {index.d} != manifest dim {manifest.dim}")
    damage += _kind_damage(index, manifest)
    if damage:
        raise StaleIndexError(directory, damage)
    # Query-time parameters come from the manifest (faiss stores them too; this makes it explicit).
    from cir_demo.index.kinds import KINDS, search_params

    if manifest.kind in KINDS:  # an unknown kind is stale (kind_reasons) and served as faiss stored it
        from cir_demo.index.faiss_index import set_search_params

        set_search_params(index, **search_params(manifest.kind, manifest.params))
    return LoadedIndex(manifest=manifest, index=index, ids=ids, directory=directory, stale_reasons=reasons)


def list_indexes(root: str | os.PathLike | None = None) -> list[Path]:
    """Every `<benchmark>/<retriever>` directory under `root` that holds a manifest."""
    root = Path(root) if root is not None else indexes_dir()
    if not root.is_dir():
        return []
    found = []
    swapped = re.compile(r"^\.(.+)\.old-[0-9a-f]{8}$")
    for bench in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for hidden in list(bench.iterdir()):  # a swap interrupted by a crash: put the old one back
            m = swapped.match(hidden.name)
            if m:
                recover_dir(bench / m.group(1))
        for d in sorted(p for p in bench.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if (d / MANIFEST_FILE).is_file():
                found.append(d)
    return found


def corpus_fingerprint(benchmark) -> str | None:
    """A benchmark's own fingerprint of its image content, when it provides one.

    `info["corpus_fingerprint"]`, else `info["checksum"]` (the offline world's
    content checksum: its image ids repeat across seeds, its pixels do not).
    """
    info = getattr(benchmark, "info", None) or {}
    value = info.get("corpus_fingerprint", info.get("checksum"))
    return None if value is None else str(value)


def benchmark_index_name(benchmark) -> str:
    """The `indexes/<name>/` folder of a benchmark: `info["index_name"]` when set (variants of one
    benchmark, e.g. world sizes, then keep separate indexes), else its name."""
    return str((getattr(benchmark, "info", None) or {}).get("index_name") or benchmark.name)
