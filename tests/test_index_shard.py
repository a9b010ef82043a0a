"""Sharded encoding: the merged index equals the single-process build.

The two-process tests start real processes that form a gloo process group
through accelerate (RANK/WORLD_SIZE environment, or `accelerate launch`); each
runs this file's `__main__` worker.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cir_demo.index.build import build_corpus_index
from cir_demo.index.manifest import read_manifest
from cir_demo.index.shard import (
    DistContext,
    ShardedBuildError,
    build_sharded,
    encode_shard,
    merge_shards,
    shard_files,
    shard_range,
)

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
N_IMAGES = 37  # not divisible by 2 or 3: uneven shards


def test_shard_range_partitions_in_order():
    for n in (0, 1, 2, 7, 37, 100):
        for ws in (1, 2, 3, 5, 8):
            ranges = [shard_range(n, r, ws) for r in range(ws)]
            covered = [i for a, b in ranges for i in range(a, b)]
            assert covered == list(range(n))  # contiguous, ordered, complete, disjoint
            sizes = [b - a for a, b in ranges]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="rank must be in"):
        shard_range(10, 2, 2)
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        shard_range(10, 0, 0)


def assert_same_index(a, b):
    assert a.ids == b.ids
    np.testing.assert_allclose(a.index.reconstruct_n(0, len(a.ids)), b.index.reconstruct_n(0, len(b.ids)), atol=1e-6)
    ma, mb = a.manifest, b.manifest
    for field in (
        "benchmark",
        "retriever",
        "spec_hash",
        "weights_sha256",
        "corpus_sha256",
        "dim",
        "count",
        "kind",
        "params",
    ):
        assert getattr(ma, field) == getattr(mb, field), field


def test_shards_encoded_one_after_another_merge_to_the_single_build(tmp_path):
    from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark

    bench = tiny_benchmark(N_IMAGES)
    single = build_corpus_index(bench, TinyConvRetriever(), out_dir=tmp_path / "single", batch_size=4, progress=False)
    shard_dir = tmp_path / "shards"
    for rank in range(3):
        encode_shard(bench, TinyConvRetriever(), shard_dir, rank, 3, batch_size=4, progress=False)
    merged = merge_shards(shard_dir, bench.corpus_ids, 3, TinyConvRetriever().spec_hash(), 16)
    np.testing.assert_allclose(merged, single.index.reconstruct_n(0, N_IMAGES), atol=1e-6)
    # A finished shard is reused, not re-encoded (resuming an interrupted build).
    again = TinyConvRetriever()
    encode_shard(bench, again, shard_dir, 1, 3, progress=False)
    assert again.images_encoded == 0
    # A shard from another model or corpus is refused by name.
    with pytest.raises(ValueError, match="shard 0 .*spec_hash"):
        merge_shards(shard_dir, bench.corpus_ids, 3, TinyConvRetriever(seed=9).spec_hash())
    with pytest.raises(ValueError, match="corpus_sha256"):
        merge_shards(shard_dir, bench.corpus_ids[:-1], 3)
    shard_files(shard_dir, 2)[1].unlink()
    with pytest.raises(FileNotFoundError, match="shard 2"):
        merge_shards(shard_dir, bench.corpus_ids, 3)


def test_build_sharded_in_one_process_equals_single_build(tmp_path):
    from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark

    bench = tiny_benchmark(N_IMAGES)
    single = build_corpus_index(bench, TinyConvRetriever(), out_dir=tmp_path / "single", progress=False)
    sharded = build_sharded(
        bench, TinyConvRetriever(), out_dir=tmp_path / "sharded", progress=False, context=DistContext()
    )
    assert_same_index(single, sharded)
    assert not list(tmp_path.glob(".sharded.shards-*"))  # shards cleaned up after the merge


def test_failure_on_one_rank_is_raised_on_every_rank(tmp_path):
    from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark

    statuses = {"encode": [None, "Traceback...\nRuntimeError: CUDA out of memory"]}
    ctx = DistContext(rank=0, world_size=2, all_gather=lambda obj: [obj] + statuses["encode"][1:])
    bench = tiny_benchmark(6)
    with pytest.raises(ShardedBuildError, match="(?s)rank 1: .*CUDA out of memory"):
        build_sharded(bench, TinyConvRetriever(), out_dir=tmp_path / "x", progress=False, context=ctx)
    assert not (tmp_path / "x").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_env(tmp_path: Path) -> dict:
    """The workers' environment; TMPDIR the test's own: torch's elastic launcher leaves a
    torchelastic_* folder in the temporary directory at every launch."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO), str(HERE.parent)]),
        OMP_NUM_THREADS="1",
        CIR_DEMO_INDEXES=str(tmp_path / "indexes"),
        HF_HUB_OFFLINE="1",
        TMPDIR=str(tmp_path / "tmp"),
    )
    return env


def _single_reference(tmp_path: Path):
    from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark

    return build_corpus_index(
        tiny_benchmark(N_IMAGES), TinyConvRetriever(), out_dir=tmp_path / "single", progress=False
    )


def _check_two_process_result(tmp_path: Path, procs_output: str):
    from cir_demo.index.manifest import load_index

    out = tmp_path / "sharded"
    loaded = load_index(out)
    assert read_manifest(out).num_shards == 2, procs_output
    assert_same_index(_single_reference(tmp_path), loaded)
    reports = sorted((json.loads(p.read_text()) for p in tmp_path.glob("worker-*.json")), key=lambda r: r["rank"])
    assert [(r["rank"], r["world_size"]) for r in reports] == [(0, 2), (1, 2)]
    assert [r["encoded"] for r in reports] == list(
        map(lambda r: shard_range(N_IMAGES, r, 2)[1] - shard_range(N_IMAGES, r, 2)[0], (0, 1))
    )
    assert all(r["ids"] == loaded.ids for r in reports)  # every rank got the merged index back


def test_two_processes_with_rank_environment(tmp_path):
    env = _worker_env(tmp_path)
    env.update(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE), "--worker", str(tmp_path)],
            cwd=REPO,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    _check_two_process_result(tmp_path, "\n".join(outputs))


@pytest.mark.slow
def test_two_processes_with_accelerate_launch(tmp_path):
    """The documented launcher (`accelerate launch --multi_gpu` is its multi-process switch, also on CPU)."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(_free_port()),
        str(HERE),
        "--worker",
        str(tmp_path),
    ]
    done = subprocess.run(cmd, cwd=REPO, env=_worker_env(tmp_path), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    _check_two_process_result(tmp_path, done.stdout + done.stderr)


def _worker(tmp: Path) -> None:
    """One process of a sharded build (run by the two-process tests)."""
    import torch

    from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark

    torch.set_num_threads(1)
    retriever = TinyConvRetriever()
    loaded = build_sharded(tiny_benchmark(N_IMAGES), retriever, out_dir=tmp / "sharded", batch_size=4, progress=False)
    from cir_demo.index.shard import distributed_context

    ctx = distributed_context()
    (tmp / f"worker-{ctx.rank}.json").write_text(
        json.dumps(
            {"rank": ctx.rank, "world_size": ctx.world_size, "encoded": retriever.images_encoded, "ids": loaded.ids}
        )
    )
    ctx.close()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(Path(sys.argv[2]))
    else:
        sys.exit("usage: python tests/test_index_shard.py --worker TMPDIR (started by the tests)")
