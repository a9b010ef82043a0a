"""The one scoring of a run: per-query rows by the family's official per-query code, the official
aggregates and group-bootstrap intervals. `--eval`, the app (columns, sorts, Report), `failures`,
the API and the Python API all score through here, so no two of them can disagree on a number.

This module only consumes runs (`{query_id: [image_id, ...]}`); it never imports torch, so scoring a
results file stays cheap.
"""

from __future__ import annotations

import warnings as warnings_module
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd

from cir_demo.benchmarks.families import MetricFamily, metric_family
from cir_demo.benchmarks.schema import Benchmark

# per_query.csv holds the per-query values to this many decimals, and every aggregate, interval and table
# is computed from the values as stored: the check of shipped outputs (harness/shipped_check.py) then
# recomputes each of them from the file exactly (a tie or a count "helped" decided on unstored bits
# could not be recomputed)
ROW_DECIMALS = 6


def stored_precision(per_query: pd.DataFrame) -> pd.DataFrame:
    """`per_query` with its float columns rounded to `ROW_DECIMALS`, as per_query.csv stores them."""
    floats = per_query.select_dtypes("float").columns
    if not len(floats):
        return per_query
    out = per_query.copy()
    out[floats] = out[floats].round(ROW_DECIMALS)
    return out


@dataclass
class RunEvaluation:
    name: str
    metrics: dict[str, Any]
    per_query: pd.DataFrame  # one row per matched query, metric columns + group_id + meta
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)  # aggregate name -> (lo, hi)
    warnings: list[str] = field(default_factory=list)
    key: str | None = None  # the digest of the run's key in the store, when it has one (run_info.json's run_keys)


def family_of(benchmark: Benchmark) -> MetricFamily:
    return metric_family(benchmark.metric_family)


def metrics_module(benchmark: Benchmark):
    return family_of(benchmark).metrics_module()


def per_query_scores(benchmark: Benchmark, run: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """The family's official per-query metrics of `run` with the queries' meta columns (group, strata,
    categories): the rows every aggregate, interval and failure sort reads."""
    from cir_demo.metrics.breakdown import query_meta_frame

    per_query = metrics_module(benchmark).per_query(run, benchmark.queries)
    meta = query_meta_frame(benchmark.queries)
    extra_cols = [c for c in meta.columns if c not in per_query.columns or c == "query_id"]
    return per_query.merge(meta[extra_cols], on="query_id", how="left")


def written_rows(per_query: pd.DataFrame, name: str | None = None) -> pd.DataFrame:
    """`per_query` as per_query.csv holds it: `run` (`name`, else the frame's own) first, floats rounded to
    ROW_DECIMALS places (rounding first and writing floats as they are is several times faster than a
    per-value float_format)."""
    rows = per_query.assign(run=name) if name is not None else per_query
    rows = rows[["run"] + [c for c in rows.columns if c != "run"]]
    floats = rows.select_dtypes("float").columns
    rows[floats] = rows[floats].round(ROW_DECIMALS)
    return rows


def evaluate_run(
    benchmark: Benchmark,
    run: Mapping[str, Sequence[str]],
    name: str,
    n_boot: int = 1000,
    seed: int = 0,
    warnings: Sequence[str] = (),
    per_query: pd.DataFrame | None = None,
) -> RunEvaluation:
    """Official aggregates plus group-bootstrap CIs for the headline metrics. `per_query`: the run's
    `per_query_scores` when the caller has them already."""
    if per_query is None:
        per_query = per_query_scores(benchmark, run)
    return evaluation_of_rows(benchmark, per_query, name, n_boot=n_boot, seed=seed, warnings=warnings)


def evaluation_of_rows(
    benchmark: Benchmark,
    per_query: pd.DataFrame,
    name: str,
    n_boot: int = 1000,
    seed: int = 0,
    warnings: Sequence[str] = (),
) -> RunEvaluation:
    """The evaluation of a run from its per-query rows (`per_query_scores`, or the rows of a
    per_query.csv: metadata columns already there are kept): what `--eval` and the check of shipped
    outputs (harness/shipped_check.py) derive every aggregate, interval and table from."""
    from cir_demo.metrics.breakdown import query_meta_frame
    from cir_demo.metrics.headline import headline_cis

    fam = family_of(benchmark)
    mod = metrics_module(benchmark)
    meta_columns = {"group_id"}.union(*(q.meta for q in benchmark.queries))
    if not meta_columns <= set(per_query.columns):  # rows read from a file without the queries' meta columns
        meta = query_meta_frame(benchmark.queries)
        extra_cols = [c for c in meta.columns if c not in per_query.columns or c == "query_id"]
        per_query = per_query.merge(meta[extra_cols], on="query_id", how="left")
    per_query = stored_precision(per_query)
    with warnings_module.catch_warnings():  # coverage is reported by the caller, per results file
        warnings_module.simplefilter("ignore", category=UserWarning)
        metrics = {"model": name, **mod.aggregate(per_query, n_queries_total=len(benchmark.queries))}
    warnings = list(warnings)
    if metrics.get("n_queries_without_positives"):
        warnings.append(
            f"{metrics['n_queries_without_positives']} queries have no positives; they are left out of "
            "every mean (as pytrec_eval, which the official code uses, leaves them out)"
        )
    warnings += getattr(mod, "run_warnings", lambda _: [])(metrics)  # a family's own caveats (CIRR: unseen set members)
    # every headline statistic papers print (per stratum, official averages, pooled) with its interval
    ci = {name: (lo, hi) for name, (_, lo, hi) in headline_cis(per_query, fam, n_boot=n_boot, seed=seed).items()}
    return RunEvaluation(name=name, metrics=metrics, per_query=per_query, ci=ci, warnings=list(warnings))


def metrics_table(benchmark: Benchmark, evaluations: Sequence[RunEvaluation]) -> pd.DataFrame:
    """`model`, then the official columns in official order, then ours (CIs as `<metric>_ci_lo/_ci_hi`)."""
    official = list(getattr(metrics_module(benchmark), family_of(benchmark).official_columns))
    rows = []
    for ev in evaluations:
        row = dict(ev.metrics)
        for agg, (lo, hi) in ev.ci.items():
            row[f"{agg}_ci_lo"], row[f"{agg}_ci_hi"] = lo, hi
        rows.append(row)
    df = pd.DataFrame(rows)
    first = ["model"] + [c for c in official if c in df.columns and c != "model"]
    return df[first + [c for c in df.columns if c not in first]]


def report_table(benchmark: Benchmark, evaluations: Sequence[RunEvaluation]) -> pd.DataFrame:
    """The app's Report table of scored runs: `run`, the family's Report aggregates with their
    intervals (`<agg>_ci_lo/_ci_hi`) and the queries scored."""
    from cir_demo.metrics.bootstrap import scored_rows

    fam = family_of(benchmark)
    rows = []
    for ev in evaluations:
        row = {"run": ev.name, **{a: ev.metrics.get(a, float("nan")) for a in fam.report_aggregates()}}
        for agg, (lo, hi) in ev.ci.items():
            row[f"{agg}_ci_lo"], row[f"{agg}_ci_hi"] = lo, hi
        rows.append({**row, "total_queries": int(len(scored_rows(ev.per_query)))})
    return pd.DataFrame(rows)


def paired_comparisons(
    benchmark: Benchmark, evaluations: Sequence[RunEvaluation], n_boot: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Paired group bootstrap of every headline statistic of the family for every pair of runs, on their shared
    queries: one row per pair and statistic, named as metrics.csv names it (`metrics.headline.paired_headline`)."""
    from cir_demo.metrics.headline import paired_headline

    return paired_headline(
        {ev.name: ev.per_query for ev in evaluations}, family_of(benchmark), n_boot=n_boot, seed=seed
    )
