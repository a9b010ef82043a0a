"""Eval run folders of a benchmark: listing, the report tab's table and plots, and reusable
per-query results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from cir_demo.benchmarks.families import MetricFamily
from cir_demo.benchmarks.registry import BENCHMARKS, RERANK_SUFFIX
from cir_demo.explorer.config import ServiceError
from cir_demo.explorer.views import Report, RunSummary


def list_runs(
    benchmark_name: str, fingerprint: str, root: Path | None = None, extra: Sequence[str | Path] = ()
) -> list[RunSummary]:
    """Eval run folders (with metrics.csv) of this benchmark, newest first: those under runs/, those
    `--eval --results-json` wrote elsewhere (cir_demo/results/run_folders.py) and the `extra` folders
    given to the app (`--runs FOLDER`); and a run's other test splits (`<run>/compositional/`).

    A copy of shipped outputs installed by other code is left out (it is not what this code
    writes). A run matches by the benchmark fingerprint (its files' checksums and split) that
    `run_info.json` or metrics.json names; a run of other files of a benchmark with the same name is
    left out. Only a run that names no fingerprint (written by older code) matches by the benchmark
    name in metrics.json or the folder name suffix `-<benchmark>` ("name"). An `extra` folder is listed
    whatever it holds ("other" when it names another fingerprint) and comes first: the folder given to
    `--runs` is the Report's default.
    """
    from cir_demo.index.prebuilt_run import stale_installed_copy
    from cir_demo.paths import runs_dir
    from cir_demo.results.run_folders import recorded_run_folders

    root = Path(root) if root is not None else runs_dir()
    folders = list(root.iterdir()) if root.is_dir() else []
    folders += recorded_run_folders() if root == runs_dir() else []
    given = {Path(f).resolve() for f in extra}
    out, seen = [], set()
    for d in [*folders, *given, *_split_folders([*folders, *given])]:
        # a dot-folder is work in progress (staging, an install being written), never a run
        if (
            d.resolve() in seen
            or d.name.startswith(".")
            or not (d.is_dir() and (d / "metrics.csv").is_file())
            or stale_installed_copy(d)
            or (d.name in _SPLIT_FOLDERS and stale_installed_copy(d.parent))
        ):
            continue
        seen.add(d.resolve())
        is_given = d.resolve() in given
        match = _match(d, benchmark_name, fingerprint)
        if match == "other" and not is_given:
            continue
        match = match or ("given" if is_given else None)
        if match:
            out.append(((is_given, match == "fingerprint", d.stat().st_mtime), RunSummary(d, _label(d, root), match)))
    out.sort(key=lambda t: (*t[0], t[1].label), reverse=True)
    return [r for _, r in out]


# the folders in which one `--eval` run holds its other test splits (`compositional/`): each is a run of
# its own split (its run_info.json names that split's fingerprint)
_SPLIT_FOLDERS = tuple(dict.fromkeys(s for spec in BENCHMARKS.values() for s in spec.eval_splits[1:]))


def _split_folders(folders: Sequence[Path]) -> list[Path]:
    return [
        d / name
        for d in folders
        if not d.name.startswith(".")
        for name in _SPLIT_FOLDERS
        if (d / name / "metrics.csv").is_file()
    ]


def _match(d: Path, benchmark_name: str, fingerprint: str) -> str | None:
    """ "fingerprint" (these files), "other" (another benchmark's or other files'), "name" (no fingerprint
    recorded, same benchmark name) or None."""
    meta = _read_json(d / "metrics.json") or {}
    named = (_read_json(d / "run_info.json") or {}).get("benchmark_fingerprint") or meta.get("benchmark_fingerprint")
    if named:
        return "fingerprint" if named == fingerprint else "other"
    if (d / "run_info.json").is_file():  # a pipeline run's record without a fingerprint: not of these files
        return "other"
    return "name" if meta.get("benchmark") == benchmark_name or d.name.endswith(f"-{benchmark_name}") else None


def _label(d: Path, root: Path) -> str:
    """The folder's name under runs/; elsewhere its last two parts (a run's server path is never shown whole)."""
    return d.name if d.parent == root else "/".join(d.parts[-2:])


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


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


def load_report(run: RunSummary, family: MetricFamily | str | None = None) -> Report:
    """The metrics table (with CIs), paired comparisons and plots of one eval run folder."""
    from cir_demo.benchmarks.families import metric_family
    from cir_demo.explorer.paired import paired_display

    try:
        metrics = pd.read_csv(run.path / "metrics.csv")
    except (OSError, ValueError) as exc:
        raise ServiceError(f"{run.label}/metrics.csv: cannot read ({exc})") from None
    meta = _read_json(run.path / "metrics.json") or {}
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
    run_info = _read_json(run.path / "run_info.json") or {}
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
    for split in _split_folders([run.path]):
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


PER_QUERY_COLUMNS = ("run", "query_id", "group_id", "AP@10", "precision@10", "NegRecall@10", "n_neg")


def read_eval_per_query(
    run_dir: Path,
    retriever_specs: Mapping[str, str],
    reranker_hash: str | None,
    columns: Sequence[str] = PER_QUERY_COLUMNS,
) -> pd.DataFrame | None:
    """per_query.csv rows (`columns` of them) of an eval run whose retrievers have the given spec hashes.

    Only runs written by the pipeline (run_info.json with specs) qualify: a ranking is
    reused only when it came from the same retriever spec. Reranked rows are kept when
    the reranker's spec hash matches too. `columns`: those read (the failure sorts' columns of the family).
    """
    from cir_demo.rerank.base import spec_hash_of
    from cir_demo.retrievers.base import spec_hash

    info = _read_json(run_dir / "run_info.json")
    if not info or not (run_dir / "per_query.csv").is_file():
        return None
    specs = info.get("retrievers") or {}
    ok = [
        n for n, h in retriever_specs.items() if n in specs and isinstance(specs[n], dict) and spec_hash(specs[n]) == h
    ]
    if not ok:
        return None
    runs = set(ok)
    rr_spec = info.get("reranker")
    if reranker_hash and isinstance(rr_spec, dict) and spec_hash_of(rr_spec) == reranker_hash:
        runs |= {f"{n}{RERANK_SUFFIX}" for n in ok}
    wanted = set(columns)
    try:  # those of `columns` the file has: a metric it lacks is said by the sort that reads it
        df = pd.read_csv(
            run_dir / "per_query.csv",
            usecols=lambda c: c in wanted,
            dtype={"query_id": str, "group_id": str, "run": str},
        )
    except (OSError, ValueError):
        return None
    if not {"run", "query_id", "group_id"} & wanted <= set(df.columns):
        return None
    return df[df["run"].isin(runs)].reset_index(drop=True)
