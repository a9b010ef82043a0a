"""The Report of an eval run folder: its table, paired comparisons and plots (the folders are listed by
`store.folders.list_runs`)."""

from __future__ import annotations


import pandas as pd

from cir_demo.benchmarks.families import MetricFamily
from cir_demo.explorer.config import ServiceError
from cir_demo.explorer.views import Report
from cir_demo.store.folders import RunSummary, read_json, split_folders


def metrics_display_table(metrics: pd.DataFrame, family: MetricFamily | None = None) -> pd.DataFrame:
    """The family's Report aggregates of metrics.csv (`MetricFamily.report_aggregates`; without a family,
    the run's own metrics.json names it) with their 95% intervals as 'value [lo, hi]'."""
    wanted = family.report_aggregates() if family is not None else []
    heads = [c for c in wanted if c in metrics]
    out = pd.DataFrame({"run": metrics["model"].astype(str) if "model" in metrics else metrics.index.astype(str)})
    for c in heads:
        lo, hi = f"{c}_ci_lo", f"{c}_ci_hi"
        vals = []
        for i in range(len(metrics)):
            v = metrics[c].iloc[i]
            text = "n/a" if pd.isna(v) else f"{v:.4f}"
            if lo in metrics and hi in metrics and not pd.isna(metrics[lo].iloc[i]):
                text += f" [{metrics[lo].iloc[i]:.4f}, {metrics[hi].iloc[i]:.4f}]"
            vals.append(text)
        out[c] = vals
    for c in ("total_queries", "coverage"):
        if c in metrics:
            out[c] = metrics[c].to_numpy()
    return out


# the breakdown plots --eval draws (harness/plots.py BREAKDOWN_PLOTS): file name -> what its bars are
BREAKDOWN_CAPTIONS = {
    "single_vs_two_image.png": "Single versus two-image queries ({metric} with 95% intervals)",
    "per_category.png": "{metric} per intent category",
    "per_subcategory.png": "{metric} per edit subcategory",
    "per_garment_category.png": "{metric} per garment category",
    "per_caption_length.png": "{metric} per caption length",
    "per_semantic_aspect.png": "{metric} per semantic aspect",
}


def plot_captions(family: MetricFamily) -> dict[str, str]:
    """Captions of the plots a run folder may hold, naming the metric on their axis."""
    from cir_demo.benchmarks.families import breakdown_plot_file

    out = {
        "precision_vs_safety.png": "Precision versus safety: mAP@10 against NegRecall@10 (up-left is better)",
        "paraphrase_sensitivity.png": "Paraphrase sensitivity (lower is more robust)",
        "recall_at_k.png": "Recall@k of each run over the cutoffs k, with 95% intervals",
        "recall_subset_at_k.png": "Recall_subset@k of each run (within the query's image set), with 95% intervals",
        "map_at_k.png": "mAP@k of each run over the cutoffs k, with 95% intervals",
        "precision_at_k.png": "P@k of each run over the cutoffs k, with 95% intervals",
    }
    for i, metric in enumerate(family.plotted_metrics()):
        label = family.headline.get(metric, metric)
        for fname, caption in BREAKDOWN_CAPTIONS.items():
            out[breakdown_plot_file(fname, metric, i == 0)] = caption.format(metric=label)
    return out


# every file or folder of a run folder `load_report` reads (the plots folder: its listing)
REPORT_SOURCES = ("metrics.csv", "metrics.json", "run_info.json", "paired.csv", "report.md", "plots")


def report_key(run: RunSummary) -> tuple:
    """The state of everything `load_report` reads of `run`, so a Report read once is read again only when
    one of them changed: the folder's own (a file added, removed or atomically replaced, a split folder
    added), each source's (modification time, size, inode; None when absent) and the plots' names (a
    folder's time can stay the same across two changes within one clock tick)."""
    import os

    def state(path) -> tuple | None:
        try:
            st = path.lstat()  # a link planted in place of a file is another state
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    try:
        plots = tuple(sorted(os.listdir(run.path / "plots")))
    except OSError:
        plots = None
    sources = tuple(state(run.path / n) for n in REPORT_SOURCES)
    return (str(run.path), run.label, run.matches, state(run.path), sources, plots)


def load_report(run: RunSummary, family: MetricFamily | str | None = None) -> Report:
    """The metrics table (with CIs), paired comparisons and plots of one eval run folder."""
    from cir_demo.benchmarks.families import metric_family
    from cir_demo.explorer.paired import paired_display

    try:
        metrics = pd.read_csv(run.path / "metrics.csv")
    except (OSError, ValueError) as exc:
        raise ServiceError(f"{run.label}/metrics.csv: cannot read ({exc})") from None
    meta = read_json(run.path / "metrics.json") or {}
    family = family or meta.get("metric_family") or "pinpoint"
    family = metric_family(family) if isinstance(family, str) else family
    plots = sorted((run.path / "plots").glob("*.png")) if (run.path / "plots").is_dir() else []
    first = [
        "precision_vs_safety.png",
        "paraphrase_sensitivity.png",
        "recall_at_k.png",
        "map_at_k.png",
        "single_vs_two_image.png",
    ]
    plots.sort(key=lambda p: (first.index(p.name) if p.name in first else len(first), p.name))
    captions = plot_captions(family)
    info = []
    run_info = read_json(run.path / "run_info.json") or {}
    if run.matches == "name":
        info.append("This run has no benchmark fingerprint; it may come from another version of the benchmark.")
    elif run.matches == "other":
        info.append(
            "This run scored other benchmark files than those loaded (another root, split or version): "
            "its numbers are not this benchmark's."
        )
    if run_info.get("reranker"):
        info.append(f"Reranker: {run_info['reranker'].get('backend', '?')} on the top {run_info.get('rerank_top_n')}.")
    if meta.get("n_boot"):
        info.append(f"Intervals: 95% bootstrap over paraphrase groups ({meta['n_boot']} resamples).")
    if (run.path / "report.md").is_file():
        info.append("Full report: report.md, with the run's tables, under Files of this run below.")
    for split in split_folders([run.path]):
        info.append(
            f"This run also evaluated the {split.name} test split (its files: {split.name}/ in the run "
            "folder); report.md's table 'Both test splits' puts the two side by side."
        )
    paired = None
    if (run.path / "paired.csv").is_file() and not (run.path / "paired.csv").is_symlink():
        try:
            paired = paired_display(pd.read_csv(run.path / "paired.csv", dtype={"a": str, "b": str}), family)
        except (OSError, ValueError, KeyError):  # an unreadable or foreign paired.csv: the rest still shows
            paired = None
    return Report(
        run,
        metrics_display_table(metrics, family),
        [(p, captions.get(p.name, p.stem.replace("_", " "))) for p in plots],
        info,
        paired,
    )
