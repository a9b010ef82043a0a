"""The shipped form of a world's test part (shipped.py installs it), written by `python -m cir_demo index
prebuilt --only world`: the part generated with this code, each file xz-compressed, and its manifest."""

from __future__ import annotations

import hashlib
import lzma
import tempfile
from pathlib import Path

from .disk import write_world
from .generate import build_test_part
from .shipped import FILES, FORMAT, SHIPPED_MANIFEST, XZ_PRESET, world_key


def pack_world(size: str, seed: int, out: Path, provenance: dict, progress: bool = False) -> Path:
    """Generate the test part of (size, seed) with this code and write its shipped form into `out`,
    replacing it as a whole (refused, before any work, when `out` holds a file its manifest does not record)."""
    from cir_demo.integrity import file_record, refuse_unrecorded_files
    from cir_demo.utils.io import new_dir_beside, replace_dir, write_json_atomic

    refuse_unrecorded_files(out, SHIPPED_MANIFEST)
    with tempfile.TemporaryDirectory(prefix="cir-demo-shipped-world-") as tmp, new_dir_beside(out) as stage:
        written, files = write_world(build_test_part(size, seed, progress), Path(tmp) / "part"), {}
        for name in FILES:
            data = (Path(tmp) / "part" / name).read_bytes()
            (stage / f"{name}.xz").write_bytes(lzma.compress(data, preset=XZ_PRESET))
            files[name] = {
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "stored": {f"{name}.xz": file_record(stage / f"{name}.xz")},
            }
        write_json_atomic(
            stage / SHIPPED_MANIFEST,
            {
                "format": FORMAT,
                "what": "the world's test part (what its benchmark reads), stored compressed; "
                "installed into an empty world folder instead of generating it",
                "key": world_key(size, seed),
                "checksum": written["checksum"],
                "provenance": provenance,
                "files": files,
            },
        )
        replace_dir(stage, out)
    return out
