"""Report plots: each as PNG (the Report shows it) and as SVG and PDF for papers, the three from one
drawing (`charts`, Pillow; `vector_charts` writes the vector files from the same calls): the family's
own plots, the metric-at-k curves of every run with 95% intervals, and one breakdown plot per metadata
field and plotted metric (`MetricFamily.plot_metrics`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import pandas as pd

from cir_demo.benchmarks.families import breakdown_plot_file
from cir_demo.benchmarks.schema import Benchmark
from cir_demo.harness import charts
from cir_demo.store.score import RunEvaluation, family_of

BREAKDOWN_PLOTS = (
    ("is_single", "single_vs_two_image.png", "Single versus two-image queries"),
    ("intent_category", "per_category.png", "Per intent category"),
    ("edit_subcategory", "per_subcategory.png", "Per edit subcategory"),
    ("category", "per_garment_category.png", "Per garment category"),
    ("length_category", "per_caption_length.png", "Per caption length"),
    ("semantic_aspects", "per_semantic_aspect.png", "Per semantic aspect"),
)
# the cutoffs of a Recall@k curve read from per-query target ranks (the official cutoffs among them)
CURVE_KS = (1, 2, 3, 5, 7, 10, 15, 20, 30, 40, 50)
_AT_K = re.compile(r"^(?P<name>[A-Za-z_]+)@(?P<k>\d+)$")


def bars(path: Path, categories, series, title, xlabel, intervals=None) -> list[Path]:
    """A bar chart as PNG, SVG and PDF."""
    return charts.bar_chart_files(path, categories, series, title, xlabel, intervals)


def _paths(files: Sequence[Path]) -> dict[str, Path]:
    return {Path(f).name: Path(f) for f in files}


def precision_vs_safety(benchmark: Benchmark, evaluations: Sequence[RunEvaluation], out_dir: Path) -> dict[str, Path]:
    """The PinPoint paper's Figure 6: mAP@10 against NegRecall@10 per run; up-left is better."""
    nan = float("nan")
    points = {
        ev.name: (float(ev.metrics.get("NegRecall@10", nan)), float(ev.metrics.get("mAP@10", nan)))
        for ev in evaluations
    }
    args = (
        points,
        f"Precision versus safety: {benchmark.name}",
        "NegRecall@10 (explicit negatives in the top 10; lower is safer)",
        "mAP@10 (higher is better)",
    )
    return _paths(charts.scatter_chart(out_dir / "precision_vs_safety.png", *args, formats=charts.ALL_FORMATS))


def paraphrase_sensitivity(
    benchmark: Benchmark, evaluations: Sequence[RunEvaluation], out_dir: Path
) -> dict[str, Path]:
    """Per run: the paper's paraphrase sensitivity (within-intent AP@10 spread) beside the official one."""
    nan = float("nan")
    names = [ev.name for ev in evaluations]
    return _paths(
        bars(
            out_dir / "paraphrase_sensitivity.png",
            names,
            {
                "AP@10 range over paraphrases of one intent": [
                    float(ev.metrics.get("ling_sens_paraphrase_range", nan)) for ev in evaluations
                ],
                "official ling_sens_range (P@10, by reference image)": [
                    float(ev.metrics.get("ling_sens_range", nan)) for ev in evaluations
                ],
            },
            "Paraphrase sensitivity",
            "mean range (lower is more robust)",
        )
    )


def curve_series(per_query: pd.DataFrame) -> dict[str, tuple[list[int], pd.DataFrame]]:
    """Metric name -> (cutoffs, per-query values at each cutoff) for every metric with two or more cutoffs:
    Recall@k at `CURVE_KS` up to the largest official cutoff from `target_rank` where the rows have it (the
    official Recall@k columns are `target_rank <= k`), else the metric@k columns as they are."""
    found: dict[str, list[int]] = {}
    for c in per_query.columns:
        m = _AT_K.match(str(c))
        if m:
            found.setdefault(m["name"], []).append(int(m["k"]))
    out = {}
    for name, ks in found.items():
        ks = sorted(ks)
        if name == "Recall" and "target_rank" in per_query:
            ks = [k for k in CURVE_KS if k <= ks[-1]] or ks
            rank = per_query["target_rank"].to_numpy(dtype=float)
            out[name] = (ks, pd.DataFrame({k: (rank <= k).astype(float) for k in ks}))
        elif len(ks) > 1:
            out[name] = (ks, pd.DataFrame({k: per_query[f"{name}@{k}"].to_numpy(dtype=float) for k in ks}))
    return {n: v for n, v in out.items() if len(v[0]) > 1}


CURVE_FILES = {
    "Recall": ("recall_at_k.png", "Recall@k"),
    "Recall_subset": ("recall_subset_at_k.png", "Recall_subset@k"),
    "AP": ("map_at_k.png", "mAP@k"),
    "precision": ("precision_at_k.png", "P@k"),
}


def k_curves(
    benchmark: Benchmark, evaluations: Sequence[RunEvaluation], out_dir: Path, n_boot: int = 1000, seed: int = 0
) -> dict[str, Path]:
    """One plot per metric with several cutoffs (`CURVE_FILES`): each run's mean at every k over its scored
    queries, with the 95% interval of a bootstrap over paraphrase groups (one set of draws for all k)."""
    from cir_demo.metrics.bootstrap import bootstrap_cis

    curves: dict[str, dict] = {}
    for ev in evaluations:
        pq = ev.per_query
        pq = pq[pq["scored"].to_numpy(dtype=bool)] if "scored" in pq else pq
        for name, (ks, values) in curve_series(pq).items():
            if name not in CURVE_FILES or not len(values):
                continue
            keep = values.notna().all(axis=1).to_numpy()
            entry = curves.setdefault(name, {"ks": ks, "series": {}, "bands": {}})
            if ks != entry["ks"]:
                continue
            v, groups = values.to_numpy()[keep], pq["group_id"].to_numpy()[keep]
            entry["series"][ev.name] = list(v.mean(axis=0))
            if n_boot > 0 and len(v):
                cis = bootstrap_cis(v, groups, n_boot=n_boot, seed=seed)
                entry["bands"][ev.name] = [(float(lo), float(hi)) for _, lo, hi in cis]
    out: dict[str, Path] = {}
    pooled = " (pooled over all queries)" if family_of(benchmark).strata else ""
    for name, entry in curves.items():
        fname, label = CURVE_FILES[name]
        label += pooled if name == "Recall" else ""
        out.update(
            _paths(
                charts.line_chart_files(
                    out_dir / fname,
                    entry["ks"],
                    entry["series"],
                    f"{label} per run: {benchmark.name}",
                    f"{label}" + (" with 95% interval" if entry["bands"] else ""),
                    entry["bands"] or None,
                )
            )
        )
    return out


def write_plots(
    benchmark: Benchmark,
    evaluations: Sequence[RunEvaluation],
    breakdowns: dict[str, pd.DataFrame],
    out_dir: Path,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Path]:
    """The metric family's own plots, the metric-at-k curves, then one breakdown plot per field and plotted
    metric; each as PNG, SVG and PDF (file name -> path)."""
    paths = write_run_plots(benchmark, evaluations, out_dir, n_boot=n_boot, seed=seed)
    paths.update(write_breakdown_plots(benchmark, evaluations, breakdowns, out_dir))
    return paths


def write_run_plots(
    benchmark: Benchmark, evaluations: Sequence[RunEvaluation], out_dir: Path, n_boot: int = 1000, seed: int = 0
) -> dict[str, Path]:
    """`write_plots`' first part, which reads the evaluations only: the family's own plots and the
    metric-at-k curves (drawn while the breakdowns are computed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if not evaluations:
        return paths
    for plot in family_of(benchmark).plot_makers():
        paths.update(plot(benchmark, evaluations, out_dir))
    if any(len(ev.per_query) for ev in evaluations):
        paths.update(k_curves(benchmark, evaluations, out_dir, n_boot=n_boot, seed=seed))
    return paths


def write_breakdown_plots(
    benchmark: Benchmark, evaluations: Sequence[RunEvaluation], breakdowns: dict[str, pd.DataFrame], out_dir: Path
) -> dict[str, Path]:
    """`write_plots`' second part: one breakdown plot per field and plotted metric."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if not evaluations:
        return paths
    fam = family_of(benchmark)
    metrics = fam.plotted_metrics()
    for field_, fname, title in BREAKDOWN_PLOTS:
        tab = breakdowns.get(field_)
        for i, metric in enumerate(metrics):
            if tab is None or metric not in tab or len(set(tab["value"])) < 2:
                continue  # e.g. every query has one reference: a one-bar "versus" plot says nothing
            paths.update(
                _paths(
                    _breakdown_plot(
                        benchmark,
                        tab,
                        field_,
                        metric,
                        fam.headline.get(metric, metric),
                        out_dir / breakdown_plot_file(fname, metric, i == 0),
                        title,
                    )
                )
            )
    return paths


def _breakdown_plot(
    benchmark: Benchmark, tab: pd.DataFrame, field_: str, metric: str, label: str, path: Path, title: str
) -> list[Path]:
    nan = float("nan")
    values = list(dict.fromkeys(tab["value"]))
    runs = list(dict.fromkeys(tab["run"]))
    cell = {(r, v): row for r, v, row in zip(tab["run"], tab["value"], tab.to_dict("records"))}
    series, intervals = {}, {}
    for r in runs:
        rows = [cell.get((r, v)) for v in values]
        series[r] = [float(row[metric]) if row else nan for row in rows]
        if f"{metric}_lo" in tab:
            intervals[r] = [
                (float(row[f"{metric}_lo"]), float(row[f"{metric}_hi"])) if row else (nan, nan) for row in rows
            ]
    shown = values
    if field_ == "is_single":
        shown = [
            "single image" if str(v) in ("True", "1") else "two images" if str(v) in ("False", "0") else str(v)
            for v in values
        ]
    n_q = {v: int(n) for v, n in zip(tab["value"], tab["n_queries"])}
    cats = [f"{s} (n={n_q[v]})" for s, v in zip(shown, values)]
    return bars(path, cats, series, f"{title}: {benchmark.name}", f"{label} with 95% interval", intervals or None)
