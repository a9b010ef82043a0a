"""One run's breakdown tables (`harness.report.breakdown_parts`: every metadata field's values with group
bootstrap intervals), as `--eval` and results-file evaluation compute them for each run.

    python bench/bench_breakdowns.py                       # this checkout: the default world, then tiny
    python bench/bench_breakdowns.py --old ../other-clone  # the same in a second checkout, alternating

The per-query rows are a seeded draw (every query of the world, its metadata fields, five headline metrics,
5 % of rows unscored), so both checkouts break the same rows down. Prints, per world size and checkout, the
median CPU seconds of `--repeats` calls at `--n-boot` 1000 and 0, the ratio new / old, and a digest of the
tables (CSV text and column types): equal digests mean the checkouts write the same breakdowns.csv.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

CHILD = r"""
import hashlib, json, sys, time
import numpy as np
from types import SimpleNamespace
from cir_demo.world import load_world
from cir_demo.store.score import family_of
from cir_demo.metrics.breakdown import query_meta_frame
from cir_demo.harness.report import breakdown_parts

size, repeats = sys.argv[1], int(sys.argv[2])
bench = load_world(size=size, progress=False)
rng = np.random.default_rng(0)
pq = query_meta_frame(bench.queries)
for m in family_of(bench).headline:
    pq[m] = rng.random(len(pq))
pq["scored"] = rng.random(len(pq)) > 0.05
ev = SimpleNamespace(name="run-a", per_query=pq)
out = {"queries": len(pq), "fields": len(bench.meta_fields())}
for n_boot in (1000, 0):
    times = []
    for _ in range(repeats):
        t = time.process_time()
        tables = breakdown_parts(bench, ev, n_boot=n_boot)
        times.append(time.process_time() - t)
    digest = hashlib.sha256()
    for field in sorted(tables):
        digest.update(field.encode() + tables[field].to_csv(index=False).encode())
        digest.update(str(tables[field].dtypes.to_dict()).encode())
    out[str(n_boot)] = {"times": times, "digest": digest.hexdigest()[:16]}
print(json.dumps(out))
"""


def measure(checkout: Path, size: str, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, size, str(repeats)], cwd=checkout, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"{checkout}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", type=Path, help="a second checkout, measured alternately with this one")
    p.add_argument("--sizes", default="default,tiny", help="world sizes (default: default,tiny)")
    p.add_argument("--repeats", type=int, default=7, help="calls per measurement (default 7)")
    p.add_argument("--pairs", type=int, default=2, help="alternations new, old (default 2)")
    args = p.parse_args()
    checkouts = {"new": HERE} | ({"old": args.old.resolve()} if args.old else {})
    for size in args.sizes.split(","):
        runs: dict[str, list[dict]] = {name: [] for name in checkouts}
        for _ in range(args.pairs):
            for name, checkout in checkouts.items():
                runs[name].append(measure(checkout, size, args.repeats))
        first = runs["new"][0]
        print(f"{size} world: {first['queries']} queries, {first['fields']} fields")
        medians = {}
        for name, results in runs.items():
            for n_boot in ("1000", "0"):
                times = [t for r in results for t in r[n_boot]["times"]]
                medians[name, n_boot] = statistics.median(times)
                digests = {r[n_boot]["digest"] for r in results}
                print(
                    f"  {name:3} n_boot {n_boot:>4}: median {medians[name, n_boot] * 1000:7.1f} ms CPU "
                    f"({len(times)} calls), tables {'/'.join(sorted(digests))}"
                )
        if "old" in runs:
            for n_boot in ("1000", "0"):
                print(f"  ratio new / old, n_boot {n_boot}: {medians['new', n_boot] / medians['old', n_boot]:.2f}")


if __name__ == "__main__":
    main()
