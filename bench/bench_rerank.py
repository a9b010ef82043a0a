"""Prefix-cached batched reranking vs naive one-candidate-at-a-time, on a tiny Qwen2.5-VL.

    python bench/bench_rerank.py                 # tiny random model, CPU, 2 threads
    python bench/bench_rerank.py --json out.json --min-ratio 3

Builds a randomly initialised Qwen2.5-VL (text: hidden 256, 4 layers; vision:
hidden 64, 4 blocks; 64 tokens per 224x224 image) in a temporary directory,
loads it through the reranker's normal loading code, and scores the top 20
candidates of a one-image and a two-image query both ways, interleaved,
`--repeats` times. Reports the median
wall time of each, their ratio (naive / cached, measured in this one run),
the ratio of the fastest repeats, and the largest difference between the two
paths' logits (per-repeat wall and CPU times go to --json).
`--model PATH --device cuda` times a real checkpoint instead.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def noise_images(n: int, side: int, seed: int):
    import numpy as np
    from PIL import Image

    rng = np.random.RandomState(seed)
    return [Image.fromarray(rng.randint(0, 256, (side, side, 3), dtype=np.uint8)) for _ in range(n)]


def time_once(reranker, request, images, cached: bool, sync) -> tuple[float, float, object]:
    """(wall seconds, process CPU seconds, logits)."""
    reranker.use_prefix_cache = cached
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    logits = reranker.score_logits(request, images)
    sync()
    return time.perf_counter() - t0, time.process_time() - c0, logits


def bench_case(reranker, n_refs: int, n_candidates: int, repeats: int, side: int, sync) -> dict:
    import numpy as np

    from cir_demo.rerank import RerankRequest

    refs = noise_images(n_refs, side, seed=1)
    instruction = "make it red" if n_refs == 1 else "combine the shape of <img1> with the colour of <img2>"
    request = RerankRequest(refs, [f"ref{i}" for i in range(n_refs)], instruction)
    images = noise_images(n_candidates, side, seed=2)
    # Warm-up (allocator, kernels) for both paths.
    time_once(reranker, request, images[:2], True, sync)
    time_once(reranker, request, images[:2], False, sync)
    wall = {True: [], False: []}
    cpu = {True: [], False: []}
    max_diff = 0.0
    for r in range(repeats):
        # Interleaved, alternating which goes first, so changing machine load affects both alike.
        logits = {}
        for cached in (True, False) if r % 2 == 0 else (False, True):
            w, c, logits[cached] = time_once(reranker, request, images, cached, sync)
            wall[cached].append(w)
            cpu[cached].append(c)
        max_diff = max(max_diff, float(np.abs(logits[True] - logits[False]).max()))
    cached_t, naive_t = wall[True], wall[False]
    reranker.use_prefix_cache = True
    prefix_text, segment_text = reranker.split_prefix(reranker.chat_text(request), n_refs)
    enc = reranker.processor(text=[prefix_text], images=refs, return_tensors="pt")
    seg = reranker.processor(text=[segment_text], images=images[:1], return_tensors="pt")
    med_c, med_n = statistics.median(cached_t), statistics.median(naive_t)
    return {
        "reference_images": n_refs,
        "candidates": n_candidates,
        "prefix_tokens": int(enc["input_ids"].shape[1]),
        "candidate_tokens": int(seg["input_ids"].shape[1]),
        "cached_batched_s": cached_t,
        "naive_s": naive_t,
        "median_cached_batched_s": med_c,
        "median_naive_s": med_n,
        "ms_per_candidate_cached": 1000 * med_c / n_candidates,
        "ms_per_candidate_naive": 1000 * med_n / n_candidates,
        "speedup": med_n / med_c,
        "speedup_of_minimums": min(naive_t) / min(cached_t),
        "max_abs_logit_diff": max_diff,
        "cached_batched_cpu_s": cpu[True],
        "naive_cpu_s": cpu[False],
        "speedup_cpu_time": statistics.median(cpu[False]) / statistics.median(cpu[True]),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="checkpoint to time (default: build the tiny random model)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--candidates", type=int, default=20, help="top n to rerank (default 20)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=8, help="candidates per forward (default 8, as the library)")
    p.add_argument(
        "--refs",
        type=int,
        nargs="+",
        default=[1, 2],
        choices=[1, 2],
        help="reference images per query, one case each (default: 1 2)",
    )
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--min-ratio", type=float, help="exit 1 if a speedup is below this")
    args = p.parse_args(argv)

    import torch

    from cir_demo.rerank import load_reranker
    from cir_demo.testing.tiny_qwen import SIZES, build_tiny_qwen2_5_vl
    from cir_demo.utils.io import write_json_atomic

    torch.set_num_threads(args.threads)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    with tempfile.TemporaryDirectory(prefix="bench_rerank_") as tmp:
        model = args.model or str(build_tiny_qwen2_5_vl(Path(tmp) / "tiny", size="bench", seed=0))
        side = SIZES["bench"].image_side if not args.model else 448
        reranker = load_reranker(
            "qwen2.5-vl", model=model, device=args.device, dtype=args.dtype, batch_size=args.batch_size
        )
        cases = [bench_case(reranker, n, args.candidates, args.repeats, side, sync) for n in args.refs]
    result = {
        "model": "tiny random Qwen2.5-VL (size 'bench')" if not args.model else args.model,
        "device": args.device,
        "torch_threads": args.threads,
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "cases": cases,
    }
    print(f"model: {result['model']}  device: {args.device}  threads: {args.threads}  batch size: {args.batch_size}")
    print(
        f"{'refs':>4} {'prefix tok':>10} {'cand tok':>8} {'naive s':>8} {'cached s':>8} {'ms/cand naive':>13} "
        f"{'ms/cand cached':>14} {'speedup':>8} {'(of mins)':>9} {'max|dlogit|':>11}"
    )
    for c in cases:
        print(
            f"{c['reference_images']:>4} {c['prefix_tokens']:>10} {c['candidate_tokens']:>8} "
            f"{c['median_naive_s']:>8.3f} {c['median_cached_batched_s']:>8.3f} {c['ms_per_candidate_naive']:>13.1f} "
            f"{c['ms_per_candidate_cached']:>14.1f} {c['speedup']:>7.2f}x {c['speedup_of_minimums']:>8.2f}x "
            f"{c['max_abs_logit_diff']:>11.2e}"
        )
    print(
        f"(times and speedup: medians of {args.repeats} interleaved repeats, top {args.candidates}; "
        "'of mins': ratio of the fastest repeats, the least disturbed by other load on the machine)"
    )
    if args.json:
        write_json_atomic(args.json, result)
    if args.min_ratio is not None and any(c["speedup"] < args.min_ratio for c in cases):
        print(f"FAIL: a speedup is below {args.min_ratio}x", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
