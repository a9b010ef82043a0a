"""Report plots (PNG, matplotlib's Agg backend; never opens a window)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from cir_demo.benchmarks.schema import Benchmark
from cir_demo.harness.evaluate import RunEvaluation
from cir_demo.utils.io import atomic_path


def _save(fig, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    return path


def write_plots(
    benchmark: Benchmark,
    evaluations: Sequence[RunEvaluation],
    breakdowns: dict[str, pd.DataFrame],
    out_dir: Path,
) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if not evaluations:
        return paths

    if benchmark.metric_family == "pinpoint":
        # Precision versus safety (the PinPoint paper's Figure 6): up-left is better.
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
        for ev in evaluations:
            x, y = ev.metrics.get("NegRecall@10", 0.0), ev.metrics.get("mAP@10", 0.0)
            ax.scatter([x], [y], s=50)
            ax.annotate(ev.name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.set_xlabel("NegRecall@10 (explicit negatives in the top 10; lower is safer)")
        ax.set_ylabel("mAP@10 (higher is better)")
        ax.set_title(f"Precision versus safety: {benchmark.name}")
        ax.grid(alpha=0.3)
        paths["precision_vs_safety.png"] = _save(fig, out_dir / "precision_vs_safety.png")
        plt.close(fig)

        # Paraphrase sensitivity per run: the paper's notion (within-intent AP@10 spread).
        names = [ev.name for ev in evaluations]
        vals = [ev.metrics.get("ling_sens_paraphrase_range", float("nan")) for ev in evaluations]
        offi = [ev.metrics.get("ling_sens_range", float("nan")) for ev in evaluations]
        fig, ax = plt.subplots(figsize=(max(6.4, 0.9 * len(names) + 2), 4.2))
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], vals, width=0.4, label="AP@10 range over paraphrases of one intent")
        ax.bar([x + 0.2 for x in xs], offi, width=0.4, label="official ling_sens_range (P@10, by reference image)")
        ax.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("mean range (lower is more robust)")
        ax.set_title("Paraphrase sensitivity")
        ax.legend(fontsize=8)
        paths["paraphrase_sensitivity.png"] = _save(fig, out_dir / "paraphrase_sensitivity.png")
        plt.close(fig)

    metric = "AP@10" if benchmark.metric_family != "edir" else "Recall@1"
    for field_, fname, title in (
        ("is_single", "single_vs_two_image.png", "Single versus two-image queries"),
        ("intent_category", "per_category.png", "Per intent category"),
        ("edit_subcategory", "per_subcategory.png", "Per edit subcategory"),
    ):
        tab = breakdowns.get(field_)
        col = metric
        if tab is None or col not in tab:
            continue
        pivot = tab.pivot_table(index="value", columns="run", values=col, aggfunc="first")
        if field_ == "is_single":
            pivot.index = ["single image" if str(v) in ("True", "1") else "two images" for v in pivot.index]
        fig, ax = plt.subplots(figsize=(max(6.4, 0.55 * len(pivot) * max(1, len(pivot.columns)) / 2 + 3), 4.4))
        pivot.plot.bar(ax=ax, width=0.8)
        ax.set_ylabel(f"{'m' if metric.startswith('AP') else ''}{metric}")
        ax.set_xlabel("")
        ax.set_title(f"{title}: {benchmark.name}")
        ax.legend(fontsize=7, ncol=2)
        ax.tick_params(axis="x", labelrotation=30)
        for label in ax.get_xticklabels():
            label.set_ha("right")
        paths[fname] = _save(fig, out_dir / fname)
        plt.close(fig)
    return paths
