"""Report plots (PNG, drawn with Pillow by `charts`; no matplotlib, never opens a window)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from cir_demo.benchmarks.schema import Benchmark
from cir_demo.harness import charts
from cir_demo.harness.evaluate import RunEvaluation, family_of

BREAKDOWN_PLOTS = (
    ("is_single", "single_vs_two_image.png", "Single versus two-image queries"),
    ("intent_category", "per_category.png", "Per intent category"),
    ("edit_subcategory", "per_subcategory.png", "Per edit subcategory"),
    ("category", "per_garment_category.png", "Per garment category"),
)


def precision_vs_safety(benchmark: Benchmark, evaluations: Sequence[RunEvaluation], out_dir: Path) -> dict[str, Path]:
    """The PinPoint paper's Figure 6: mAP@10 against NegRecall@10 per run; up-left is better."""
    nan = float("nan")
    points = {ev.name: (float(ev.metrics.get("NegRecall@10", nan)), float(ev.metrics.get("mAP@10", nan)))
              for ev in evaluations}
    return {"precision_vs_safety.png": charts.scatter_chart(
        out_dir / "precision_vs_safety.png", points, f"Precision versus safety: {benchmark.name}",
        "NegRecall@10 (explicit negatives in the top 10; lower is safer)", "mAP@10 (higher is better)")}


def paraphrase_sensitivity(benchmark: Benchmark, evaluations: Sequence[RunEvaluation], out_dir: Path) -> dict[str, Path]:
    """Per run: the paper's paraphrase sensitivity (within-intent AP@10 spread) beside the official one."""
    nan = float("nan")
    names = [ev.name for ev in evaluations]
    return {"paraphrase_sensitivity.png": charts.bar_chart(
        out_dir / "paraphrase_sensitivity.png", names,
        {"AP@10 range over paraphrases of one intent":
             [float(ev.metrics.get("ling_sens_paraphrase_range", nan)) for ev in evaluations],
         "official ling_sens_range (P@10, by reference image)":
             [float(ev.metrics.get("ling_sens_range", nan)) for ev in evaluations]},
        "Paraphrase sensitivity", "mean range (lower is more robust)")}


def write_plots(
    benchmark: Benchmark,
    evaluations: Sequence[RunEvaluation],
    breakdowns: dict[str, pd.DataFrame],
    out_dir: Path,
) -> dict[str, Path]:
    """The metric family's own plots, then one breakdown plot of its primary metric per field."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if not evaluations:
        return paths
    nan = float("nan")
    fam = family_of(benchmark)
    for plot in fam.plot_makers():
        paths.update(plot(benchmark, evaluations, out_dir))

    metric = fam.primary
    label = fam.headline.get(metric, metric)
    for field_, fname, title in BREAKDOWN_PLOTS:
        tab = breakdowns.get(field_)
        if tab is None or metric not in tab:
            continue
        values = list(dict.fromkeys(tab["value"]))
        if len(values) < 2:  # e.g. every query has one reference: a one-bar "versus" plot says nothing
            continue
        runs = list(dict.fromkeys(tab["run"]))
        cell = {(r, v): row for r, v, row in zip(tab["run"], tab["value"], tab.to_dict("records"))}
        series, intervals = {}, {}
        for r in runs:
            rows = [cell.get((r, v)) for v in values]
            series[r] = [float(row[metric]) if row else nan for row in rows]
            if f"{metric}_lo" in tab:
                intervals[r] = [(float(row[f"{metric}_lo"]), float(row[f"{metric}_hi"])) if row else (nan, nan)
                                for row in rows]
        if field_ == "is_single":
            values = ["single image" if str(v) in ("True", "1") else "two images" if str(v) in ("False", "0")
                      else str(v) for v in values]
        n_q = {v: int(n) for v, n in zip(tab["value"], tab["n_queries"])}
        cats = [f"{shown} (n={n_q[v]})" for shown, v in zip(values, dict.fromkeys(tab["value"]))]
        paths[fname] = charts.bar_chart(out_dir / fname, cats, series, f"{title}: {benchmark.name}",
                                        f"{label} with 95% interval", intervals or None)
    return paths
