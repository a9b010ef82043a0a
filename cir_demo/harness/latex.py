"""report.tex: the family's headline table as a paper prints it (booktabs), with significance marks.

One row per run, one column per headline aggregate (`MetricFamily.report_aggregates`, in percent), the
best value of each column in bold, and a mark on each value that differs significantly from the baseline
run's: the two-sided paired bootstrap over paraphrase groups of paired.csv, its p-values adjusted by
Holm-Bonferroni over every (metric, run) compared with the baseline, at 5%. A p-value below 1/n_boot
(no resample on the far side of 0) counts as 1/n_boot, its bound.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

import pandas as pd

from cir_demo.benchmarks.families import MetricFamily
from cir_demo.benchmarks.schema import BenchmarkError

ALPHA = 0.05
BETTER, WORSE = r"$^{\dagger}$", r"$^{\ddagger}$"
_LOWER_IS_BETTER = ("NegRecall", "ling_sens", "hard_negative")
_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def escape(text: str) -> str:
    """`text` as LaTeX prints it literally."""
    return "".join(_SPECIAL.get(ch, ch) for ch in str(text))


def check_baseline(names: Sequence[str], baseline: str | None) -> None:
    """BenchmarkError (one line) when `--baseline` names no run of the evaluation."""
    if baseline is not None and baseline not in names:
        raise BenchmarkError(f"--baseline {baseline}: no run of that name (runs: {', '.join(names)})")


def lower_is_better(aggregate: str) -> bool:
    return aggregate.startswith(_LOWER_IS_BETTER)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1), in the input order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [1.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def significance(
    paired: pd.DataFrame, baseline: str, runs: Sequence[str], metrics: Sequence[str], n_boot: int
) -> dict[tuple[str, str], tuple[float, float]]:
    """(run, metric) -> (run - baseline difference, Holm-adjusted p) for every run other than the baseline and
    every metric with a paired row."""
    tests = []
    for run in runs:
        if run == baseline:
            continue
        for metric in metrics:
            rows = paired[
                (paired["metric"] == metric)
                & (
                    ((paired["a"] == baseline) & (paired["b"] == run))
                    | ((paired["a"] == run) & (paired["b"] == baseline))
                )
            ]
            if not len(rows):
                continue
            row = rows.iloc[0]
            p = float(row["p_value"])
            if math.isnan(p):
                continue
            diff = float(row["diff"]) * (1 if row["a"] == baseline else -1)
            tests.append(((run, metric), diff, max(p, 1.0 / n_boot if n_boot else 0.0)))
    adjusted = holm([p for *_, p in tests])
    return {key: (diff, p) for (key, diff, _), p in zip(tests, adjusted)}


def short_label(aggregate: str) -> str:
    """The column head papers print: R@10, R$_s$@1, Avg, mAP@10."""
    name = aggregate.split("/")[0].removesuffix("_pooled")
    if name.startswith("mean(") or name == "average_recall":
        return "Avg"
    name = name.replace("Recall_subset@", "R$_s$@").replace("Recall@", "R@")
    return name if "$" in name else escape(name)


def column_group(aggregate: str, family: MetricFamily) -> str:
    """The header group of a column: a stratum ("dress"), "Average" (of the strata) or "Pooled"; "" if none."""
    if "/" in aggregate:
        return aggregate.split("/", 1)[1]
    if aggregate.endswith("_pooled"):
        return "Pooled"
    if family.strata:
        return "Average"
    return ""


def latex_table(
    benchmark_name: str,
    family: MetricFamily,
    table: pd.DataFrame,
    paired: pd.DataFrame,
    baseline: str | None,
    n_boot: int,
) -> str:
    """report.tex's text: `table` is metrics.csv's frame (a `model` column), `paired` paired.csv's rows
    (numeric p-values); `baseline`: the run the marks compare with (default: the first row's)."""
    runs = [str(r) for r in table["model"]]
    metrics = [m for m in family.report_aggregates() if m in table and pd.api.types.is_numeric_dtype(table[m])]
    baseline = baseline if baseline is not None else (runs[0] if runs else None)
    check_baseline(runs, baseline)
    marks = (
        significance(paired, baseline, runs, metrics, n_boot)
        if len(paired) and n_boot > 0 and baseline is not None
        else {}
    )
    best = {}
    for m in metrics:
        values = pd.to_numeric(table[m], errors="coerce")
        if values.notna().any():
            best[m] = values.min() if lower_is_better(m) else values.max()
    lines = [
        "% report.tex, written by cir_demo --eval. Needs \\usepackage{booktabs} in the preamble.",
        "\\begin{table}[t]",
        "\\centering",
        f"\\caption{{{_caption(benchmark_name, family, baseline, len(runs), n_boot, bool(marks))}}}",
        f"\\label{{tab:{re.sub(r'[^A-Za-z0-9]+', '-', benchmark_name)}-headline}}",
        f"\\begin{{tabular}}{{l{'r' * len(metrics)}}}",
        "\\toprule",
        *_header(metrics, family),
        "\\midrule",
    ]
    for i, run in enumerate(runs):
        cells = [escape(run) + (" (baseline)" if run == baseline and marks else "")]
        for m in metrics:
            v = pd.to_numeric(pd.Series([table[m].iloc[i]]), errors="coerce").iloc[0]
            if pd.isna(v):
                cells.append("--")
                continue
            text = f"{100 * v:.2f}"
            if m in best and v == best[m]:
                text = f"\\textbf{{{text}}}"
            diff, p = marks.get((run, m), (0.0, 1.0))
            if p < ALPHA:
                better = (diff < 0) if lower_is_better(m) else (diff > 0)
                text += BETTER if better else WORSE
            cells.append(text)
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(lines)


def _header(metrics: Sequence[str], family: MetricFamily) -> list[str]:
    groups = [column_group(m, family) for m in metrics]
    heads = "Run & " + " & ".join(short_label(m) for m in metrics) + " \\\\"
    if not any(groups):
        return [heads]
    spans, rules, col = [], [], 2
    i = 0
    while i < len(groups):
        j = i
        while j + 1 < len(groups) and groups[j + 1] == groups[i]:
            j += 1
        width = j - i + 1
        label = escape(groups[i].capitalize()) if groups[i] else ""
        spans.append(f"\\multicolumn{{{width}}}{{c}}{{{label}}}" if width > 1 else label)
        if groups[i]:
            rules.append(f"\\cmidrule(lr){{{col}-{col + width - 1}}}")
        col += width
        i = j + 1
    return [" & " + " & ".join(spans) + " \\\\", " ".join(rules), heads]


def _caption(
    benchmark_name: str, family: MetricFamily, baseline: str | None, n_runs: int, n_boot: int, tested: bool
) -> str:
    text = (
        f"{escape(benchmark_name)}: headline metrics (\\%) as the official {escape(family.name)} evaluator "
        "computes them; best of each column in bold."
    )
    if tested:
        text += (
            f" {BETTER}/{WORSE}: significantly better/worse than the baseline {escape(baseline)} "
            f"(two-sided paired bootstrap over paraphrase groups, {n_boot} resamples; p-values adjusted by "
            f"Holm-Bonferroni over every metric and run compared; $\\alpha = {ALPHA}$)."
        )
    elif n_runs > 1:
        text += " No significance test (run with --n-boot above 0 for one)."
    return text
