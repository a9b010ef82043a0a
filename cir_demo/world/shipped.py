"""The default world's test part shipped with the repository, so that a first start (the app, `--eval`)
installs it instead of generating it (generating competes with the app's imports for the cores).

Layout: `indexes/prebuilt/world-<size>-s<seed>/world/` holds every file of the test part (disk.TEST_FILES
and test_manifest.json), xz-compressed (`NAME.xz`), and `manifest.json`: `key`, what the bytes depend on
(size, seed, GENERATOR_VERSION, the sha256 of the generator's source and templates, the numpy version,
whose `np.save` header and dtypes shape the tables, and the Python version, whose `random` draws every
choice), `checksum` (the world's, as test_manifest.json records it), `provenance`, and `files`: for every
file, the size and sha256 of its content and of its stored form.

`install_shipped_world` copies them into an empty world folder (under the generation lock, each file
written atomically, test_manifest.json last) only when the key is that of the running code and every
sha256 matches; otherwise it says why in one line and the caller generates the part as before, so a stale
copy is never served as current. Written by `python -m cir_demo index prebuilt --only world` (pack.py).
"""

from __future__ import annotations

import functools
import hashlib
import lzma
import sys
import time
from pathlib import Path
from typing import Mapping

from cir_demo.utils.code_hash import code_text

from .files import DATA_FILES, MANIFEST, TEST_FILES, TEST_MANIFEST
from .generate import GENERATOR_VERSION, _progress

FOLDER = "world"  # under the world's prebuilt folder
SHIPPED_MANIFEST = "manifest.json"
FORMAT = 1
FILES = (*TEST_FILES, TEST_MANIFEST)  # test_manifest.json last: its presence marks a complete part
# What shapes the test part's bytes: the modules `build_test_part` and `write_world` run (generate.py and
# disk.py with what they import from this package; tests/test_world_shipped.py checks the list is whole)
# and the instruction templates intents.py reads.
GENERATOR_SOURCES = (
    "attributes.py",
    "captions.py",
    "disk.py",
    "files.py",
    "generate.py",
    "holdout.py",
    "intents.py",
    "phrases.py",
    "scene.py",
    "intent_templates.json",
)
XZ_PRESET = 9 | lzma.PRESET_EXTREME  # the smallest files; decompressing stays cheap beside generating


def index_name(size: str, seed: int) -> str:
    """The world's folder under indexes/ and indexes/prebuilt/ (`info["index_name"]` of its test splits)."""
    return f"world-{size}-s{seed}"


def shipped_world_dir(size: str, seed: int, root: Path | None = None) -> Path:
    from cir_demo.paths import prebuilt_root

    return (root or prebuilt_root()) / index_name(size, seed) / FOLDER


@functools.lru_cache(maxsize=2)
def generator_sha256(here: Path | None = None) -> str:
    """sha256 over the name and code (`code_text`: layout, comments, docstrings aside) of every file in
    GENERATOR_SOURCES of `here` (this package)."""
    here = here or Path(__file__).parent
    digest = hashlib.sha256()
    for name in GENERATOR_SOURCES:
        digest.update(name.encode() + b"\0" + code_text(here / name) + b"\0")
    return digest.hexdigest()


def world_key(size: str, seed: int) -> dict:
    """What the test part's bytes of (size, seed) depend on, for the running code and libraries."""
    import numpy

    return {
        "size": size,
        "seed": seed,
        "generator_version": GENERATOR_VERSION,
        "generator_sha256": generator_sha256(),
        "numpy": numpy.__version__,
        "python": "{}.{}".format(*sys.version_info[:2]),
    }


def key_problems(shipped: Mapping, size: str, seed: int) -> list[str]:
    """Why a copy with key `shipped` is not what this code writes for (size, seed) ([] = it is)."""
    return [
        f"{k} changed: shipped {str(shipped.get(k))[:16]}, running {str(v)[:16]}"
        for k, v in world_key(size, seed).items()
        if shipped.get(k) != v
    ]


def read_shipped_manifest(directory: Path) -> dict:
    """The manifest of a shipped test part; ValueError (one line naming the file) when it cannot be used."""
    from cir_demo.integrity import read_packed_manifest

    data = read_packed_manifest(directory / SHIPPED_MANIFEST, FORMAT, "a shipped world test part")
    if sorted(data["files"]) != sorted(FILES):
        raise ValueError(
            f"{directory / SHIPPED_MANIFEST}: records {', '.join(sorted(data['files']))}, not the "
            f"test part's files ({', '.join(FILES)})"
        )
    return data


def shipped_problems(directory: Path, size: str, seed: int) -> list[str]:
    """Why the shipped test part in `directory` cannot be installed for (size, seed) ([] = it can): a
    missing or unreadable manifest, a key that is not this code's, a stored file whose size or sha256 differs."""
    from cir_demo.integrity import stored_problems

    if not (directory / SHIPPED_MANIFEST).is_file():
        return [
            f"missing: {directory / SHIPPED_MANIFEST} not found (write it: python -m cir_demo index prebuilt "
            "--only world)"
        ]
    try:
        manifest = read_shipped_manifest(directory)
    except ValueError as exc:
        return [str(exc)]
    return key_problems(manifest["key"], size, seed) + stored_problems(directory, manifest)


def _payloads(directory: Path, manifest: dict) -> dict[str, bytes] | str:
    """Every file's content, decompressed and checked against the manifest; a reason when one is not."""
    out = {}
    for name in FILES:
        (stored,) = manifest["files"][name]["stored"]
        try:
            data = lzma.decompress((directory / stored).read_bytes())
        except (OSError, lzma.LZMAError) as exc:
            return f"damaged: {directory / stored}: unreadable ({exc})"
        if hashlib.sha256(data).hexdigest() != manifest["files"][name]["sha256"]:
            return f"damaged: {directory / stored}: its content does not match the manifest's sha256"
        out[name] = data
    return out


def install_shipped_world(root: Path, size: str, seed: int, progress: bool = True) -> bool:
    """Install the shipped test part of (size, seed) into the world folder `root` (the caller holds
    `generation_lock(root)`); True once installed. False, with one line why, when the copy must not be
    used; False silently when none is shipped or `root` holds any world file (never installed over: the
    caller adopts, regenerates or reports that world as before)."""
    from cir_demo.utils.io import write_bytes_atomic

    directory = shipped_world_dir(size, seed)
    if not directory.is_dir() or any((root / n).exists() for n in (*DATA_FILES, MANIFEST, TEST_MANIFEST)):
        return False
    t0 = time.perf_counter()
    problems = shipped_problems(directory, size, seed)
    payloads = _payloads(directory, read_shipped_manifest(directory)) if not problems else None
    if isinstance(payloads, str):
        problems = [payloads]
    if problems:
        print(
            f"[world] the shipped test part {directory} is not used ({'; '.join(problems)[:400]}); generating it",
            file=sys.stderr,
            flush=True,
        )
        return False
    root.mkdir(parents=True, exist_ok=True)
    for name in FILES:  # test_manifest.json last: a part without it is never read
        write_bytes_atomic(root / name, payloads[name])
    _progress(
        progress,
        f"installed the shipped test part of {size} seed {seed} ({directory}, every sha256 and the "
        f"generator key match) into {root} in {time.perf_counter() - t0:.2f} s",
    )
    return True
