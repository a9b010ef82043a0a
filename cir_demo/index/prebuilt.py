"""Prebuilt corpus embeddings, committed with the repository, so that a fresh clone serves the
default world without rendering and encoding its 6,809 corpus images first.

Layout (docs/indexes.md): `indexes/prebuilt/<benchmark index name>/<encoder>/` holds
- `embeddings.npy`  float32 (count, dim) unit rows; row i is the benchmark's corpus image i,
- `manifest.json`   an `IndexManifest` of the image encoder (`retriever` is the encoder's folder
                    name, `retriever_spec` its image spec, with the weights' sha256), the corpus
                    (ordered-id checksum, the world's content checksum), the file's size and sha256,
                    and `provenance`: the world's size, seed and generator version, the code version
                    and commit it was built from, the retrievers that share it.

An image tower whose features are int8 codes per token (the world judge: `image_spec["features"]`,
`models/world_judge.py`) is stored as those codes and its scales instead, each an .npy compressed
with xz: `codes.npy.xz` int8 (2, count, tokens, dim / tokens / 2) (`code_planes`: the tokens'
mean halves, then max minus mean), `scales.npy.xz` float32 (count, tokens). Read back, they
give the rows the judge computes bit for bit; the data folder's embedding cache keeps them
decompressed after the first read (`index/build.py`).

There is one folder per distinct image encoder (`Retriever.image_spec`): the four world-CLIP
recipes and world-CIR encode the corpus with the same world-CLIP image tower, so one file serves
all five. `read_prebuilt` hands the rows out only when every check of `manifest.py` passes (sha256
included) for the encoder and corpus being served; otherwise it says why, and the caller encodes
the corpus as it would without them. Vectors are float32, exactly what an encode gives: flat
search over them gives today's rankings and scores bit for bit (float16 would not; docs/indexes.md).
"""

from __future__ import annotations

import io
import lzma
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np

from cir_demo.index.manifest import (
    MANIFEST_FILE,
    IndexManifest,
    benchmark_index_name,
    corpus_checksum,
    corpus_fingerprint,
    damage_reasons,
    library_versions,
    new_dir_beside,
    read_manifest,
    replace_dir,
    safe_component,
    stale_reasons,
    weights_checksum,
)
from cir_demo.paths import REPO_ROOT, prebuilt_root

EMBEDDINGS_FILE = "embeddings.npy"
CODES_FILE = "codes.npy.xz"
SCALES_FILE = "scales.npy.xz"
XZ_PRESET = 9


@dataclass(frozen=True)
class ImageEncoder:
    """What the staleness checks of `manifest.py` compare for a corpus embedding: the image
    tower's name (its folder), spec (weights sha256 included) and dimension."""

    name: str
    spec: dict
    dim: int

    def spec_hash(self) -> str:
        from cir_demo.retrievers.base import spec_hash

        return spec_hash(self.spec)

    @property
    def packed(self) -> bool:
        """Whether its rows are int8 codes per token, stored as codes and scales (else float32 rows)."""
        from cir_demo.models.world_judge import FEATURES

        return self.spec.get("features") == FEATURES

    @property
    def files(self) -> tuple[str, ...]:
        return (CODES_FILE, SCALES_FILE) if self.packed else (EMBEDDINGS_FILE,)


def image_encoder(encoder) -> ImageEncoder | None:
    """The image tower of a retriever or reranker that shares corpus embeddings (`image_spec`), else None."""
    spec = getattr(encoder, "image_spec", None)
    if not spec:
        return None
    return ImageEncoder(
        safe_component(str(spec.get("model") or spec.get("family") or "encoder")), dict(spec), int(encoder.dim)
    )


def prebuilt_dir(benchmark, tower: ImageEncoder, root: Path | None = None) -> Path:
    return (root or prebuilt_root()) / safe_component(benchmark_index_name(benchmark)) / tower.name


def prebuilt_problems(directory: Path, benchmark, tower: ImageEncoder, ids: Sequence[str]) -> list[str]:
    """Why the prebuilt embeddings in `directory` cannot serve `tower` over `benchmark`'s corpus `ids`
    ([] = usable): the reasons of `manifest.check_index` (files' sha256 always verified), plus a
    changed world generator."""
    if not (directory / MANIFEST_FILE).is_file():
        return [f"missing: {directory / MANIFEST_FILE} not found"]
    try:
        manifest = read_manifest(directory)
    except (OSError, ValueError, TypeError) as exc:
        return [f"unreadable manifest: {exc}"]
    for name in tower.files:
        if name not in manifest.files:
            return [f"unreadable manifest: {directory / MANIFEST_FILE}: no record of {name}"]
    reasons = damage_reasons(directory, manifest, verify=True)
    reasons += stale_reasons(manifest, tower, list(ids), corpus_fingerprint(benchmark))
    built = (manifest.provenance.get("benchmark_info") or {}).get("generator_version")
    now = (getattr(benchmark, "info", None) or {}).get("generator_version")
    if built != now:
        reasons.append(f"world generator changed: built with {built!r}, serving {now!r}")
    return reasons


def read_prebuilt(
    benchmark, encoder, ids: Sequence[str], root: Path | None = None
) -> tuple[np.ndarray | None, list[str]]:
    """(rows, []) when prebuilt embeddings of `encoder`'s image tower over `ids` exist and every check
    passes; (None, []) when there are none; (None, reasons) when they exist but must not be used."""
    tower = image_encoder(encoder)
    if tower is None:
        return None, []
    directory = prebuilt_dir(benchmark, tower, root)
    if not directory.is_dir():
        return None, []
    reasons = prebuilt_problems(directory, benchmark, tower, ids)
    if reasons:
        return None, reasons
    try:
        xb = _load_rows(directory, tower)
    except (OSError, ValueError, lzma.LZMAError) as exc:
        return None, [f"damaged: {exc}"]
    if xb.dtype != np.float32 or xb.shape != (len(ids), tower.dim):
        return None, [f"damaged: {directory}: holds {xb.dtype} {xb.shape}, expected float32 {(len(ids), tower.dim)}"]
    return xb, []


def _load_npy(path: Path, dtype, shape: tuple) -> np.ndarray:
    """An .npy (or an xz-compressed one, NAME.npy.xz) of `dtype` and `shape` (None: any length there);
    ValueError naming the file."""
    try:
        data = lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else None
        arr = np.load(io.BytesIO(data) if data is not None else path, allow_pickle=False)
    except (ValueError, lzma.LZMAError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from None
    if arr.dtype != dtype or arr.ndim != len(shape) or any(w not in (None, a) for w, a in zip(shape, arr.shape)):
        want = tuple("n" if w is None else w for w in shape)
        raise ValueError(f"{path}: holds {arr.dtype} {arr.shape}, expected {np.dtype(dtype)} {want}")
    return arr


def load_codes(directory: Path, tower: ImageEncoder) -> tuple[np.ndarray, np.ndarray]:
    """(codes (n, dim) int8, scales (n, N_TOKENS) float32) of a packed tower's folder."""
    from cir_demo.models.world_judge import N_TOKENS, codes_of_planes

    planes = _load_npy(directory / CODES_FILE, np.int8, (2, None, N_TOKENS, tower.dim // N_TOKENS // 2))
    scales = _load_npy(directory / SCALES_FILE, np.float32, (None, N_TOKENS))
    if planes.shape[1] != len(scales):
        raise ValueError(f"{directory}: {planes.shape[1]} rows of codes but {len(scales)} of scales")
    return codes_of_planes(planes), scales


def _load_rows(directory: Path, tower: ImageEncoder) -> np.ndarray:
    """The float32 rows stored in a prebuilt folder (decoded from codes and scales for a packed tower)."""
    if not tower.packed:
        return _load_npy(directory / EMBEDDINGS_FILE, np.float32, (None, tower.dim))
    from cir_demo.models.world_judge import dequantize_tokens

    return dequantize_tokens(*load_codes(directory, tower))


def code_version() -> dict:
    """The code a prebuilt file was built from: the package version and, in a git checkout, the commit
    (with "+changes" when the working tree differed from it)."""
    out = {"cir_demo": library_versions().get("cir_demo")}
    try:
        run = lambda *a: subprocess.run(
            ["git", *a],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,  # noqa: E731
            timeout=10,
        )
        head = run("rev-parse", "HEAD")
        if head.returncode == 0:
            dirty = run("status", "--porcelain", "--untracked-files=no", "--", "cir_demo").stdout.strip()
            out["git_commit"] = head.stdout.strip() + ("+changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def write_prebuilt(
    benchmark,
    tower: ImageEncoder,
    ids: Sequence[str],
    xb: np.ndarray,
    used_by: Sequence[str],
    build_seconds: float,
    device: str | None = None,
    root: Path | None = None,
) -> Path:
    """Write `xb` (the corpus rows of `tower`) with its manifest into its prebuilt folder, atomically."""
    from cir_demo.integrity import file_record

    xb = np.ascontiguousarray(xb, dtype=np.float32)
    if xb.shape != (len(ids), tower.dim):
        raise ValueError(f"prebuilt {tower.name}: {xb.shape} rows for {len(ids)} ids of dim {tower.dim}")
    info = getattr(benchmark, "info", None) or {}
    manifest = IndexManifest(
        benchmark=benchmark.name,
        retriever=tower.name,
        retriever_spec=tower.spec,
        spec_hash=tower.spec_hash(),
        weights_sha256=weights_checksum(tower.spec),
        corpus_sha256=corpus_checksum(ids),
        dim=tower.dim,
        count=len(ids),
        kind="flat",
        params={},
        library_versions=library_versions(),
        built_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        build_seconds=round(build_seconds, 3),
        corpus_fingerprint=corpus_fingerprint(benchmark),
        device=device,
        provenance={
            "benchmark_info": {
                k: info[k]
                for k in ("index_name", "size", "seed", "generator_version", "checksum", "split")
                if k in info
            },
            "code": code_version(),
            "used_by": sorted(used_by),
            "what": (
                "corpus image features of this image encoder, int8 codes per token and float32 scales "
                "(xz), row i = corpus image i"
                if tower.packed
                else "corpus image embeddings of this image encoder, float32, row i = corpus image i"
            ),
        },
    )
    out = prebuilt_dir(benchmark, tower, root)
    from cir_demo.utils.io import write_json_atomic

    with new_dir_beside(out) as tmp:
        if tower.packed:
            from cir_demo.models.world_judge import code_planes, codes_of_features

            codes, scales = codes_of_features(xb)
            for name, arr in ((CODES_FILE, code_planes(codes)), (SCALES_FILE, scales)):
                buf = io.BytesIO()
                np.save(buf, arr)
                (tmp / name).write_bytes(lzma.compress(buf.getvalue(), preset=XZ_PRESET))
        else:
            with open(tmp / EMBEDDINGS_FILE, "wb") as f:
                np.save(f, xb)
        manifest.files = {name: file_record(tmp / name) for name in tower.files}
        write_json_atomic(tmp / MANIFEST_FILE, manifest.to_dict())
        replace_dir(tmp, out)
    return out
