"""Sharded corpus encoding: several processes (GPUs, machines) encode one corpus.

Process `rank` of `world_size` encodes the contiguous id range
`shard_range(n, rank, world_size)` into `embeddings_shard{rank}.npy` plus
`ids_shard{rank}.json` (its ids and what they were encoded with) in a shard
directory beside the index. When every shard is done, rank 0 checks and
concatenates them in corpus order and writes the index exactly as a
single-process build would (same ids, same vectors, same manifest fields;
`num_shards` records the split).

Launch (each process runs the same command):

    accelerate launch --num_processes 4 -m cir_demo index build --sharded --benchmark B --retriever R

On a CPU-only machine add `--multi_gpu` (accelerate's switch for its torchrun
launcher; processes then talk over gloo). Across machines the shard directory
must be on a filesystem every machine sees (`--shard-dir`). Without accelerate
or a WORLD_SIZE above 1 the build runs in one process.

A shard already on disk for the same retriever spec, corpus and split is
reused, so an interrupted sharded build resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from cir_demo.index.build import (
    AUTO,
    default_index_dir,
    make_manifest,
    plan_rebuild,
    rebuild_reasons,
    requested_params,
    write_built_index,
)
from cir_demo.index.choose import default_memory_budget
from cir_demo.index.corpus_encode import corpus_ids_of, encode_corpus, require_encoder
from cir_demo.index.manifest import (
    LoadedIndex,
    build_lock,
    corpus_checksum,
    corpus_fingerprint,
    load_index,
    refuse_foreign,
)
from cir_demo.utils.io import atomic_path, write_json_atomic

SHARD_FORMAT = 1


def shard_range(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, stop) of shard `rank`: contiguous, sizes differ by at most one, in rank order."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def shard_files(shard_dir: Path, rank: int) -> tuple[Path, Path]:
    return Path(shard_dir) / f"embeddings_shard{rank}.npy", Path(shard_dir) / f"ids_shard{rank}.json"


def remove_shards(shard_dir: Path, world_size: int) -> None:
    """Remove the shard files a build wrote, then the folder if that left it empty: a `--shard-dir`
    may hold other files, which stay."""
    for rank in range(world_size):
        for path in shard_files(shard_dir, rank):
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        Path(shard_dir).rmdir()


def shard_dir_for(out_dir: Path, spec_hash: str, corpus_sha256: str, world_size: int) -> Path:
    """Where the shards of one (retriever spec, corpus, split) live: hidden, beside the index."""
    key = hashlib.sha256(f"{spec_hash}:{corpus_sha256}:{world_size}".encode()).hexdigest()[:12]
    return Path(out_dir).with_name(f".{Path(out_dir).name}.shards-{key}")


def _shard_meta(retriever, ids: Sequence[str], rank: int, world_size: int) -> dict:
    start, stop = shard_range(len(ids), rank, world_size)
    return {
        "format": SHARD_FORMAT,
        "rank": rank,
        "world_size": world_size,
        "start": start,
        "stop": stop,
        "spec_hash": retriever.spec_hash(),
        "corpus_sha256": corpus_checksum(ids),
        "dim": int(retriever.dim),
        "ids": list(ids[start:stop]),
    }


def _read_shard(shard_dir: Path, rank: int) -> tuple[dict, np.ndarray]:
    emb_path, meta_path = shard_files(shard_dir, rank)
    if not meta_path.is_file() or not emb_path.is_file():
        raise FileNotFoundError(f"shard {rank}: {meta_path.name} or {emb_path.name} missing in {shard_dir}")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    return meta, np.load(emb_path, allow_pickle=False)


def encode_shard(
    benchmark, retriever, shard_dir: str | Path, rank: int, world_size: int, batch_size: int = 64, progress: bool = True
) -> Path:
    """Encode shard `rank` of `world_size` into `shard_dir`; returns its ids file. Reuses a matching shard."""
    require_encoder(retriever)
    ids = corpus_ids_of(benchmark)
    shard_dir = Path(shard_dir)
    shard_dir.mkdir(parents=True, exist_ok=True)
    meta = _shard_meta(retriever, ids, rank, world_size)
    emb_path, meta_path = shard_files(shard_dir, rank)
    try:
        old_meta, old_emb = _read_shard(shard_dir, rank)
        if old_meta == meta and old_emb.shape == (len(meta["ids"]), meta["dim"]):
            return meta_path
    except (OSError, ValueError):
        pass
    emb = encode_corpus(
        benchmark.images,
        meta["ids"],
        retriever,
        batch_size=batch_size,
        progress=progress,
        desc=f"encode shard {rank + 1}/{world_size} of {benchmark.name}",
        position=rank,
    )
    with atomic_path(emb_path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, emb, allow_pickle=False)
    write_json_atomic(meta_path, meta, indent=None)  # written last: its presence marks the shard complete
    return meta_path


def merge_shards(
    shard_dir: str | Path,
    corpus_ids: Sequence[str],
    world_size: int,
    spec_hash: str | None = None,
    dim: int | None = None,
) -> np.ndarray:
    """The (n, dim) corpus embeddings from `world_size` shards, checked against the corpus and each other."""
    shard_dir = Path(shard_dir)
    ids = list(corpus_ids)
    checksum = corpus_checksum(ids)
    parts = []
    for rank in range(world_size):
        meta, emb = _read_shard(shard_dir, rank)
        start, stop = shard_range(len(ids), rank, world_size)
        where = f"shard {rank} in {shard_dir}"
        expected = {
            "format": SHARD_FORMAT,
            "rank": rank,
            "world_size": world_size,
            "start": start,
            "stop": stop,
            "corpus_sha256": checksum,
        }
        if spec_hash is not None:
            expected["spec_hash"] = spec_hash
        if dim is not None:
            expected["dim"] = int(dim)
        wrong = [f"{k} is {meta.get(k)!r}, expected {v!r}" for k, v in expected.items() if meta.get(k) != v]
        if meta.get("ids") != ids[start:stop]:
            wrong.append("its ids are not the corpus ids of its range")
        if emb.shape != (stop - start, meta.get("dim")):
            wrong.append(f"embeddings have shape {emb.shape}, expected ({stop - start}, {meta.get('dim')})")
        if wrong:
            raise ValueError(f"{where}: " + "; ".join(wrong))
        parts.append(np.asarray(emb, dtype=np.float32))
    if not parts:
        raise ValueError("no shards to merge")
    return np.concatenate(parts, axis=0)


# --------------------------------------------------------------------------- process group
@dataclass
class DistContext:
    """Rank, world size and the collectives a sharded build needs (trivial in one process)."""

    rank: int = 0
    world_size: int = 1
    device: str | None = None
    all_gather: Callable[[Any], list] = field(default=lambda obj: [obj])
    broadcast: Callable[[Any], Any] = field(default=lambda obj: obj)
    # Tears the process group down (call once, at the end of the program).
    close: Callable[[], None] = field(default=lambda: None)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def distributed_context(timeout_hours: float = 12.0) -> DistContext:
    """The process group set up by `accelerate launch` (or torchrun-style RANK/WORLD_SIZE env), else one process.

    The long timeout lets rank 0 build a large approximate index while the
    others wait.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return DistContext()
    try:
        import torch
        from accelerate import PartialState
        from accelerate.utils import broadcast_object_list, gather_object
    except ImportError as exc:
        raise ImportError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} needs accelerate for a sharded build: {exc}") from exc
    state = PartialState(cpu=not torch.cuda.is_available(), timeout=timedelta(hours=timeout_hours))
    if state.num_processes <= 1:
        return DistContext(device=str(state.device))

    def broadcast(obj):
        box = [obj]
        broadcast_object_list(box, from_process=0)
        return box[0]

    def close():
        # An explicit teardown: leaving it to interpreter exit can abort the process.
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

    return DistContext(
        rank=state.process_index,
        world_size=state.num_processes,
        device=str(state.device),
        all_gather=lambda obj: list(gather_object([obj])),
        broadcast=broadcast,
        close=close,
    )


class ShardedBuildError(RuntimeError):
    """A sharded build failed on some rank (raised on every rank, with each failure's traceback)."""


def _raise_if_failed(statuses: list, what: str) -> None:
    failed = [(rank, s) for rank, s in enumerate(statuses) if s is not None]
    if failed:
        detail = "\n".join(f"rank {rank}: {s}" for rank, s in failed)
        raise ShardedBuildError(f"sharded build failed while {what}:\n{detail}")


def build_sharded(
    benchmark,
    retriever,
    out_dir: str | Path | None = None,
    kind: str | None = AUTO,
    batch_size: int = 64,
    progress: bool = True,
    force: bool = False,
    context: DistContext | None = None,
    shard_dir: str | Path | None = None,
    keep_shards: bool = False,
    memory_budget: int | None = None,
    **params,
) -> LoadedIndex:
    """`build_corpus_index`, with the encoding split across the processes of `context`.

    Every process calls it; rank 0 decides whether a build is needed, each rank
    encodes its shard, rank 0 merges and writes the index, and every rank
    returns the loaded index. A failure on any rank is raised on all of them.
    """
    ctx = context or distributed_context()
    require_encoder(retriever)
    ids = corpus_ids_of(benchmark)
    out_dir = Path(out_dir) if out_dir is not None else default_index_dir(benchmark, retriever)
    refuse_foreign(out_dir)  # every rank, before any encoding
    fingerprint = corpus_fingerprint(benchmark)

    plan = None
    if ctx.is_main:
        try:
            if memory_budget is None:
                memory_budget = default_memory_budget()
            if kind is not None:
                requested_params(kind, max(len(ids), 1), int(retriever.dim), params, memory_budget)
            reasons = rebuild_reasons(out_dir, benchmark, retriever, ids, kind, params, memory_budget)
            build_kind, build_params, choice = plan_rebuild(
                out_dir, kind, len(ids), int(retriever.dim), params, memory_budget
            )
            plan = {
                "build": bool(force or reasons),
                "kind": build_kind,
                "params": build_params,
                "choice": choice,
                "error": None,
            }
        except Exception as exc:  # tell the other ranks instead of leaving them waiting
            plan = {"error": f"{type(exc).__name__}: {exc}"}
    plan = ctx.broadcast(plan)
    if plan["error"]:
        raise ShardedBuildError(f"sharded build of {out_dir}: {plan['error']}")
    if not plan["build"]:
        return load_index(out_dir, retriever, ids, corpus_fingerprint=fingerprint)

    shard_dir = (
        Path(shard_dir)
        if shard_dir is not None
        else shard_dir_for(out_dir, retriever.spec_hash(), corpus_checksum(ids), ctx.world_size)
    )
    started = time.perf_counter()
    status = None
    try:
        encode_shard(benchmark, retriever, shard_dir, ctx.rank, ctx.world_size, batch_size, progress)
    except Exception:
        status = traceback.format_exc(limit=3)
    _raise_if_failed(ctx.all_gather(status), "encoding shards")

    loaded, status = None, None
    if ctx.is_main:
        try:
            with build_lock(out_dir):
                xb = merge_shards(shard_dir, ids, ctx.world_size, retriever.spec_hash(), retriever.dim)
                manifest = make_manifest(
                    benchmark,
                    retriever,
                    ids,
                    plan["kind"],
                    plan["params"],
                    0.0,
                    num_shards=ctx.world_size,
                    choice=plan["choice"],
                )
                loaded = write_built_index(xb, ids, out_dir, manifest, started)
            if not keep_shards:
                remove_shards(shard_dir, ctx.world_size)
        except Exception:
            status = traceback.format_exc(limit=3)
    _raise_if_failed(ctx.all_gather(status), "merging shards on rank 0")
    return loaded if loaded is not None else load_index(out_dir, retriever, ids, corpus_fingerprint=fingerprint)


class _BuildNeeded(Exception):
    """Raised where rank 0 would encode: the collection is not fresh."""


def _build_needed():
    raise _BuildNeeded


def build_sharded_milvus(
    benchmark,
    retriever,
    uri: str,
    context: DistContext,
    shard_dir: str | Path | None = None,
    keep_shards: bool = False,
    batch_size: int = 64,
    progress: bool = True,
    **kw,
):
    """`build_milvus_index` with the encoding split across the processes of `context`: rank 0 checks the
    collection, every rank encodes its shard (into `shard_dir`, default a hidden folder under the
    indexes folder), rank 0 merges and writes the collection and returns it loaded (the others None)."""
    from cir_demo.index.milvus_build import build_milvus_index

    ctx = context
    ids = corpus_ids_of(benchmark)
    plan = None
    if ctx.is_main:
        try:
            build_milvus_index(benchmark, retriever, uri, embeddings=_build_needed, progress=progress, **kw)
            plan = {"build": False, "error": None}
        except _BuildNeeded:
            plan = {"build": True, "error": None}
        except Exception as exc:  # tell the other ranks instead of leaving them waiting
            plan = {"error": f"{type(exc).__name__}: {exc}"}
    plan = ctx.broadcast(plan)
    if plan["error"]:
        raise ShardedBuildError(f"sharded build into Milvus: {plan['error']}")
    if plan["build"]:
        where = default_index_dir(benchmark, retriever)
        shard_dir = (
            Path(shard_dir)
            if shard_dir
            else shard_dir_for(where, retriever.spec_hash(), corpus_checksum(ids), ctx.world_size)
        )
        status = None
        try:
            encode_shard(benchmark, retriever, shard_dir, ctx.rank, ctx.world_size, batch_size, progress)
        except Exception:
            status = traceback.format_exc(limit=3)
        _raise_if_failed(ctx.all_gather(status), "encoding shards")
    loaded, status = None, None
    if ctx.is_main:
        try:
            merged = lambda: merge_shards(shard_dir, ids, ctx.world_size, retriever.spec_hash(), retriever.dim)  # noqa: E731
            loaded = build_milvus_index(
                benchmark, retriever, uri, embeddings=merged, progress=progress, num_shards=ctx.world_size, **kw
            )
            if plan["build"] and not keep_shards:
                remove_shards(shard_dir, ctx.world_size)
        except Exception:
            status = traceback.format_exc(limit=3)
    _raise_if_failed(ctx.all_gather(status), "writing the collection on rank 0")
    return loaded  # None on the other ranks: a Milvus Lite folder is open in one process only
