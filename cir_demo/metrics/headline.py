"""A family's headline table with 95% intervals, and its paired rows, from one set of bootstrap draws.

Every aggregate a family's papers print gets an interval and a paired test, not only the pooled means:

- pooled: the mean over all scored queries of each headline per-query column (`MetricFamily.headline`;
  FashionIQ's `Recall@k_pooled`), a bootstrap over paraphrase groups (`bootstrap.group_bootstrap_means`);
  these equal `bootstrap.bootstrap_cis` and `bootstrap.compare_runs` with the same seed.
- per stratum (`MetricFamily.strata`, FashionIQ's `category`): the mean of each stratum's queries
  (`Recall@10/dress`), groups resampled within the stratum, and the plain mean over the strata
  (`Recall@10`, the official FashionIQ number), whose replicates are the means of the strata's replicates.
- averages (`MetricFamily.averages`: CIRR's mean(Recall@5, Recall_subset@1), FashionIQ's
  `average_recall`): the mean of other aggregates, replicate by replicate.

A paired row is the same statistic of the per-query differences b - a over the queries both runs
scored; its p-value is two-sided (twice the share of replicates on the far side of 0), and one below
1/n_boot is only known to be below that bound (`p_text`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from cir_demo.metrics.bootstrap import _group_codes, _group_sums, compare_runs, group_bootstrap_means, scored_rows


def p_text(p: float, n_boot: int) -> str:
    """A bootstrap p-value as text: "< 0.001" (the bound 1/n_boot) when no replicate reached it."""
    if p != p:
        return "n/a"
    bound = 1.0 / n_boot if n_boot else 0.0
    if p < bound:
        return f"< {bound:.3g}"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.2g}"


def p_values_as_text(paired: pd.DataFrame) -> pd.DataFrame:
    """Paired rows with their `p_value` as a reader gets it (`p_text`: "< 0.001" below 1/n_boot), as
    paired.csv, report.md, the app's Report and its API write it; a value already text is kept."""
    n_boot = paired["n_boot"] if "n_boot" in paired else [0] * len(paired)
    return paired.assign(
        p_value=[p if isinstance(p, str) else p_text(float(p), int(n)) for p, n in zip(paired["p_value"], n_boot)]
    )


def strata_note(family) -> str:
    """How a family of strata (FashionIQ's categories) names its two kinds of mean, for its reports: the
    plain name is the stratum average, the official number; `_pooled` the mean over all queries."""
    cols = list(family.headline)
    plain = ", ".join(f"`{c}`" for c in cols)
    pooled = ", ".join(f"`{family.headline[c]}`" for c in cols)
    first = f"`{cols[0]}/{family.strata_order[0]}`" if family.strata_order else f"`{cols[0]}/<{family.strata}>`"
    return (
        f"{plain}: **{family.strata} average**, each {family.strata}'s own mean ({first}, ...) averaged with "
        f"equal weight: the official number. {pooled}: **pooled**, the mean over all queries at once (each "
        f"{family.strata} weighted by its number of queries); equal to the average only when the "
        f"{family.strata} groups are equally large."
    )


def _replicates(values: np.ndarray, groups: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, m) replicate means of the columns of `values` (n, m), groups resampled; NaN without rows."""
    if values.shape[0] == 0:
        return np.full((n_boot, values.shape[1]), np.nan)
    sums, sizes = _group_sums(values, _group_codes(groups, values.shape[0]))
    return group_bootstrap_means(sums, sizes, n_boot, seed).reshape(n_boot, -1)


def _strata(frame: pd.DataFrame, column: str, order: Sequence[str]) -> list[str]:
    present = [str(s) for s in pd.unique(frame[column].dropna().astype(str))]
    return [s for s in order if s in present] + sorted(s for s in present if s not in order)


def _statistics(
    frame: pd.DataFrame, family, n_boot: int, seed: int, columns: Sequence[str]
) -> dict[str, tuple[float, np.ndarray]]:
    """Aggregate name -> (point, replicates) of the family's headline statistics of `frame`'s `columns`
    (per-query values or paired differences), in the order papers print them."""
    groups = frame["group_id"].to_numpy()
    values = frame[list(columns)].to_numpy(dtype=float)
    pooled_reps = _replicates(values, groups, n_boot, seed)
    out: dict[str, tuple[float, np.ndarray]] = {}
    strata_col = getattr(family, "strata", "")
    if strata_col and strata_col in frame:
        names = _strata(frame, strata_col, getattr(family, "strata_order", ()))
        per: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        labels = frame[strata_col].astype(str).to_numpy()
        for i, s in enumerate(names):
            rows = labels == s
            per[s] = (values[rows].mean(axis=0), _replicates(values[rows], groups[rows], n_boot, seed + 1 + i))
        for s in names:
            for j, c in enumerate(columns):
                out[f"{c}/{s}"] = (float(per[s][0][j]), per[s][1][:, j])
        if names:
            for j, c in enumerate(columns):
                out[c] = (
                    float(np.mean([per[s][0][j] for s in names])),
                    np.mean([per[s][1][:, j] for s in names], axis=0),
                )
    pooled = {
        family.headline[c]: (float(values[:, j].mean()) if len(values) else float("nan"), pooled_reps[:, j])
        for j, c in enumerate(columns)
    }
    for name, parts in getattr(family, "averages", ()):
        known = {**out, **pooled}
        if all(p in known for p in parts):
            out[name] = (float(np.mean([known[p][0] for p in parts])), np.mean([known[p][1] for p in parts], axis=0))
    return {**out, **pooled}


def headline_cis(
    per_query: pd.DataFrame, family, n_boot: int = 1000, seed: int = 0, alpha: float = 0.05
) -> dict[str, tuple[float, float, float]]:
    """Aggregate name -> (value, lo, hi) for every headline statistic of the family (module docstring),
    over the scored rows of one run's per-query frame."""
    df = per_query[per_query["scored"].to_numpy(dtype=bool)] if "scored" in per_query else per_query
    cols = [c for c in family.headline if c in df]
    if not len(df) or not cols or n_boot < 1:
        return {}
    stats = _statistics(df, family, int(n_boot), seed, cols)
    out = {}
    for name, (point, reps) in stats.items():
        lo, hi = np.nanquantile(reps, [alpha / 2, 1 - alpha / 2]) if np.isfinite(reps).any() else (np.nan, np.nan)
        out[name] = (point, float(lo), float(hi))
    return out


def _derived_paired(
    a: pd.DataFrame, b: pd.DataFrame, family, cols: Sequence[str], n_boot: int, seed: int, alpha: float
) -> list[dict]:
    """Paired rows of the per-stratum and average statistics (the pooled ones come from `compare_runs`)."""
    strata_col = getattr(family, "strata", "")
    keep = ["query_id", "group_id", *([strata_col] if strata_col and strata_col in a else [])]
    both = a[keep + list(cols)].merge(b[["query_id", *cols]], on="query_id", suffixes=("_a", "_b"))
    diffs = both[keep].copy()
    finite = np.ones(len(both), dtype=bool)
    for c in cols:
        diffs[c] = both[f"{c}_b"].to_numpy(dtype=float) - both[f"{c}_a"].to_numpy(dtype=float)
        finite &= np.isfinite(diffs[c].to_numpy())
    diffs, both = diffs[finite], both[finite]
    if not len(diffs):
        return []
    stats = _statistics(diffs, family, n_boot, seed, cols)
    pooled = {family.headline[c] for c in cols}
    means = {
        side: _statistics(
            both[keep].assign(**{c: both[f"{c}_{side}"].to_numpy(dtype=float) for c in cols}), family, 1, 0, cols
        )
        for side in ("a", "b")
    }
    rows = []
    for name, (point, reps) in stats.items():
        if name in pooled:
            continue
        lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
        p = min(1.0, 2.0 * min(np.mean(reps <= 0), np.mean(reps >= 0)))
        rows.append(
            dict(
                metric=name,
                diff=point,
                lo=float(lo),
                hi=float(hi),
                p_value=float(p),
                mean_a=means["a"][name][0],
                mean_b=means["b"][name][0],
                n_queries=int(len(diffs)),
                n_groups=int(diffs["group_id"].nunique()),
                n_boot=int(n_boot),
            )
        )
    return rows


def paired_headline(
    per_query: Mapping[str, pd.DataFrame], family, n_boot: int = 1000, seed: int = 0, alpha: float = 0.05
) -> pd.DataFrame:
    """For every pair of runs (a before b in the mapping's order) sharing a scored query: one row per headline
    statistic (`metric`: its aggregate name, as metrics.csv names it), the strata's average and the
    official averages first, then the pooled means (the primary first), then each stratum's.
    Columns: a, b, metric, n_queries, diff (= b - a), lo, hi, p_value, mean_a, mean_b, n_groups, n_boot."""
    names = list(per_query)
    return paired_table(
        [
            paired_pair_rows(a, per_query[a], b, per_query[b], family, n_boot=n_boot, seed=seed, alpha=alpha)
            for i, a in enumerate(names)
            for b in names[i + 1 :]
        ]
    )


def paired_pair_rows(
    a: str, per_query_a: pd.DataFrame, b: str, per_query_b: pd.DataFrame, family, n_boot: int, seed: int, alpha=0.05
) -> list[dict]:
    """`paired_headline`'s rows of one pair of runs ([] when they share no scored query): each pair's
    bootstrap depends on that pair alone, so pairs may be computed as their runs come and joined by
    `paired_table` in `paired_headline`'s order."""
    primary_first = [family.primary] + [c for c in family.headline if c != family.primary]
    fa, fb = scored_rows(per_query_a), scored_rows(per_query_b)
    cols = [m for m in primary_first if m in fa.columns and m in fb.columns]
    if not cols or not set(fa["query_id"]) & set(fb["query_id"]):
        return []
    pooled = [
        {**r, "metric": family.headline[r["metric"]]}
        for r in compare_runs(fa, fb, cols, n_boot=n_boot, alpha=alpha, seed=seed).to_dict("records")
    ]
    derived = _derived_paired(fa, fb, family, cols, n_boot, seed, alpha)
    first = [r for r in derived if "/" not in r["metric"]]
    strata = [r for r in derived if "/" in r["metric"]]
    return [{"a": a, "b": b, **r} for r in (*first, *pooled, *strata)]


def paired_table(pair_rows: Sequence[list[dict]]) -> pd.DataFrame:
    """The table of `paired_pair_rows` of each pair, in the given order."""
    table = pd.DataFrame([r for rows in pair_rows for r in rows])
    if not len(table):
        return table
    return table[
        ["a", "b", "metric", "n_queries"] + [c for c in table.columns if c not in ("a", "b", "metric", "n_queries")]
    ]
