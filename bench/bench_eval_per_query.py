"""`python app.py --eval` of a results file, seconds per query: CIRR against PinPoint.

    python bench/bench_eval_per_query.py [--repeats 5] [--out bench_cirr.json]

Writes a CIRR-sized benchmark in CIRR's files (4,181 val pairs, 2,297 images, img_sets of six) and a
PinPoint-sized one in PinPoint's (7,635 queries, bench_metrics' synthetic judgments, random values in
the released file's metadata columns so that its breakdowns run as on the real file), one results file
each (50 distinct images per query; CIRR's also holds every member of the query's set, so the subset
metrics are scored, and its reference), then times whole processes with the defaults (1,000-resample
CIs, breakdowns, plots, report.md) in alternating pairs. Reported: wall and CPU (user + system)
seconds per query of each, the per-pair ratios CIRR / PinPoint (median), and the load average. The
first pair (cold cache, benchmark validation stored) is reported apart and not counted.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from bench_metrics import CPU_SECONDS, REPO, _timed, queries_from_ground_truth, synthetic_ground_truth, synthetic_run  # noqa: E402
from cir_demo.benchmarks.pinpoint import export_pinpoint  # noqa: E402
from cir_demo.benchmarks.schema import Benchmark  # noqa: E402
from cir_demo.results import write_results  # noqa: E402
from cir_demo.utils.io import write_json_atomic  # noqa: E402

CIRR_PAIRS, CIRR_IMAGES, SET_SIZE = 4181, 2297, 6


def write_cirr(root: Path, seed: int, length: int, n_pairs: int = CIRR_PAIRS) -> tuple[Path, int]:
    """CIRR val files and a results file `{pairid: [images]}`; returns (results path, number of queries)."""
    rng = np.random.default_rng(seed)
    images = [f"dev-{i // 4}-{i % 4}-img{i % 2}" for i in range(CIRR_IMAGES)]
    entries, run = [], {}
    for pid in range(n_pairs):
        members = [images[int(i)] for i in rng.choice(CIRR_IMAGES, SET_SIZE, replace=False)]
        ref, target = members[0], members[int(rng.integers(1, SET_SIZE))]
        caption = " ".join(["word"] * int(rng.integers(3, 25)))
        entries.append(
            {
                "pairid": pid,
                "reference": ref,
                "target_hard": target,
                "target_soft": {target: 1.0},
                "caption": caption,
                "img_set": {"id": pid // 3, "members": members},
            }
        )
        ranked = [images[int(i)] for i in rng.choice(CIRR_IMAGES, length, replace=False)]
        run[str(pid)] = list(dict.fromkeys(ranked + list(rng.permutation(members))))  # a retriever's list: no repeats
    write_json_atomic(root / "captions" / "cap.rc2.val.json", entries, indent=None)
    write_json_atomic(root / "image_splits" / "split.rc2.val.json", {i: f"./dev/{i}.png" for i in images}, indent=None)
    write_json_atomic(root / "run_cirr.json", run, indent=None)
    return root / "run_cirr.json", n_pairs


def write_pinpoint(root: Path, seed: int, length: int) -> tuple[Path, int]:
    """PinPoint-shaped, with the metadata columns the released file has (so its breakdowns are run too)."""
    rng = np.random.default_rng(seed + 1)
    pick = lambda values: values[int(rng.integers(len(values)))]  # noqa: E731
    intents = ["Swap", "Add", "Remove", "Style", "Color", "Material"]
    domains = [f"domain{i}" for i in range(20)]
    tones = ["LIGHTEST", "SECOND_LIGHTEST", "SECOND_DARKEST", "DARKEST", None]
    queries = [
        dataclasses.replace(
            q,
            meta={
                "intent_category": pick(intents),
                "domain": pick(domains),
                "skin_tone_bucket": pick(tones),
                "is_question": bool(rng.random() < 0.2),
                "is_imperative": bool(rng.random() < 0.6),
                "length_category": pick(["short", "medium", "long"]),
            },
        )
        for q in queries_from_ground_truth(synthetic_ground_truth(7635, seed))
    ]
    corpus = list(dict.fromkeys(i for q in queries for i in (*q.positives, *q.negatives)))
    bench = Benchmark("pinpoint", "pinpoint", queries, corpus, results_id_format="pinpoint")
    export_pinpoint(bench, root / "pinpoint")
    write_results(root / "run_pinpoint.json", bench, synthetic_run(queries, length, seed))
    return root / "run_pinpoint.json", len(queries)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed pairs (median reported)")
    parser.add_argument("--length", type=int, default=50, help="ranked images per query")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cirr-pairs",
        type=int,
        default=CIRR_PAIRS,
        help="CIRR queries (default 4,181, the val split; 7635 compares at PinPoint's size, "
        "where the fixed start-up cost weighs the same per query)",
    )
    parser.add_argument("--out", type=Path, help="also write the summary JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_eval_") as tmp:
        root = Path(tmp)
        cirr_run, n_cirr = write_cirr(root / "cirr", args.seed, args.length, args.cirr_pairs)
        pp_run, n_pp = write_pinpoint(root, args.seed, args.length)
        common = [sys.executable, "app.py", "--eval", "--out"]
        cmds = {
            "cirr": lambda i: [
                *common,
                str(root / f"out_cirr{i}"),
                "--benchmark",
                "cirr",
                "--root",
                str(root / "cirr"),
                "--results-json",
                str(cirr_run),
            ],
            "pinpoint": lambda i: [
                *common,
                str(root / f"out_pp{i}"),
                "--benchmark",
                "pinpoint",
                "--annotations",
                str(root / "pinpoint" / "pinpoint_licensed.parquet"),
                "--results-json",
                str(pp_run),
            ],
        }
        env = dict(os.environ, CIR_DEMO_BENCHMARK_CACHE=str(root / "benchmark_cache"))
        first = {
            "pinpoint": _timed(cmds["pinpoint"]("f"), REPO, env, "first_official"),
            "cirr": _timed(cmds["cirr"]("f"), REPO, env, "first_ours"),
        }
        wall = {"cirr": [], "pinpoint": []}
        loads = []
        for i in range(args.repeats):
            loads.append(os.getloadavg()[0])
            order = ("pinpoint", "cirr") if i % 2 == 0 else ("cirr", "pinpoint")
            for who in order:
                wall[who].append(_timed(cmds[who](i), REPO, env, "official" if who == "pinpoint" else "ours"))
            print(
                f"pair {i + 1}: CIRR {wall['cirr'][-1]:.2f} s ({n_cirr} queries), PinPoint {wall['pinpoint'][-1]:.2f} s "
                f"({n_pp} queries); load {loads[-1]:.1f}",
                file=sys.stderr,
            )
    cpu = {"pinpoint": CPU_SECONDS["official"], "cirr": CPU_SECONDS["ours"]}
    per_q = {w: [t / (n_cirr if w == "cirr" else n_pp) for t in wall[w]] for w in wall}
    cpu_q = {w: [t / (n_cirr if w == "cirr" else n_pp) for t in cpu[w]] for w in cpu}
    summary = {
        "n_queries": {"cirr": n_cirr, "pinpoint": n_pp},
        "wall_ms_per_query_median": {w: 1000 * statistics.median(v) for w, v in per_q.items()},
        "cpu_ms_per_query_median": {w: 1000 * statistics.median(v) for w, v in cpu_q.items()},
        "ratio_wall_per_query_cirr_over_pinpoint": statistics.median(
            [a / b for a, b in zip(per_q["cirr"], per_q["pinpoint"])]
        ),
        "ratio_cpu_per_query_cirr_over_pinpoint": statistics.median(
            [a / b for a, b in zip(cpu_q["cirr"], cpu_q["pinpoint"])]
        ),
        "first_run_s": first,
        "wall_s": wall,
        "cpu_s": cpu,
        "load_average_1min": loads,
        "load_average_median": statistics.median(loads),
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
