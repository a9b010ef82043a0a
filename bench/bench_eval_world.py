"""`python app.py --eval` on the default world from an empty data folder: this code against another checkout.

    git worktree add --detach /tmp/base main        # the code to compare against
    python bench/bench_eval_world.py --old /tmp/base [--pairs 3] [--out bench.json] [-- --limit 50]

Each run is a whole process, `python app.py --eval --out DIR` in its own checkout, on its own empty
data folder (`CIR_DEMO_DATA`, so the world is generated, the indexes built and the reranker's corpus
features computed as on a fresh clone). Pairs alternate which code runs first (old, new, new, old,
...) so that a change in machine load hits both; reported per pair: wall seconds, CPU seconds (user
+ system) and peak resident memory of each, the load average, and whether every output file
(metrics, per_query, breakdowns, paired, report.md, results files, plots; both test splits) is
byte-identical between the two (run_info.json, which holds the timings, is left out of that
comparison, and so are run_manifest.json's records of it). The ratio is the median of the per-pair
ratios new / old, for wall and for CPU time (user + system, the render workers included: the one the
other users of a shared machine disturb less). Both runs' per-stage split (run_info.json's
`timings_s`, retrieval and reranking summed over retrievers and splits) is printed beside each
pair. Arguments after `--` go to both `--eval` runs.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

# the variables that name a data folder: each timed run gets an empty one, as `index prebuilt` builds in
from cir_demo.harness.prebuilt_run_build import DATA_ENV as DATA_VARIABLES  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOT_COMPARED = {"run_info.json"}  # timings and argv: differ by design
MANIFEST = "run_manifest.json"  # compared without its records of the run_info.json files


def run_eval(code: Path, work: Path, extra: list[str]) -> dict:
    """One whole `--eval` process of the checkout `code` on an empty data folder under `work`."""
    data, out = work / "data", work / "out"
    data.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in DATA_VARIABLES}
    env.update(CIR_DEMO_DATA=str(data), HF_HUB_OFFLINE="1")
    t = time.perf_counter()
    with open(work / "log.txt", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "app.py", "--eval", "--out", str(out), *extra],
            cwd=code,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{code}: --eval failed ({os.waitstatus_to_exitcode(status)}); log: {work / 'log.txt'}")
    info = json.loads((out / "run_info.json").read_text(encoding="utf-8"))
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "out": out,
        "timings_s": info.get("timings_s", {}),
    }


def differing_files(a: Path, b: Path) -> list[str]:
    """Relative paths whose bytes differ (or that exist on one side only), run_info.json left out and
    run_manifest.json compared without its records of them."""
    names = {p.relative_to(a) for p in a.rglob("*") if p.is_file()} | {
        p.relative_to(b) for p in b.rglob("*") if p.is_file()
    }
    return sorted(str(n) for n in names if n.name not in NOT_COMPARED and not _same(a / n, b / n))


def _same(a: Path, b: Path) -> bool:
    if not (a.is_file() and b.is_file()):
        return False
    if a.name != MANIFEST:
        return a.read_bytes() == b.read_bytes()
    records = []
    for path in (a, b):
        files = json.loads(path.read_text(encoding="utf-8")).get("files", {})
        records.append({k: v for k, v in files.items() if Path(k).name not in NOT_COMPARED})
    return records[0] == records[1]


def stage_split(timings: dict) -> dict:
    """run_info.json's `timings_s` summed per kind of stage: retrieval and reranking over retrievers
    and splits, each other stage as it is."""
    out: dict[str, float] = {}
    for name, seconds in timings.items():
        kind = name.split("/", 1)[1].split(" (")[0] if "/" in name else name
        out[kind] = out.get(kind, 0.0) + float(seconds)
    return out


def one_pair(i: int, old: Path, tmp: Path, extra: list[str]) -> dict:
    order = [("old", old), ("new", REPO)] if i % 2 == 0 else [("new", REPO), ("old", old)]
    load = os.getloadavg()[0]
    runs = {who: run_eval(code, tmp / f"pair{i}-{who}", extra) for who, code in order}
    diff = differing_files(runs["old"]["out"], runs["new"]["out"])
    n_files = sum(1 for p in runs["new"]["out"].rglob("*") if p.is_file())
    for who in runs:
        shutil.rmtree(tmp / f"pair{i}-{who}" / "data", ignore_errors=True)  # the worlds: 100 MB each
    o, n = runs["old"], runs["new"]
    print(
        f"pair {i + 1} ({order[0][0]} first, load {load:.1f}): wall old {o['wall_s']:.1f} s, new {n['wall_s']:.1f} s, "
        f"ratio {n['wall_s'] / o['wall_s']:.3f}; CPU {o['cpu_s']:.1f} s vs {n['cpu_s']:.1f} s; peak RSS "
        f"{o['peak_rss_mb']:.0f} vs {n['peak_rss_mb']:.0f} MB; outputs: "
        + (f"{n_files - 1} files byte-identical" if not diff else f"DIFFER: {', '.join(diff[:10])}"),
        file=sys.stderr,
    )
    for who in ("old", "new"):
        print(
            f"  {who} stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in stage_split(runs[who]["timings_s"]).items()),
            file=sys.stderr,
        )
    return {
        "load": load,
        "old_first": i % 2 == 0,
        "old_wall_s": o["wall_s"],
        "new_wall_s": n["wall_s"],
        "old_cpu_s": o["cpu_s"],
        "new_cpu_s": n["cpu_s"],
        "old_peak_rss_mb": o["peak_rss_mb"],
        "new_peak_rss_mb": n["peak_rss_mb"],
        "differing_files": diff,
        "files_compared": n_files - 1,
        "new_timings_s": n["timings_s"],
        "old_timings_s": o["timings_s"],
    }


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="checkout of the code to compare against (e.g. main)")
    parser.add_argument("--pairs", type=int, default=3, help="alternating pairs (median reported)")
    parser.add_argument("--out", type=Path, help="also write the summary JSON here")
    parser.add_argument("--keep", type=Path, help="keep the runs' outputs and logs under this folder")
    args = parser.parse_args(argv)
    if not (args.old / "app.py").is_file():
        parser.error(f"--old {args.old}: no app.py there (a checkout of this repository, e.g. git worktree add)")
    tmp = Path(tempfile.mkdtemp(prefix="bench_eval_world_", dir=args.keep))
    try:
        pairs = [one_pair(i, args.old.resolve(), tmp, extra) for i in range(args.pairs)]
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    summary = {
        "pairs": pairs,
        "extra_args": extra,
        "cpu_count": os.cpu_count(),
        "wall_ratio_median": statistics.median(p["new_wall_s"] / p["old_wall_s"] for p in pairs),
        "cpu_ratio_median": statistics.median(p["new_cpu_s"] / p["old_cpu_s"] for p in pairs),
        "old_wall_median_s": statistics.median(p["old_wall_s"] for p in pairs),
        "new_wall_median_s": statistics.median(p["new_wall_s"] for p in pairs),
        "load_average_median": statistics.median(p["load"] for p in pairs),
        "byte_identical": all(not p["differing_files"] for p in pairs),
    }
    print(
        f"median of {len(pairs)} pairs: wall old {summary['old_wall_median_s']:.1f} s, new "
        f"{summary['new_wall_median_s']:.1f} s, ratio {summary['wall_ratio_median']:.3f} (CPU ratio "
        f"{summary['cpu_ratio_median']:.3f}); load average {summary['load_average_median']:.1f}; outputs "
        + ("byte-identical" if summary["byte_identical"] else "DIFFER"),
        file=sys.stderr,
    )
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0 if summary["byte_identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
