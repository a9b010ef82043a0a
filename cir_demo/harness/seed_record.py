"""Results of record across world seeds: each seed's `--eval` metrics, their mean and range, and
whether each finding (the judge's gain, its near-miss drop, its phrasing cost) holds on every seed.

Pure functions over the `metrics.json` files `--eval` writes (`OUT/metrics.json` for the test split,
`OUT/compositional/metrics.json` for the compositional one); `record_cli.py` runs the evaluations.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean

SPLITS = {"test": "metrics.json", "compositional": "compositional/metrics.json"}
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


def spread(values: dict[int, float]) -> dict:
    xs = list(values.values())
    return {"mean": fmean(xs), "min": min(xs), "max": max(xs), "by_seed": dict(values)}


def aggregate(per_seed: dict[int, dict]) -> dict:
    """Mean, range and per-seed values of every metric of every run, and the judge's effects.

    `per_seed`: {seed: read_seed_metrics(...)}. A split, run or metric missing on some seed is
    reported over the seeds that have it (`by_seed` says which)."""
    record: dict = {"seeds": sorted(per_seed), "splits": {}, "judge": {}}
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
            "Reranked minus first stage: mean [min, max]; `n/N` = seeds on which it goes the gaining way.",
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
    return "\n".join(lines)


def _signed(s: dict) -> str:
    return f"{s['mean']:+.4f} [{s['min']:+.4f}, {s['max']:+.4f}]"
