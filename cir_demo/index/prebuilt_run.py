"""The default world's complete `--eval` outputs, committed beside its prebuilt corpus embeddings, so
that a fresh clone's app has its failure sorts and Report at once instead of after a background run.

Layout: `indexes/prebuilt/<benchmark index name>/eval/` holds
- `manifest.json`: `key`, what the outputs are tied to (the benchmark fingerprint, the spec hash of
  every retriever, query template included, and of the reranker, so the weights' sha256 too; the
  rerank depth; the sha256 of the source of every package that shapes the outputs; the versions of
  the libraries that do and of Python), the `command` that wrote them, `provenance`, and `files`: for every file
  of the run folder (`results/` left out, also in a split's folder such as `compositional/`: the app reads
  no rankings), the size and sha256 of its
  content and of its stored form;
- the stored files: text files xz-compressed (`NAME.xz`), plots as they are.

`install_shipped_run` copies them into the runs folder as `prebuilt-<index name>-<key digest>/`, a
run folder like any other plus `prebuilt.json` (the manifest), only when the key matches what is
served and every sha256 matches; then the app finds a complete run and starts no background run.
A copy installed by other code is never listed as a run (`stale_installed_copy`), so a stale one
is computed again in the background, never served as current. Written by `python -m cir_demo
index prebuilt` (harness/prebuilt_run_build.py), which runs `--eval` itself.
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
import os
from pathlib import Path
from typing import Mapping

from cir_demo.index.first_query import FIELD as FIRST_QUERY_FIELD
from cir_demo.index.manifest import MANIFEST_FILE, new_dir_beside, safe_component
from cir_demo.paths import REPO_ROOT
from cir_demo.utils.code_hash import code_text
from cir_demo.utils.stat_memo import memo_by_stats

RUN_FOLDER = "eval"  # under the benchmark's prebuilt folder
INSTALLED_MARK = "prebuilt.json"  # in an installed copy: the manifest it was installed from
FORMAT = 1
LEFT_OUT = ("results",)  # folders of a run folder not shipped, at its top or in a split's folder (`compositional/`)
COMPRESSED_SUFFIXES = (".csv", ".json", ".md", ".txt")
# cir_demo packages whose code never shapes what `--eval` writes (the app, test builders, training:
# trained weights are tied by their sha256); every other source file is part of the key
NOT_OUTPUT_CODE = ("ui", "explorer", "testing", "training")
OUTPUT_LIBRARIES = ("numpy", "pandas", "matplotlib", "faiss", "torch", "open_clip", "pillow", "scipy")
# run_info.json entries that record the run itself rather than its results (times, command line)
RUN_RECORD_KEYS = ("timings_s", "wall_s", "argv")


@functools.lru_cache(maxsize=1)
def output_code_sha256() -> str:
    """sha256 over the path and code (`code_text`) of every cir_demo module that shapes `--eval` outputs
    (kept by `memo_by_stats` for the next process while no file changes)."""
    package = REPO_ROOT / "cir_demo"
    paths = [
        path
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).parts[0] not in NOT_OUTPUT_CODE
        and "__pycache__" not in path.relative_to(package).parts
    ]

    def compute() -> str:
        digest = hashlib.sha256()
        for path in paths:
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(code_text(path) + b"\0")
        return digest.hexdigest()

    return memo_by_stats("eval-output-code", paths, compute)


def output_libraries() -> dict:
    from cir_demo.utils.versions import library_versions

    return library_versions(*OUTPUT_LIBRARIES)


def run_key(fingerprint: str, retrievers: Mapping[str, str], reranker: str | None, top_n: int | None) -> dict:
    """What a run's outputs depend on: benchmark content, specs (weights included), rerank depth, code, libraries."""
    return {
        "benchmark_fingerprint": fingerprint,
        "retrievers": dict(sorted(retrievers.items())),
        "reranker": reranker,
        "rerank_top_n": top_n if reranker else None,
        "code_sha256": output_code_sha256(),
        "libraries": output_libraries(),
        "python": python_version(),
    }


def python_version() -> str:
    """The running Python's major.minor (its float formatting and hashing shape written files)."""
    import sys

    return "{}.{}".format(*sys.version_info[:2])


def key_problems(shipped: Mapping, served: Mapping) -> list[str]:
    """Why outputs with key `shipped` are not those of the `served` view ([] = they are). The served
    columns must be among the shipped ones; the reranker counts when one is served."""
    out = []
    if shipped.get("benchmark_fingerprint") != served["benchmark_fingerprint"]:
        out.append(f"benchmark changed: {shipped.get('benchmark_fingerprint')} -> {served['benchmark_fingerprint']}")
    have = shipped.get("retrievers") or {}
    for name, h in served["retrievers"].items():
        if have.get(name) != h:
            out.append(
                f"retriever {name}: "
                + (
                    "not in the shipped run"
                    if name not in have
                    else f"spec or weights changed ({str(have[name])[:12]} -> {h[:12]})"
                )
            )
    if served.get("reranker") and (shipped.get("reranker"), shipped.get("rerank_top_n")) != (
        served["reranker"],
        served["rerank_top_n"],
    ):
        out.append(
            f"reranker or its depth changed: {str(shipped.get('reranker'))[:12]} top "
            f"{shipped.get('rerank_top_n')} -> {served['reranker'][:12]} top {served['rerank_top_n']}"
        )
    out += code_problems(shipped)
    return out


def code_problems(key: Mapping) -> list[str]:
    """Why outputs with `key` are not what this code and these libraries write ([] = they are)."""
    out = []
    if key.get("code_sha256") != output_code_sha256():
        out.append(
            f"code changed: outputs of code {str(key.get('code_sha256'))[:12]}, running {output_code_sha256()[:12]}"
        )
    libs, now = key.get("libraries") or {}, output_libraries()
    out += [f"library changed: {lib} {libs.get(lib)} -> {now[lib]}" for lib in now if libs.get(lib) != now[lib]]
    if key.get("python") != python_version():
        out.append(f"Python changed: outputs of {key.get('python')}, running {python_version()}")
    return out


def shipped_dir(benchmark, root: Path | None = None) -> Path:
    from cir_demo.index.build import benchmark_index_name
    from cir_demo.index.prebuilt import prebuilt_root

    return (root or prebuilt_root()) / safe_component(benchmark_index_name(benchmark)) / RUN_FOLDER


def read_shipped_manifest(directory: Path) -> dict:
    """The manifest of shipped outputs; ValueError (one line naming the file) when it cannot be used."""
    from cir_demo.integrity import read_packed_manifest

    return read_packed_manifest(directory / MANIFEST_FILE, FORMAT, "shipped eval outputs")


def stale_installed_copy(run_dir: Path) -> bool:
    """True for a copy of shipped outputs installed by other code or libraries (never listed as a run)."""
    mark = run_dir / INSTALLED_MARK
    if not mark.is_file():
        return False
    try:
        return bool(code_problems(json.loads(mark.read_text(encoding="utf-8")).get("key") or {}))
    except (OSError, ValueError, AttributeError):
        return True


def shipped_file(rel: str) -> bool:
    """Whether the run folder's file `rel` (a relative posix path) is shipped: not under a `LEFT_OUT` folder."""
    return not any(part in LEFT_OUT for part in rel.split("/")[:-1])


def stored_name(name: str) -> str:
    return name + ".xz" if name.endswith(COMPRESSED_SUFFIXES) else name


def pack_run(
    run_dir: Path, out: Path, key: dict, command: list[str], provenance: dict, first_query: dict | None = None
) -> Path:
    """Write the shipped form of run folder `run_dir` (all but `LEFT_OUT`) with its manifest into `out`,
    replacing it as a whole (refused, before any work, when `out` holds a file its manifest does not record).
    `first_query`: the manifest's field of the query the app's first visit opens (`index.first_query`)."""
    from cir_demo.index.manifest import replace_dir
    from cir_demo.integrity import file_record, refuse_unrecorded_files
    from cir_demo.utils.io import write_json_atomic

    refuse_unrecorded_files(out, MANIFEST_FILE)
    names = sorted(
        rel
        for rel in (p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
        if shipped_file(rel)
    )
    files = {}
    with new_dir_beside(out) as tmp:
        for name in names:
            data = (run_dir / name).read_bytes()
            stored = tmp / stored_name(name)
            stored.parent.mkdir(parents=True, exist_ok=True)
            stored.write_bytes(lzma.compress(data, preset=6) if stored.name != Path(name).name else data)
            files[name] = {
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "stored": {stored_name(name): file_record(stored)},
            }
        write_json_atomic(
            tmp / MANIFEST_FILE,
            {
                "format": FORMAT,
                "what": "the complete --eval outputs of this benchmark (results/ left out), "
                "stored compressed; installed into the runs folder by the app",
                "key": key,
                "command": command,
                "provenance": provenance,
                "files": files,
                **({FIRST_QUERY_FIELD: first_query} if first_query is not None else {}),
            },
        )
        replace_dir(tmp, out)
    return out


def shipped_problems(directory: Path, served: Mapping | None = None) -> list[str]:
    """Why the shipped outputs in `directory` cannot be served ([] = usable): an unreadable manifest,
    a stored file whose size or sha256 differs, a key that does not match `served` (when given) or
    this code and these libraries."""
    from cir_demo.integrity import stored_problems

    if not (directory / MANIFEST_FILE).is_file():
        return [
            f"missing: {directory / MANIFEST_FILE} not found (write them: python -m cir_demo index prebuilt "
            "--only eval)"
        ]
    try:
        manifest = read_shipped_manifest(directory)
    except ValueError as exc:
        return [str(exc)]
    key = key_problems(manifest["key"], served) if served else code_problems(manifest["key"])
    return stored_problems(directory, manifest) + key


def read_stored(directory: Path, name: str, record: Mapping) -> bytes | None:
    """The content of shipped file `name` (decompressed), or None when it does not match its record's sha256."""
    (stored,) = record["stored"]
    data = (directory / stored).read_bytes()
    data = lzma.decompress(data) if stored != name else data
    return data if hashlib.sha256(data).hexdigest() == record["sha256"] else None


def install_shipped_run(
    benchmark, served: Mapping, runs_root: Path, root: Path | None = None
) -> tuple[Path | None, list[str]]:
    """(run folder, []) once the shipped outputs of `benchmark` are in `runs_root` as a run folder;
    (None, []) when none are shipped; (None, reasons) when they must not be served."""
    directory = shipped_dir(benchmark, root)
    if not (directory / MANIFEST_FILE).is_file():
        return None, []
    problems = shipped_problems(directory, served)
    if problems:
        return None, problems
    manifest = read_shipped_manifest(directory)
    digest = hashlib.sha256(json.dumps(manifest["key"], sort_keys=True).encode()).hexdigest()[:12]
    target = runs_root / f"prebuilt-{directory.parent.name}-{digest}"
    if (target / INSTALLED_MARK).is_file():
        return target, []
    with new_dir_beside(target) as tmp:
        for name, record in manifest["files"].items():
            data = read_stored(directory, name, record)
            if data is None:
                return None, [
                    f"damaged: {directory / stored_name(name)}: its content does not match the manifest's sha256"
                ]
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
        (tmp / INSTALLED_MARK).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        try:
            os.rename(tmp, target)
        except OSError:  # installed meanwhile by another app process
            if not (target / INSTALLED_MARK).is_file():
                raise
    return target, []
