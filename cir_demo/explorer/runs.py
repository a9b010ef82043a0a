"""Eval run folders of a benchmark: listing, the report tab's table and plots, and reusable
per-query results."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from cir_demo.benchmarks.registry import RERANK_SUFFIX
from cir_demo.explorer.config import ServiceError
from cir_demo.explorer.views import Report, RunSummary


def list_runs(benchmark_name: str, fingerprint: str, root: Path | None = None) -> list[RunSummary]:
    """Eval run folders (with metrics.csv) of this benchmark, newest first.

    A copy of shipped outputs installed by other code is left out (it is not what this code
    writes). A run matches by `run_info.json`'s benchmark fingerprint (same content), else (older
    runs and results-file evaluations, which have no run_info) by the benchmark name in
    metrics.json or the folder name suffix `-<benchmark>`.
    """
    from cir_demo.index.prebuilt_run import stale_installed_copy
    from cir_demo.paths import runs_dir

    root = Path(root) if root is not None else runs_dir()
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        # a dot-folder is work in progress (staging, an install being written), never a run
        if d.name.startswith(".") or not (d.is_dir() and (d / "metrics.csv").is_file()) or stale_installed_copy(d):
            continue
        info = _read_json(d / "run_info.json")
        if info is not None:
            if info.get("benchmark_fingerprint") == fingerprint:
                out.append((d.stat().st_mtime, RunSummary(d, d.name, "fingerprint")))
            continue
        meta = _read_json(d / "metrics.json") or {}
        if meta.get("benchmark") == benchmark_name or d.name.endswith(f"-{benchmark_name}"):
            out.append((d.stat().st_mtime, RunSummary(d, d.name, "name")))
    out.sort(key=lambda t: (t[1].matches == "fingerprint", t[0], t[1].label), reverse=True)
    return [r for _, r in out]


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def metrics_display_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """The headline columns of metrics.csv with their 95% intervals as 'value [lo, hi]'."""
    wanted = (("mAP@10", "precision@10", "NegRecall@10", "recall@10", "ling_sens_paraphrase_range")
              if "NegRecall@10" in metrics else ("mAP@5", "mAP@10", "mAP@25", "Recall@10", "Recall@1", "Recall@3", "hard_negative@1"))
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


def load_report(run: RunSummary) -> Report:
    """The metrics table (with CIs) and plots of one eval run folder."""
    try:
        metrics = pd.read_csv(run.path / "metrics.csv")
    except (OSError, ValueError) as exc:
        raise ServiceError(f"{run.path / 'metrics.csv'}: cannot read ({exc})") from None
    plots = sorted((run.path / "plots").glob("*.png")) if (run.path / "plots").is_dir() else []
    first = ["precision_vs_safety.png", "paraphrase_sensitivity.png", "single_vs_two_image.png"]
    plots.sort(key=lambda p: (first.index(p.name) if p.name in first else len(first), p.name))
    captions = {
        "precision_vs_safety.png": "Precision versus safety: mAP@10 against NegRecall@10 (up-left is better)",
        "paraphrase_sensitivity.png": "Paraphrase sensitivity (lower is more robust)",
        "single_vs_two_image.png": "Single versus two-image queries (mAP@10 with 95% CIs in the table)",
        "per_category.png": "mAP@10 per intent category",
        "per_subcategory.png": "mAP@10 per edit subcategory",
    }
    info = []
    run_info = _read_json(run.path / "run_info.json") or {}
    if run.matches == "name":
        info.append("This run has no benchmark fingerprint; it may come from another version of the benchmark.")
    if run_info.get("reranker"):
        info.append(f"Reranker: {run_info['reranker'].get('backend', '?')} on the top {run_info.get('rerank_top_n')}.")
    meta = _read_json(run.path / "metrics.json") or {}
    if meta.get("n_boot"):
        info.append(f"Intervals: 95% bootstrap over paraphrase groups ({meta['n_boot']} resamples).")
    if (run.path / "report.md").is_file():
        info.append("Full report: report.md, with the run's tables, under Files of this run below.")
    return Report(run, metrics_display_table(metrics), [(p, captions.get(p.name, p.stem.replace("_", " "))) for p in plots], info)


PER_QUERY_COLUMNS = ("run", "query_id", "group_id", "AP@10", "precision@10", "NegRecall@10", "n_neg")


def read_eval_per_query(run_dir: Path, retriever_specs: Mapping[str, str], reranker_hash: str | None,
                        columns: Sequence[str] = PER_QUERY_COLUMNS) -> pd.DataFrame | None:
    """per_query.csv rows (`columns` of them) of an eval run whose retrievers have the given spec hashes.

    Only runs written by the pipeline (run_info.json with specs) qualify: a ranking is
    reused only when it came from the same retriever spec. Reranked rows are kept when
    the reranker's spec hash matches too.
    """
    from cir_demo.rerank.base import spec_hash_of
    from cir_demo.retrievers.base import spec_hash

    info = _read_json(run_dir / "run_info.json")
    if not info or not (run_dir / "per_query.csv").is_file():
        return None
    specs = info.get("retrievers") or {}
    ok = [n for n, h in retriever_specs.items() if n in specs and isinstance(specs[n], dict) and spec_hash(specs[n]) == h]
    if not ok:
        return None
    runs = set(ok)
    rr_spec = info.get("reranker")
    if reranker_hash and isinstance(rr_spec, dict) and spec_hash_of(rr_spec) == reranker_hash:
        runs |= {f"{n}{RERANK_SUFFIX}" for n in ok}
    try:
        df = pd.read_csv(run_dir / "per_query.csv", usecols=list(columns),
                         dtype={"query_id": str, "group_id": str, "run": str})
    except (OSError, ValueError):
        return None
    return df[df["run"].isin(runs)].reset_index(drop=True)
