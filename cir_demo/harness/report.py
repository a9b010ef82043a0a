"""Write an evaluation to disk: metrics.csv/json, per-query CSV, report.md, plots."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from cir_demo.benchmarks.schema import Benchmark
from cir_demo.store.score import (
    RunEvaluation,
    family_of,
    metrics_module,
    metrics_table,
    paired_comparisons,
    written_rows,
)
from cir_demo.metrics.headline import p_values_as_text, strata_note
from cir_demo.utils.csv_text import frame_csv
from cir_demo.utils.io import write_json_atomic, write_text_atomic

LING_SENS_NOTE = (
    "`ling_sens_range`/`ling_sens_std` follow the official evaluator: queries are grouped by their "
    "reference image(s), so one group can mix *different intents* that share a reference image, and the "
    "spread of precision@10 within a group measures intent differences as well as phrasing. "
    "`ling_sens_paraphrase_range`/`_std` (the paper's notion) group only the paraphrases of one intent "
    "(same judgments) and take the spread of AP@10, so they measure phrasing alone."
)


def _fmt(x: Any) -> str:
    if isinstance(x, (float, np.floating)):
        return "nan" if math.isnan(x) else f"{x:.4f}"
    return str(x)


def _md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]) for c in cols) + " |")
    return "\n".join(lines)


def linguistic_sensitivity(benchmark: Benchmark, evaluations: Sequence[RunEvaluation], table: pd.DataFrame) -> str:
    """PinPoint's report section: the official and the paper's paraphrase sensitivity, side by side."""
    cols = ["model", "ling_sens_range", "ling_sens_std", "ling_sens_paraphrase_range", "ling_sens_paraphrase_std"]
    return (
        "## Linguistic sensitivity\n\n"
        + LING_SENS_NOTE
        + "\n\n"
        + _md_table(table[[c for c in cols if c in table.columns]])
    )


def breakdown_tables(
    benchmark: Benchmark,
    evaluations: Sequence[RunEvaluation],
    n_boot: int,
    seed: int = 0,
    parts: Sequence[dict[str, pd.DataFrame]] | None = None,
) -> dict[str, pd.DataFrame]:
    """Field -> long table (run, value, n_queries, n_groups, metric mean/lo/hi) over every metadata field.
    `parts`: each evaluation's `breakdown_parts`, when computed already."""
    if parts is None:
        parts = [breakdown_parts(benchmark, ev, n_boot=n_boot, seed=seed) for ev in evaluations]
    out: dict[str, pd.DataFrame] = {}
    for field_ in benchmark.meta_fields():
        found = [part[field_] for part in parts if field_ in part]
        if found:
            out[field_] = pd.concat(found, ignore_index=True)
    return out


def breakdown_parts(benchmark: Benchmark, ev: RunEvaluation, n_boot: int, seed: int = 0) -> dict[str, pd.DataFrame]:
    """One run's rows of `breakdown_tables`, field -> table: each run's bootstraps depend on that run alone,
    so they may be computed as the run comes."""
    from cir_demo.metrics.breakdown import field_breakdown, scored_arrays

    present = [m for m in family_of(benchmark).headline if m in ev.per_query]
    fields = [f for f in benchmark.meta_fields() if f in ev.per_query]
    if not present or not fields:
        return {}
    rows, values, group_codes = scored_arrays(ev.per_query, present)  # read once for every field
    return {
        f: field_breakdown(f, rows[f].to_numpy(dtype=object), values, group_codes, present, n_boot, seed, run=ev.name)
        for f in fields
    }


def write_outputs(
    benchmark: Benchmark,
    evaluations: Sequence[RunEvaluation],
    out_dir: str | Path,
    n_boot: int = 1000,
    seed: int = 0,
    extra_sections: Sequence[str] = (),
    plots: bool = True,
    baseline: str | None = None,
    paired: pd.DataFrame | None = None,
    breakdowns_by_run: Sequence[dict[str, pd.DataFrame]] | None = None,
) -> dict[str, Path]:
    """metrics.csv, metrics.json, per_query.csv, breakdowns.csv, paired.csv, report.md, report.tex (marks
    against `baseline`, default the first run) and plots/ (PNG, SVG, PDF). `paired` (`paired_comparisons`)
    and `breakdowns_by_run` (each evaluation's `breakdown_parts`): given when computed already."""
    from cir_demo.harness.latex import check_baseline

    check_baseline([ev.name for ev in evaluations], baseline)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = sorted_metrics_table(benchmark, evaluations)
    paths: dict[str, Path] = {}

    paths["metrics.csv"] = out / "metrics.csv"
    write_text_atomic(paths["metrics.csv"], table.to_csv(index=False, float_format="%.4f"))

    # on the other core, while the breakdowns' bootstraps run here: the paired comparisons, and per_query.csv
    # with the plots that read the evaluations only; the breakdown plots are drawn beside the rest once the
    # breakdowns are known
    from cir_demo.utils.beside import beside

    if plots:  # imported here once, not by each of the two children that draw (0.1-0.2 CPU s each)
        from PIL import Image, ImageDraw, ImageFont  # noqa: F401

    # the paired bootstraps of every pair of runs (the longest part) in a child of their own, too
    pairs = (
        beside(lambda: paired_comparisons(benchmark, evaluations, n_boot=n_boot, seed=seed), f"paired of {out}")
        if len(evaluations) > 1 and n_boot > 0 and paired is None
        else None
    )  # --n-boot 0: no intervals, no tests
    first = beside(
        lambda: _write_beside_breakdowns(evaluations, benchmark, out, plots, n_boot, seed), f"plots of {out}"
    )
    breakdowns = breakdown_tables(benchmark, evaluations, n_boot=n_boot, seed=seed, parts=breakdowns_by_run)
    if breakdowns:
        long = pd.concat([t.assign(field=f) for f, t in breakdowns.items()], ignore_index=True)
        long = long[["field"] + [c for c in long.columns if c != "field"]]
        paths["breakdowns.csv"] = out / "breakdowns.csv"
        write_text_atomic(paths["breakdowns.csv"], long.to_csv(index=False, float_format="%.6g"))

    second = None
    if plots:
        from cir_demo.harness.plots import write_breakdown_plots

        second = beside(
            lambda: write_breakdown_plots(benchmark, evaluations, breakdowns, out / "plots"), f"plots of {out}"
        )
    paths["per_query.csv"] = out / "per_query.csv"  # written by `first`

    if pairs is not None:
        paired = pairs.result()
    elif paired is None or not (len(evaluations) > 1 and n_boot > 0):
        paired = pd.DataFrame()
    if len(paired):
        paths["paired.csv"] = out / "paired.csv"
        write_text_atomic(paths["paired.csv"], p_values_as_text(paired).to_csv(index=False, float_format="%.6g"))

    from cir_demo.engine import benchmark_fingerprint

    paths["metrics.json"] = out / "metrics.json"
    write_json_atomic(
        paths["metrics.json"],
        {
            "benchmark": benchmark.name,
            "benchmark_fingerprint": benchmark_fingerprint(benchmark),
            "metric_family": benchmark.metric_family,
            "n_queries": len(benchmark.queries),
            "n_boot": n_boot,
            "runs": [
                {
                    "metrics": _jsonable(ev.metrics),
                    "ci95": {k: list(v) for k, v in ev.ci.items()},
                    "warnings": ev.warnings,
                }
                for ev in evaluations
            ],
            "paired": _jsonable(paired.to_dict(orient="records")),
        },
    )

    paths["report.tex"] = _write_tex(benchmark, evaluations, table, paired, baseline, n_boot, out)
    written = first.result()  # per_query.csv is in place from here on
    if second is not None:
        written.update(second.result())
    for name, p in written.items():
        paths[f"plots/{name}"] = Path(p)

    paths["report.md"] = out / "report.md"
    write_text_atomic(
        paths["report.md"],
        render_report(
            benchmark,
            evaluations,
            table,
            breakdowns,
            paired,
            n_boot,
            extra_sections,
            [k for k in paths if k.startswith("plots/")],
        ),
    )
    return paths


def _write_beside_breakdowns(
    evaluations: Sequence[RunEvaluation], benchmark: Benchmark, out: Path, plots: bool, n_boot: int, seed: int
) -> dict[str, Path]:
    """per_query.csv, then (`plots`) the plots that need no breakdown; the plots' {file name: path}."""
    write_text_atomic(out / "per_query.csv", frame_csv(per_query_table(evaluations)))
    if not plots:
        return {}
    from cir_demo.harness.plots import write_run_plots

    return write_run_plots(benchmark, evaluations, out / "plots", n_boot=n_boot, seed=seed)


def sorted_metrics_table(benchmark: Benchmark, evaluations: Sequence[RunEvaluation]) -> pd.DataFrame:
    """metrics.csv's rows: `metrics_table`, best primary headline first."""
    fam = family_of(benchmark)
    table = metrics_table(benchmark, evaluations)
    sort_col = fam.headline[fam.primary]
    return table.sort_values(sort_col, ascending=False, kind="stable") if sort_col in table else table


def per_query_table(evaluations: Sequence[RunEvaluation]) -> pd.DataFrame:
    """per_query.csv's rows: every run's per-query rows as the store holds them (`written_rows`)."""
    return written_rows(pd.concat([ev.per_query.assign(run=ev.name) for ev in evaluations], ignore_index=True))


def tex_text(
    benchmark: Benchmark,
    evaluations: Sequence[RunEvaluation],
    table: pd.DataFrame,
    paired: pd.DataFrame,
    baseline: str | None,
    n_boot: int,
) -> str:
    """report.tex, its rows in the order the runs were given (the default baseline first)."""
    from cir_demo.harness.latex import latex_table

    in_order = table.set_index("model", drop=False).loc[[ev.name for ev in evaluations]].reset_index(drop=True)
    return latex_table(
        benchmark.name,
        family_of(benchmark),
        in_order,
        paired,
        baseline or (evaluations[0].name if evaluations else None),
        n_boot,
    )


def _write_tex(
    benchmark: Benchmark,
    evaluations: Sequence[RunEvaluation],
    table: pd.DataFrame,
    paired: pd.DataFrame,
    baseline: str | None,
    n_boot: int,
    out: Path,
) -> Path:
    path = out / "report.tex"
    write_text_atomic(path, tex_text(benchmark, evaluations, table, paired, baseline, n_boot))
    return path


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def render_report(
    benchmark: Benchmark,
    evaluations: Sequence[RunEvaluation],
    table: pd.DataFrame,
    breakdowns: dict[str, pd.DataFrame],
    paired: pd.DataFrame,
    n_boot: int,
    extra_sections: Sequence[str] = (),
    plot_paths: Sequence[str] = (),
) -> str:
    fam = family_of(benchmark)
    buf = io.StringIO()
    w = buf.write
    w(f"# Evaluation report: {benchmark.name}\n\n")
    n_groups = len(benchmark.groups())
    w(
        f"{len(benchmark.queries)} queries in {n_groups} paraphrase groups; corpus of {len(benchmark.corpus_ids)} images; "
        f"metrics computed as the official {benchmark.metric_family} evaluator does. "
        f"95% confidence intervals: bootstrap over paraphrase groups ({n_boot} resamples).\n\n"
    )

    w("## Headline metrics\n\n")
    heads = fam.report_aggregates()
    primary = fam.headline[fam.primary]
    rows = []
    for ev in sorted(evaluations, key=lambda e: -float(e.metrics.get(primary, 0.0) or 0.0)):
        row = {"run": ev.name}
        for agg in heads:
            v = ev.metrics.get(agg)
            if v is None or isinstance(v, str):
                continue
            lo_hi = ev.ci.get(agg)
            row[agg] = f"{v:.4f}" + (f" [{lo_hi[0]:.4f}, {lo_hi[1]:.4f}]" if lo_hi else "")
        for extra in ("total_queries", "coverage"):
            if extra in ev.metrics:
                row[extra] = ev.metrics[extra]
        rows.append(row)
    w(_md_table(pd.DataFrame(rows)) + "\n\n")
    if fam.strata:
        w(strata_note(fam) + "\n\n")

    warn_lines = [f"- **{ev.name}**: {msg}" for ev in evaluations for msg in ev.warnings]
    if warn_lines:
        w("### Warnings\n\n" + "\n".join(warn_lines) + "\n\n")

    official = list(getattr(metrics_module(benchmark), fam.official_columns))
    w("## Official columns\n\n")
    w(_md_table(table[[c for c in official if c in table.columns]]) + "\n\n")
    extra_cols = [
        c for c in table.columns if c not in official and c != "model" and not c.endswith(("_ci_lo", "_ci_hi"))
    ]
    if extra_cols:
        w("## Our extra columns\n\n")
        w(_md_table(table[["model"] + extra_cols]) + "\n\n")

    for section in fam.section_makers():
        text = section(benchmark, evaluations, table)
        if text:
            w(text.rstrip() + "\n\n")

    if len(paired):
        w("## Paired comparisons\n\n")
        w(
            "Difference b − a of each headline statistic (column `metric`, named as in metrics.csv) on the queries "
            "both runs answered; 95% CI and two-sided p-value from a paired bootstrap over paraphrase groups "
            f"(a p-value below 1/{n_boot} shows as that bound).\n\n"
        )
        w(_md_table(p_values_as_text(paired)) + "\n\n")

    if breakdowns:
        w("## Breakdowns\n\n")
        for field_, tab in breakdowns.items():
            w(f"### By `{field_}`\n\n")
            show = tab.copy()
            for m in fam.headline:
                if f"{m}_lo" in show:
                    show[m] = [
                        f"{a:.4f} [{b:.4f}, {c:.4f}]" for a, b, c in zip(show[m], show[f"{m}_lo"], show[f"{m}_hi"])
                    ]
            keep = ["run", "value", "n_queries", "n_groups"] + [m for m in fam.headline if m in show]
            w(_md_table(show[[c for c in keep if c in show]]) + "\n\n")

    for section in extra_sections:
        w(section.rstrip() + "\n\n")
    png = [p for p in plot_paths if p.endswith(".png")]
    if png:
        w("## Plots\n\n" + "\n".join(f"![{Path(p).stem}]({p})" for p in png) + "\n\n")
        w("Each plot is also in plots/ as SVG and PDF (vector files for papers).\n")
    return buf.getvalue()
