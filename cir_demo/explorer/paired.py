"""The Report's numbers for the runs the app serves from results files (`--runs`, uploads): each run
scored over its whole ranking by the family's official per-query code (as `--eval` scores it), the
family's headline aggregates, and a paired bootstrap over paraphrase groups of every headline metric
for every pair of runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import pandas as pd

from cir_demo.benchmarks.families import MetricFamily
from cir_demo.benchmarks.schema import Benchmark
from cir_demo.store.score import RunEvaluation

P_VALUE_METHOD = (
    "two-sided p-value of a paired bootstrap over paraphrase groups (each resample draws groups once for both runs)"
)


@dataclass
class RunsScored:
    """Per-query metrics, headline aggregates and paired comparisons of some runs."""

    metrics: pd.DataFrame  # run, the family's headline aggregates, queries scored
    paired: pd.DataFrame  # a, b, metric, diff (= mean b - mean a), lo, hi, p_value, n_queries, ...
    per_query: dict[str, pd.DataFrame] = field(default_factory=dict)
    n_boot: int = 0


def score_runs(
    benchmark: Benchmark, evaluations: Sequence[RunEvaluation], n_boot: int = 1000, seed: int = 0
) -> RunsScored:
    """The Report's table and every pair's paired comparison of runs scored by the store (`store.score`)."""
    from cir_demo.store.score import paired_comparisons, report_table

    paired = (
        paired_comparisons(benchmark, evaluations, n_boot=n_boot, seed=seed)
        if len(evaluations) > 1 and n_boot > 0
        else pd.DataFrame()
    )
    return RunsScored(
        report_table(benchmark, evaluations), paired, {ev.name: ev.per_query for ev in evaluations}, n_boot
    )


def paired_display(paired: pd.DataFrame, family: MetricFamily) -> pd.DataFrame:
    """The paired rows as the Report shows them: A, B, the aggregate (as metrics.csv names it), B − A with its
    95% interval, the p-value (below 1/n_boot: "< 0.001", the bound) and the queries compared."""
    if paired is None or not len(paired):
        return pd.DataFrame(columns=["A", "B", "metric", "B − A [95% interval]", "p", "queries"])
    from cir_demo.metrics.headline import p_values_as_text

    named = {*family.report_aggregates(), *family.headline.values()}
    return pd.DataFrame(
        {
            "A": paired["a"].astype(str),
            "B": paired["b"].astype(str),
            # paired.csv of older code named per-query columns (AP@10 for mAP@10): shown by their aggregate's name
            "metric": [m if m in named else family.headline.get(m, m) for m in paired["metric"].astype(str)],
            "B − A [95% interval]": [
                f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]" for d, lo, hi in zip(paired["diff"], paired["lo"], paired["hi"])
            ],
            "p": p_values_as_text(paired)["p_value"].to_numpy(),
            "queries": paired["n_queries"].astype(int).to_numpy(),
        }
    )


def pair_choices(names: Sequence[str]) -> list[tuple[str, str]]:
    """(label, "diff:A,B") for every ordered pair: the explorer's A-vs-B sort lists A's largest gains first."""
    return [
        (f"{a} vs {b} (where {a} gains most over {b} first)", f"diff:{a},{b}") for a in names for b in names if a != b
    ]
