"""The Report's numbers for the runs the app serves from results files (`--runs`, uploads): each run
scored over its whole ranking by the family's official per-query code (as `--eval` scores it), the
family's headline aggregates, and a paired bootstrap over paraphrase groups of every headline metric
for every pair of runs."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pandas as pd

from cir_demo.benchmarks.families import MetricFamily
from cir_demo.benchmarks.schema import Benchmark

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
    benchmark: Benchmark,
    family: MetricFamily,
    rankings: Mapping[str, Mapping[str, Sequence[str]]],
    n_boot: int = 1000,
    seed: int = 0,
) -> RunsScored:
    """Score each run's rankings (`{query id: ids best first}`) on the benchmark and compare every pair."""
    from cir_demo.metrics.breakdown import query_meta_frame
    from cir_demo.metrics.headline import headline_cis, paired_headline

    mod = family.metrics_module()
    meta = query_meta_frame(benchmark.queries) if family.strata else None
    frames, rows = {}, []
    for name, run in rankings.items():
        frame = mod.per_query(dict(run), benchmark.queries)
        if meta is not None and family.strata not in frame and family.strata in meta:
            frame = frame.merge(meta[["query_id", family.strata]], on="query_id", how="left")
        with warnings.catch_warnings():  # coverage is said per run where the file is loaded
            warnings.simplefilter("ignore", category=UserWarning)
            agg = mod.aggregate(frame, n_queries_total=len(benchmark.queries))
        frames[name] = frame
        scored = frame[frame["scored"]] if "scored" in frame else frame
        row = {"run": name, **{a: agg.get(a, float("nan")) for a in family.report_aggregates()}}
        for a, (_, lo, hi) in headline_cis(frame, family, n_boot=n_boot, seed=seed).items():
            row[f"{a}_ci_lo"], row[f"{a}_ci_hi"] = lo, hi
        rows.append({**row, "total_queries": int(len(scored))})
    paired = (
        paired_headline(frames, family, n_boot=n_boot, seed=seed) if len(frames) > 1 and n_boot > 0 else pd.DataFrame()
    )
    return RunsScored(pd.DataFrame(rows), paired, frames, n_boot)


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
