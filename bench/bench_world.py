"""Benchmark the offline world: generation time (the <= 60 s budget) and render time per image.

    python bench/bench_world.py [--size default] [--runs 3] [--render-images 500]

Generation is timed end to end (sampling, judging, captions, writing every file and the
manifest) into a fresh temporary folder, `--runs` times; the median is reported.
Rendering is timed on a seeded sample of test-corpus images, cold caches first, then
warm (`render_batch`, grouped by background as training would use it).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--render-images", type=int, default=500)
    args = ap.parse_args(argv)

    from cir_demo.world.disk import generate_world, read_manifest
    from cir_demo.world.loader import open_world, render_batch
    from cir_demo.world.render import render_scene

    gen_times = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            out = Path(tmp) / f"run{r}"
            t0 = time.perf_counter()
            generate_world(args.size, args.seed, out, progress=False, force=True)
            gen_times.append(time.perf_counter() - t0)
            print(f"generation run {r + 1}: {gen_times[-1]:.2f} s", file=sys.stderr)
        manifest = read_manifest(out)
        world = open_world(out, progress=False)
        rng = random.Random(0)
        n = min(args.render_images, len(world.test_corpus))
        ids = [f"w-te-{i:06d}" for i in rng.sample(range(len(world.test_corpus)), n)]
        scenes = [world.scene(i) for i in ids]
        t0 = time.perf_counter()
        for s in scenes:
            render_scene(s)
        cold = (time.perf_counter() - t0) / n * 1000
        t0, c0 = time.perf_counter(), time.process_time()
        render_batch(ids, world=world)
        batch = (time.perf_counter() - t0) / n * 1000
        batch_cpu = (time.process_time() - c0) / n * 1000
    result = {
        "size": args.size,
        "seed": args.seed,
        "cpu_count": os.cpu_count(),
        "generation_s_runs": [round(t, 2) for t in gen_times],
        "generation_s_median": round(statistics.median(gen_times), 2),
        "render_ms_per_image_first_pass": round(cold, 2),
        "render_ms_per_image_batch": round(batch, 2),
        "render_cpu_ms_per_image_batch": round(batch_cpu, 2),
        "render_images": n,
        "counts": manifest["counts"],
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
