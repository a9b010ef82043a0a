"""Results of record across world seeds: each seed's `--eval` metrics, their mean and range, and for
each of the judge's effects (its mAP gain, its near-miss drop, its phrasing cost) the per-world
difference with its 95% paired-bootstrap interval over intents and on how many worlds the interval
excludes 0 the gaining way ("holds on k of n worlds") or the losing way.

Functions over the files `--eval` writes (`metrics.json`, `paired.csv`, `per_query.csv`; the
compositional split's under `compositional/`); `record_cli.py` runs the evaluations.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean

SPLITS = {"test": "metrics.json", "compositional": "compositional/metrics.json"}
SPLIT_DIRS = {"test": ".", "compositional": "compositional"}
METRICS = ("mAP@10", "NegRecall@10", "mAP@10_noNeg", "recall@10", "ling_sens_paraphrase_range")
RERANKED = "+rerank"
# What the judge changes, and the direction in which the change is a gain.
JUDGE_EFFECTS = (("mAP@10", "up"), ("NegRecall@10", "down"), ("ling_sens_paraphrase_range", "down"))


def read_seed_metrics(folder: Path) -> dict[str, dict[str, dict[str, float]]]:
    """{split: {run name: {metric: value}}} of one `--eval` output folder (splits it lacks are left out)."""
    out = {}
    for split, rel in SPLITS.items():
        path = Path(folder) / rel
        if not path.exists():
            continue
        try:
            runs = json.loads(path.read_text())["runs"]
            out[split] = {r["metrics"]["model"]: {m: float(r["metrics"][m]) for m in METRICS} for r in runs}
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: not an --eval metrics.json ({type(exc).__name__}: {exc})") from None
    if not out:
        raise ValueError(f"{folder}: no metrics.json (run `python -m cir_demo eval` into it first)")
    return out


def paired_effects(folder: Path, split: str) -> dict[str, dict[str, dict]]:
    """{retriever: {metric: {diff, lo, hi, n_groups, n_boot}}}: reranked minus first stage on one split
    of one `--eval` folder. mAP@10 and NegRecall@10 are read from its paired.csv (the paired bootstrap
    over intents); the paraphrase sensitivity, a per-intent statistic, is bootstrapped here over the same
    intents from per_query.csv (its mean equals metrics.json's `ling_sens_paraphrase_range`)."""
    import pandas as pd

    from cir_demo.metrics.bootstrap import paired_bootstrap

    base_dir = Path(folder) / SPLIT_DIRS[split]
    paired_path, per_query_path = base_dir / "paired.csv", base_dir / "per_query.csv"
    for path in (paired_path, per_query_path):
        if not path.is_file():
            raise ValueError(f"{path}: missing; the record needs --eval's per-query rows and paired bootstrap")
    paired = pd.read_csv(paired_path, keep_default_na=False)
    if paired.empty:
        raise ValueError(
            f"{paired_path}: no paired bootstrap (was --eval run with --n-boot 0?); "
            "the record needs it: rerun that seed without --n-boot 0"
        )
    per_query = pd.read_csv(per_query_path, keep_default_na=False, na_values=[""], low_memory=False)
    out: dict = {}
    runs = set(per_query["run"])
    for base in sorted(r for r in runs if not r.endswith(RERANKED) and r + RERANKED in runs):
        effects = {}
        for metric in ("mAP@10", "NegRecall@10"):
            rows = paired[(paired["a"] == base) & (paired["b"] == base + RERANKED) & (paired["metric"] == metric)]
            if len(rows) != 1:
                raise ValueError(f"{paired_path}: expected one row a={base}, b={base + RERANKED}, metric={metric}")
            row = rows.iloc[0]
            effects[metric] = {k: float(row[k]) for k in ("diff", "lo", "hi")} | {
                "n_groups": int(row["n_groups"]),
                "n_boot": int(row["n_boot"]),
            }
        n_boot = effects["mAP@10"]["n_boot"]
        a, b = paraphrase_ranges(per_query, base), paraphrase_ranges(per_query, base + RERANKED)
        shared = a.index.intersection(b.index)
        res = paired_bootstrap(a[shared].to_numpy(), b[shared].to_numpy(), shared.to_numpy(), n_boot=n_boot, seed=0)
        effects["ling_sens_paraphrase_range"] = {k: res[k] for k in ("diff", "lo", "hi")} | {
            "n_groups": res["n_groups"],
            "n_boot": n_boot,
        }
        out[base] = effects
    return out


def paraphrase_ranges(per_query, run: str):
    """Per intent (group_id) with two or more scored paraphrases: max - min of their AP@10 (the
    paraphrase sensitivity before averaging over intents)."""
    rows = per_query[per_query["run"] == run]
    if "scored" in rows.columns:
        rows = rows[rows["scored"].astype(str).isin(["True", "true", "1"])]
    grouped = rows.groupby("group_id", sort=True)["AP@10"]
    sizes = grouped.size()
    ranges = grouped.max() - grouped.min()
    return ranges[sizes >= 2].astype(float)


def interval_effects(per_seed: dict[int, dict], better: str) -> dict:
    """{seed: {diff, lo, hi}} -> the mean difference, per-world rows, and on how many worlds the
    interval excludes 0 the gaining way (`holds_on`) and the losing way (`loses_on`)."""
    gain = (lambda e: e["lo"] > 0) if better == "up" else (lambda e: e["hi"] < 0)
    loss = (lambda e: e["hi"] < 0) if better == "up" else (lambda e: e["lo"] > 0)
    return {
        "mean_diff": fmean(e["diff"] for e in per_seed.values()),
        "by_seed": {s: dict(e) for s, e in per_seed.items()},
        "better": better,
        "holds_on": sum(gain(e) for e in per_seed.values()),
        "loses_on": sum(loss(e) for e in per_seed.values()),
        "n_worlds": len(per_seed),
    }


def spread(values: dict[int, float]) -> dict:
    xs = list(values.values())
    return {"mean": fmean(xs), "min": min(xs), "max": max(xs), "by_seed": dict(values)}


def aggregate(per_seed: dict[int, dict], intervals: dict[int, dict] | None = None) -> dict:
    """Mean, range and per-seed values of every metric of every run, and the judge's effects.

    `per_seed`: {seed: read_seed_metrics(...)}; `intervals`: {seed: {split: paired_effects(...)}}, which
    adds `judge_intervals` (per-world differences with 95% intervals, k of n). A split, run or metric
    missing on some seed is reported over the seeds that have it (`by_seed` says which)."""
    record: dict = {"seeds": sorted(per_seed), "splits": {}, "judge": {}}
    if intervals:
        record["judge_intervals"] = {}
        for split in SPLITS:
            seeds = [s for s in sorted(intervals) if split in intervals[s]]
            bases = sorted({b for s in seeds for b in intervals[s][split]})
            record["judge_intervals"][split] = {
                base: {
                    metric: interval_effects(
                        {s: intervals[s][split][base][metric] for s in seeds if base in intervals[s][split]}, better
                    )
                    for metric, better in JUDGE_EFFECTS
                }
                for base in bases
            }
    for split in SPLITS:
        seeds = [s for s in sorted(per_seed) if split in per_seed[s]]
        if not seeds:
            continue
        runs = sorted({r for s in seeds for r in per_seed[s][split]})
        record["splits"][split] = {
            run: {
                m: spread({s: per_seed[s][split][run][m] for s in seeds if run in per_seed[s][split]}) for m in METRICS
            }
            for run in runs
        }
        record["judge"][split] = {
            base: judge_effects({s: per_seed[s][split] for s in seeds}, base)
            for base in runs
            if not base.endswith(RERANKED) and base + RERANKED in runs
        }
    return record


def judge_effects(seed_runs: dict[int, dict], base: str) -> dict:
    """Per metric: the change reranking brings to `base` (reranked minus first stage), its spread
    across seeds, and whether it goes the gaining way on every seed."""
    out = {}
    for metric, better in JUDGE_EFFECTS:
        diffs = {
            s: runs[base + RERANKED][metric] - runs[base][metric]
            for s, runs in seed_runs.items()
            if base in runs and base + RERANKED in runs
        }
        if not diffs:
            continue
        gains = [d > 0 if better == "up" else d < 0 for d in diffs.values()]
        out[metric] = {
            **spread(diffs),
            "better": better,
            "holds_on_every_seed": all(gains),
            "seeds_where_it_holds": sum(gains),
        }
    return out


def _cell(s: dict) -> str:
    return f"{s['mean']:.4f} [{s['min']:.4f}, {s['max']:.4f}]"


def render_markdown(record: dict) -> str:
    seeds = ", ".join(map(str, record["seeds"]))
    lines = [
        f"# Results of record: world seeds {seeds}",
        "",
        "Each cell: mean over the seeds [min, max]. `+rerank`: the world judge reorders the top 20.",
        "",
    ]
    for split, runs in record["splits"].items():
        lines += [f"## {split} split", "", "| run | " + " | ".join(METRICS) + " |", "|---" * (len(METRICS) + 1) + "|"]
        lines += [f"| {run} | " + " | ".join(_cell(v[m]) for m in METRICS) + " |" for run, v in runs.items()]
        lines.append("")
    for split, bases in record["judge"].items():
        lines += [
            f"## What the judge changes ({split} split)",
            "",
            "Reranked minus first stage: mean [min, max]; `n/N` = seeds on which the difference has the gaining "
            "sign (the sign only: what holds is decided by the intervals world by world, below).",
            "",
            "| retriever | " + " | ".join(f"Δ {m}" for m, _ in JUDGE_EFFECTS) + " |",
            "|---" * (len(JUDGE_EFFECTS) + 1) + "|",
        ]
        n = len(record["seeds"])
        for base, eff in bases.items():
            cells = [
                f"{_signed(eff[m])} ({eff[m]['seeds_where_it_holds']}/{n})" if m in eff else ""
                for m, _ in JUDGE_EFFECTS
            ]
            lines.append(f"| {base} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += render_intervals(record)
    return "\n".join(lines)


def render_intervals(record: dict) -> list[str]:
    """The per-world table: each cell a world's difference [95% interval]; then k of n."""
    if not record.get("judge_intervals"):
        return []
    seeds = record["seeds"]
    lines = [
        "## What the judge changes, world by world",
        "",
        "Reranked minus first stage on each world: difference [95% paired-bootstrap interval over intents]. "
        "`holds`: worlds whose interval excludes 0 the gaining way (mAP up, NegRecall down, sensitivity "
        "down); `loses`: the losing way.",
        "",
        "| retriever | split | measure | " + " | ".join(f"world {s}" for s in seeds) + " | holds | loses |",
        "|---" * (len(seeds) + 5) + "|",
    ]
    for split, bases in record["judge_intervals"].items():
        for base, metrics in bases.items():
            for metric, eff in metrics.items():
                cells = [
                    f"{e['diff']:+.4f} [{e['lo']:+.4f}, {e['hi']:+.4f}]" if (e := eff["by_seed"].get(s)) else ""
                    for s in seeds
                ]
                lines.append(
                    f"| {base} | {split} | Δ {metric} | "
                    + " | ".join(cells)
                    + f" | {eff['holds_on']} of {eff['n_worlds']} | {eff['loses_on']} of {eff['n_worlds']} |"
                )
    lines.append("")
    return lines


# The record as data (OUT/record.csv, committed as docs/results/record*.csv): one row per world, split,
# retriever and measure of the judge's effects; the README's and docs' tables are drawn from it
# (harness/record_tables.py).
CSV_FIELDS = (
    "world_size",
    "fold",
    "world_seed",
    "split",
    "retriever",
    "measure",
    "better",
    "first_stage",
    "reranked",
    "difference",
    "lo",
    "hi",
    "n_groups",
    "n_boot",
)


def record_rows(record: dict) -> list[dict]:
    """The rows of record.csv from a record (`aggregate` with intervals, or its record.json, whose seed keys
    are strings): first stage and reranked from each world's metrics.json, the difference and its 95%
    paired-bootstrap interval over intents from `judge_intervals`."""
    from cir_demo.world.generate import SIZES

    size = record["world_size"]
    rows = []
    for split, bases in record["judge_intervals"].items():
        for base, metrics in bases.items():
            for metric, eff in metrics.items():
                first = _by_seed(record["splits"][split][base][metric]["by_seed"])
                reranked = _by_seed(record["splits"][split][base + RERANKED][metric]["by_seed"])
                for seed, e in sorted(_by_seed(eff["by_seed"]).items()):
                    rows.append(
                        {
                            "world_size": size,
                            "fold": SIZES[size].fold,
                            "world_seed": seed,
                            "split": split,
                            "retriever": base,
                            "measure": metric,
                            "better": eff["better"],
                            "first_stage": f"{first[seed]:.6f}",
                            "reranked": f"{reranked[seed]:.6f}",
                            "difference": f"{e['diff']:+.6f}",
                            "lo": f"{e['lo']:+.6f}",
                            "hi": f"{e['hi']:+.6f}",
                            "n_groups": int(e["n_groups"]),
                            "n_boot": int(e["n_boot"]),
                        }
                    )
    return rows


def _by_seed(values: dict) -> dict[int, object]:
    return {int(s): v for s, v in values.items()}


def record_csv(record: dict) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(record_rows(record))
    return buf.getvalue()


def _signed(s: dict) -> str:
    return f"{s['mean']:+.4f} [{s['min']:+.4f}, {s['max']:+.4f}]"
