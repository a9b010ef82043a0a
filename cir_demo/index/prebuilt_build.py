"""Writing and checking the repository's prebuilt corpus embeddings (`python -m cir_demo index prebuilt`):
the corpus encoded once per image tower (cir_demo/index/corpus_encode.py) and written where
cir_demo/index/prebuilt.py reads it, and a slice re-encoded to check a committed folder."""

from __future__ import annotations

import lzma
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from cir_demo.index.corpus_encode import corpus_ids_of, encode_corpus_with
from cir_demo.index.prebuilt import (
    CODES_FILE,
    EMBEDDINGS_FILE,
    ImageEncoder,
    image_encoder,
    load_codes,
    write_prebuilt,
)


def build_prebuilt(
    benchmark, encoders: Sequence, batch_size: int = 64, progress: bool = True, root: Path | None = None
) -> list[Path]:
    """Encode `benchmark`'s corpus once per distinct image tower among `encoders` (retrievers, a
    reranker), opening each image once, and write each tower's prebuilt folder. Returns the folders."""
    from cir_demo.benchmarks.registry import declared_defaults

    if getattr(declared_defaults(benchmark.name), "generated", None) is None:
        raise ValueError(
            f"benchmark {benchmark.name!r}: only a benchmark this project generates (the offline world) "
            "gets committed prebuilt embeddings; a real benchmark's index is built in the data folder"
        )
    towers: dict[str, tuple[ImageEncoder, object, list[str]]] = {}
    for encoder in encoders:
        tower = image_encoder(encoder)
        if tower is None:
            raise ValueError(
                f"{encoder.name!r} does not say what its image tower is (no image_spec): "
                "its corpus embeddings cannot be shared, so none are prebuilt for it"
            )
        key = tower.spec_hash()
        if key in towers and towers[key][0].name != tower.name:
            raise ValueError(f"two image towers would share the folder {tower.name!r}")
        towers.setdefault(key, (tower, encoder, []))[2].append(encoder.name)
    ids = corpus_ids_of(benchmark)
    started = time.perf_counter()
    outs = encode_corpus_with(
        benchmark.images,
        ids,
        [e for _, e, _ in towers.values()],
        batch_size=batch_size,
        progress=progress,
        desc=f"encode {benchmark.name} for the prebuilt embeddings",
    )
    seconds = time.perf_counter() - started
    return [
        write_prebuilt(benchmark, tower, ids, xb, used_by, seconds, str(getattr(encoder, "device", None)), root)
        for (tower, encoder, used_by), xb in zip(towers.values(), outs)
    ]


SLICE_IMAGES = 16  # corpus images re-encoded by `index prebuilt --check`, spread over the corpus
SLICE_TOLERANCE = 1e-5  # an encode's last bits depend on its batch; another encoder's rows differ far more


def slice_problems(benchmark, encoder, ids: Sequence[str], directory: Path, batch_size: int = 64) -> list[str]:
    """Re-encode `SLICE_IMAGES` corpus images spread over the corpus with `encoder` (pixels from the
    benchmark, nothing from a cache) and compare them with the rows in `directory` ([] = the same):
    finds rows written by other code or edited with their records rewritten."""
    step = max(1, len(ids) // SLICE_IMAGES)
    rows = list(range(0, len(ids), step))[:SLICE_IMAGES]
    (fresh,) = encode_corpus_with(
        benchmark.images,
        [ids[r] for r in rows],
        [encoder],
        batch_size=batch_size,
        progress=False,
        desc="re-encode a slice of the prebuilt embeddings",
    )
    tower = image_encoder(encoder)
    if tower is not None and tower.packed:
        return _code_problems(directory, tower, rows, fresh)
    shipped = np.load(directory / EMBEDDINGS_FILE, mmap_mode="r", allow_pickle=False)[rows]
    worst = float(np.abs(np.asarray(shipped, np.float64) - fresh).max()) if rows else 0.0
    if not worst <= SLICE_TOLERANCE:
        return [
            f"content: {directory / EMBEDDINGS_FILE}: rows of {len(rows)} corpus images differ from a fresh "
            f"encode by up to {worst:.3g} (more than {SLICE_TOLERANCE:g}): built by other code or edited"
        ]
    return []


SLICE_CODE_FLIPS = 1e-3  # codes a re-encode may move by one step (values on a rounding boundary)
SLICE_SCALE_TOLERANCE = 1e-4  # relative


def _code_problems(directory: Path, tower: ImageEncoder, rows: list[int], fresh: np.ndarray) -> list[str]:
    """Compare re-encoded rows of a packed tower with its stored codes and scales: a batch's last bits
    can move a value across a rounding boundary (one code step, rarely); anything more is other code,
    other weights or an edit."""
    from cir_demo.models.world_judge import codes_of_features

    try:
        codes, scales = load_codes(directory, tower)
        new_codes, new_scales = codes_of_features(fresh)
    except (OSError, ValueError, lzma.LZMAError) as exc:
        return [f"content: {exc}"]
    moved = np.abs(codes[rows].astype(np.int16) - new_codes)
    flips = float((moved > 0).mean()) if rows else 0.0
    scale_diff = float((np.abs(scales[rows] - new_scales) / new_scales).max()) if rows else 0.0
    if moved.max(initial=0) > 1 or flips > SLICE_CODE_FLIPS or not scale_diff <= SLICE_SCALE_TOLERANCE:
        return [
            f"content: {directory / CODES_FILE}: codes of {len(rows)} corpus images differ from a fresh encode "
            f"by up to {int(moved.max(initial=0))} steps ({flips:.2%} of them; at most one step on "
            f"{SLICE_CODE_FLIPS:.1%} allowed), scales by up to {scale_diff:.3g} (relative; at most "
            f"{SLICE_SCALE_TOLERANCE:g}): built by other code or other weights, or edited"
        ]
    return []
