"""An eval's outputs (`harness.report.write_outputs`: per_query.csv, breakdowns, paired tests, report and
plots) written with their children forked beside the caller (`utils.beside`, where `spare_core` says a
core is free) against written inline (where it says none is), side by side in one process.

    python bench/bench_beside.py                      # the tiny world's test split, two runs
    python bench/bench_beside.py --heap-gb 2          # in a process holding 2 GB more, as a test worker does

The two runs are seeded random rankings of the world's corpus (what is written does not depend on how
good they are). The ways alternate, `--repeats` times each; prints each way's median wall and CPU seconds
(the caller's and its children's) and the ratios inline / forked. On a quiet machine forking saves wall
time; on a machine that other work fills, the CPU it costs is what counts: run it twice, quiet and beside
a busy loop on every core, to see both.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=20, help="intent groups of the tiny world (default 20)")
    parser.add_argument("--repeats", type=int, default=7, help="outputs written each way (default 7)")
    parser.add_argument("--heap-gb", type=float, default=0.0, help="memory the process holds besides (GB)")
    args = parser.parse_args()

    import numpy as np

    from cir_demo.harness.report import write_outputs
    from cir_demo.store.score import evaluate_run
    from cir_demo.utils import beside
    from cir_demo.utils.beside import own_cpu_seconds as cpu_seconds
    from cir_demo.world import load_world

    held = np.ones(int(args.heap_gb * 2**30 / 8)) if args.heap_gb else None  # touched: resident, as a heap is
    bench = load_world(size="tiny", progress=False).limit(args.limit)
    ids, rng = list(bench.corpus_ids), random.Random(0)
    evaluations = [
        evaluate_run(bench, {q.query_id: rng.sample(ids, 50) for q in bench.queries}, f"run{i}", n_boot=1000)
        for i in range(2)
    ]
    spare = beside.spare_core
    seconds: dict[str, list[tuple[float, float]]] = {"forked": [], "inline": []}
    with tempfile.TemporaryDirectory(prefix="cir-demo-bench-beside-") as out:
        for i in range(2 * args.repeats + 1):
            way = ("forked", "inline")[i % 2]
            beside.spare_core = (lambda: True) if way == "forked" else (lambda: False)
            wall, cpu = time.perf_counter(), cpu_seconds()
            write_outputs(bench, evaluations, Path(out) / str(i), n_boot=1000)
            if i:  # the first writes import what both ways then use
                seconds[way].append((time.perf_counter() - wall, cpu_seconds() - cpu))
    beside.spare_core = spare
    del held
    medians = {w: [statistics.median(s[k] for s in v) for k in (0, 1)] for w, v in seconds.items()}
    print(f"tiny world, {len(bench.queries)} queries, 2 runs, n_boot 1000, heap +{args.heap_gb:g} GB")
    for way, (wall, cpu) in medians.items():
        print(f"{way:7s} median wall {wall:.3f} s, CPU {cpu:.3f} s ({args.repeats} each)")
    (fw, fc), (iw, ic) = medians["forked"], medians["inline"]
    print(f"inline / forked: wall {iw / fw:.2f}, CPU {ic / fc:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
