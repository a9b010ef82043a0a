"""Time PinPoint metric evaluation on 50-item rankings for every query (7,635 by default).

    python bench/bench_metrics.py                                  # synthetic PinPoint-sized queries
    python bench/bench_metrics.py --parquet pinpoint_licensed.parquet
    python bench/bench_metrics.py --official-script /path/to/pinpoint-dataset/evaluate.py [--parquet ...]

Reports the median of `--repeats` runs of `cir_demo.metrics.pinpoint.evaluate`
(per-query table + aggregates). With `--official-script`, the official
evaluator is timed in the same run as subprocesses on the same rankings:
its `evaluate_model` alone (imported from the script's folder; the
apples-to-apples number) and the whole script end to end (interpreter start,
imports, parquet and JSON loading included). Its numbers are also compared to
ours (max abs difference over the official columns).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cir_demo.benchmarks.schema import Judgments, Query, normalize_pinpoint_query_id  # noqa: E402
from cir_demo.metrics import CoverageWarning, pinpoint  # noqa: E402
from cir_demo.utils.io import write_json_atomic  # noqa: E402


def synthetic_ground_truth(n_queries: int, seed: int) -> pd.DataFrame:
    """A PinPoint-shaped ground-truth frame: ~6 paraphrases per intent, ~9 positives, ~35 negatives."""
    rng = np.random.default_rng(seed)
    ids = [f"{i:032x}" for i in rng.integers(0, 2**62, size=120_000)]
    rows, qid = [], 1
    while len(rows) < n_queries:
        n_para = int(rng.integers(3, 9))
        img1 = ids[int(rng.integers(len(ids)))]
        img2 = ids[int(rng.integers(len(ids)))] if rng.random() < 0.13 else "None"
        pos = [ids[int(i)] for i in rng.integers(len(ids), size=int(rng.integers(1, 25)))]
        neg = [ids[int(i)] for i in rng.integers(len(ids), size=int(rng.integers(4, 70)))]
        for _ in range(min(n_para, n_queries - len(rows))):
            rows.append(dict(query_id=f"query_{qid:05d}", query_image_signature=img1, query_image_signature2=img2,
                             instruction="synthetic", positive_candidates=pos, negative_candidates=neg))
            qid += 1
    return pd.DataFrame(rows)


def queries_from_ground_truth(gt: pd.DataFrame) -> list[Query]:
    queries = []
    for row in gt.itertuples(index=False):
        refs = [row.query_image_signature]
        if row.query_image_signature2 not in ("None", None, ""):
            refs.append(row.query_image_signature2)
        # the real file ends many negative lists with a null: never put it into a ranking
        negatives = [] if row.negative_candidates is None else [n for n in row.negative_candidates if n is not None]
        queries.append(Query(row.query_id, refs, row.instruction, group_id="|".join(refs),
                             judgments=Judgments(list(row.positive_candidates), negatives)))
    return queries


def synthetic_run(queries: list[Query], length: int, seed: int) -> dict[str, list[str]]:
    """Rankings mixing positives (~20%), negatives (~20%) and random ids, best first."""
    rng = np.random.default_rng(seed)
    noise = [f"noise{i:027d}" for i in range(50_000)]
    run = {}
    for q in queries:
        kinds = rng.random(length)
        items = []
        for u in kinds:
            if u < 0.2 and q.positives:
                items.append(q.positives[int(rng.integers(len(q.positives)))])
            elif u < 0.4 and q.negatives:
                items.append(q.negatives[int(rng.integers(len(q.negatives)))])
            else:
                items.append(noise[int(rng.integers(len(noise)))])
        run[q.query_id] = list(dict.fromkeys(items))  # rankings from a retriever have no repeats
    return run


def time_ours(run, queries, repeats: int) -> dict:
    totals, per_query_times = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoverageWarning)
        for _ in range(repeats):
            t0 = time.perf_counter()
            df = pinpoint.per_query(run, queries)
            t1 = time.perf_counter()
            agg = pinpoint.aggregate(df, len(queries))
            t2 = time.perf_counter()
            totals.append(t2 - t0)
            per_query_times.append(t1 - t0)
    return {"median_s": statistics.median(totals), "per_query_median_s": statistics.median(per_query_times),
            "all_s": totals, "aggregate": agg}


# Runs inside a subprocess with the official script's folder on sys.path.
_OFFICIAL_DRIVER = r"""
import json, statistics, sys, time, contextlib, io
import pandas as pd
sys.path.insert(0, sys.argv[1])
from evaluate import evaluate_model
gt = pd.read_parquet(sys.argv[2])
results = json.load(open(sys.argv[3]))
times = []
for _ in range(int(sys.argv[4])):
    with contextlib.redirect_stdout(io.StringIO()):
        t = time.perf_counter(); out = evaluate_model("bench", results, gt); times.append(time.perf_counter() - t)
print(json.dumps({"times": times, "result": {k: (v if isinstance(v, str) else float(v)) for k, v in out.items()}}))
"""


def time_official(script: Path, gt_path: Path, results_path: Path, repeats: int, workdir: Path) -> dict:
    script_dir = str(script.resolve().parent)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _OFFICIAL_DRIVER, script_dir, str(gt_path), str(results_path),
                           str(repeats)], capture_output=True, text=True, env=env, check=True)
    driver = json.loads(proc.stdout.strip().splitlines()[-1])
    wall = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, str(script.resolve()), "--results", str(results_path), "--ground_truth",
                        str(gt_path), "--output", str(workdir / "official_metrics.csv")],
                       cwd=script_dir, capture_output=True, env=env, check=True)
        wall.append(time.perf_counter() - t)
    return {"evaluate_model_median_s": statistics.median(driver["times"]), "evaluate_model_all_s": driver["times"],
            "script_wall_median_s": statistics.median(wall), "script_wall_all_s": wall, "result": driver["result"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parquet", type=Path, help="real PinPoint ground truth (default: synthetic, same size)")
    parser.add_argument("--official-script", type=Path, help="the official evaluate.py, timed side by side")
    parser.add_argument("--n-queries", type=int, default=7635, help="synthetic queries (ignored with --parquet)")
    parser.add_argument("--length", type=int, default=50, help="ranking length")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the summary JSON here")
    args = parser.parse_args(argv)

    gt = pd.read_parquet(args.parquet) if args.parquet else synthetic_ground_truth(args.n_queries, args.seed)
    queries = queries_from_ground_truth(gt)
    run = synthetic_run(queries, args.length, args.seed + 1)
    print(f"{len(queries)} queries, {args.length}-item rankings, {args.repeats} repeats", file=sys.stderr)

    ours = time_ours(run, queries, args.repeats)
    summary = {
        "n_queries": len(queries),
        "ranking_length": args.length,
        "repeats": args.repeats,
        "data": str(args.parquet) if args.parquet else "synthetic",
        "ours_median_s": ours["median_s"],
        "ours_per_query_median_s": ours["per_query_median_s"],
        "ours_all_s": ours["all_s"],
    }
    if args.official_script:
        with tempfile.TemporaryDirectory(prefix="bench_metrics_") as tmp:
            tmp = Path(tmp)
            gt_path = args.parquet or tmp / "ground_truth.parquet"
            if not args.parquet:
                gt.to_parquet(gt_path)
            results_path = tmp / "results.json"
            results_path.write_text(json.dumps(
                {normalize_pinpoint_query_id(k): {"retrieved_items": v} for k, v in run.items()}))
            official = time_official(args.official_script, gt_path, results_path, args.repeats, tmp)
        columns = [c for c in pinpoint.OFFICIAL_COLUMNS if c != "model"]
        diffs = {c: abs(float(official["result"][c]) - float(ours["aggregate"][c])) for c in columns}
        summary.update({
            "official_evaluate_model_median_s": official["evaluate_model_median_s"],
            "official_evaluate_model_all_s": official["evaluate_model_all_s"],
            "official_script_wall_median_s": official["script_wall_median_s"],
            "official_script_wall_all_s": official["script_wall_all_s"],
            "speedup_vs_evaluate_model": official["evaluate_model_median_s"] / ours["median_s"],
            "parity_max_abs_diff": max(diffs.values()),
            "parity_columns_exact": sum(d == 0 for d in diffs.values()),
            "parity_columns": len(diffs),
        })
    print(json.dumps(summary, indent=2))
    if args.out:
        write_json_atomic(args.out, summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
