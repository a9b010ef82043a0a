"""The failure sorts: which apply to a benchmark and its runs (and why the others do not), and the
order each gives, from the runs' per-query metrics (per_query.csv rows, or the same computed here).

One code path for the app's query list and `python -m cir_demo failures`. The sorts a family
offers, their wording and the per-query columns they read are declared with the family
(cir_demo/benchmarks/failure_views.py); this module implements every sort named there.
`per_query` is a long frame: run, query_id, group_id, the family's primary metric and its
`FailureViews.measures`; reranked runs are named `<run>+rerank`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from cir_demo.benchmarks.failure_views import (
    BENCHMARK_ORDER_ALIASES,
    COMMON_SORTS,
    DIFF_PREFIX,
    SORT_LABELS,
    diff_label,
    diff_sort,
)
from cir_demo.benchmarks.families import MetricFamily
from cir_demo.benchmarks.registry import RERANK_SUFFIX
from cir_demo.explorer.config import ServiceError
from cir_demo.utils.names import resolve_ref


@dataclass(frozen=True)
class SortChoice:
    name: str  # what `sorted_queries` and `failures --sort` take
    label: str
    available: bool
    reason: str = ""  # why the sort cannot return anything here ("" when available)


@dataclass(frozen=True)
class SortContext:
    """What decides whether a sort has data: the family, the benchmark's query table and the runs."""

    family: MetricFamily
    table: pd.DataFrame  # query_table(benchmark)
    runs: Sequence[str]  # first-stage runs (columns), in order
    modality: Mapping[str, str]  # run -> image / text / composed
    reranked: bool  # reranked results exist or can be computed

    @property
    def primary(self) -> str:
        return self.family.primary


def sort_label(name: str, ctx: SortContext) -> str:
    if name.startswith(DIFF_PREFIX):
        a, b, metric = split_diff(name)
        return diff_label(a, b, metric or ctx.primary)
    extra = ctx.family.views().extra_sorts
    return extra[name][0] if name in extra else SORT_LABELS[name].format(primary=ctx.primary)


def _reasons(ctx: SortContext) -> dict[str, str]:
    """Why each sort that needs more than a run has no data here ("" when it has)."""
    t = ctx.table
    uni = [r for r in ctx.runs if ctx.modality.get(r) in ("image", "text")]
    reasons = {
        "rerank_helped": "" if ctx.reranked else "no reranker ran on these runs",
        "shortcut": ""
        if uni and len(uni) < len(ctx.runs)
        else "needs an image-only or text-only run beside a composed one",
        "negatives": "" if (t["n_negatives"] > 0).any() else "no query of this benchmark has explicit negatives",
        "hard_negative": "" if (t["n_negatives"] > 0).any() else "no query of this benchmark has hard negatives",
        "spread": "" if t["group_id"].duplicated().any() else "every intent has one phrasing",
        "two_image": "" if (t["n_refs"] > 1).any() else "every query has one reference image",
        "subset_rank": "" if (t["n_subset"] > 0).any() else "no query has an img_set",
    }
    reasons["rerank_hurt"] = reasons["rerank_helped"]
    return reasons


def sort_choices(ctx: SortContext) -> list[SortChoice]:
    """Every sort of the family, A vs B for each ordered pair of runs, with whether it has data."""
    names = [
        *COMMON_SORTS[:2],
        *(diff_sort(a, b) for a in ctx.runs for b in ctx.runs if a != b),
        *COMMON_SORTS[2:],
        *ctx.family.views().sorts,
        *ctx.family.views().extra_sorts,
    ]
    reasons = _reasons(ctx)
    out = []
    for name in names:
        reason = "" if name == "order" else "no runs are loaded" if not ctx.runs else reasons.get(name, "")
        out.append(SortChoice(name, sort_label(name, ctx), not reason, reason))
    return out


def with_empty_marked(
    choices: Sequence[SortChoice], per_query: pd.DataFrame, ctx: SortContext, memo: dict | None = None
) -> list[SortChoice]:
    """`choices` with each offered failure sort that keeps no query of `per_query` marked not offered (e.g.
    "returned the reference first" where no run did), so the app offers only sorts that return something.
    The reranker sorts are left as they are: their rows may not be loaded yet. `memo`: as in `sort_rows`."""
    out = []
    for c in choices:
        if c.available and c.name != "order" and not c.name.startswith("rerank") and len(per_query):
            if memo is not None and c.name in memo:
                keep = memo[c.name][0]
            else:
                found = _sort_function(c.name, ctx)(per_query, ctx)
                keep = found[0]
                if memo is not None:
                    memo[c.name] = found
            if not bool(keep.any()):
                c = SortChoice(c.name, c.label, False, "no query fits it in these runs")
        out.append(c)
    return out


def split_diff(name: str) -> tuple[str, str, str | None]:
    """(A, B, the metric compared or None for the primary) of `diff:A,B` or `diff:A,B:METRIC`."""
    a, sep, rest = name[len(DIFF_PREFIX) :].partition(",")
    b, _, metric = rest.partition(":")
    if not sep or not a or not b:
        raise ServiceError(f"sort {name!r}: write the A-vs-B sort as diff:A,B (two run names)")
    return a, b, metric or None


def with_compared(name: str, metric: str | None, primary: str) -> str:
    """Sort `name` comparing `metric` when it is an A-vs-B sort (the primary: its plain name); others as they are."""
    if not name.startswith(DIFF_PREFIX):
        return name
    a, b, _ = split_diff(name)
    return diff_sort(a, b, None if metric in (None, primary) else metric)


def diff_metrics(family: MetricFamily) -> list[str]:
    """The per-query metrics an A-vs-B sort may compare: the family's headline and shown ones, and its
    official averages of them (CIRR's mean(Recall@5,Recall_subset@1), per query the mean of the two)."""
    return list(dict.fromkeys([family.primary, *family.headline, *family.shown, *_per_query_averages(family)]))


def _per_query_averages(family: MetricFamily) -> dict[str, tuple[str, ...]]:
    """The family's official averages whose parts are all per-query columns: name -> those columns. The
    mean over queries of their per-query mean is the average of their means, so a sort on it agrees."""
    columns = {family.primary, *family.headline, *family.shown}
    return {name: tuple(parts) for name, parts in family.averages if set(parts) <= columns}


def compare_metrics(family: MetricFamily) -> list[str]:
    """The metrics the app's A-vs-B sorts offer (its "compare by" menu): the primary first, then the
    family's headline ones papers lead with (`FailureViews.compare_by`)."""
    offered = diff_metrics(family)
    return list(dict.fromkeys([family.primary, *(m for m in family.views().compare_by if m in offered)]))


def sort_columns(family: MetricFamily, names: Sequence[str]) -> list[str]:
    """The per-query columns behind metrics `names` (an average: its parts)."""
    averages = _per_query_averages(family)
    return list(dict.fromkeys(c for n in names for c in averages.get(n, (n,))))


def metric_wide(per_query: pd.DataFrame, metric: str, runs: Sequence[str], family: MetricFamily) -> pd.DataFrame:
    """query_id x run of per-query metric `metric` (an official average: the mean of its parts)."""
    parts = _per_query_averages(family).get(metric)
    if parts is None:
        return wide(per_query, metric, runs)
    frames = [wide(per_query, c, runs) for c in parts]
    return sum(frames[1:], frames[0]) / len(frames)


def check_sort(name: str, ctx: SortContext, choices: Sequence[SortChoice] | None = None) -> str:
    """`name` as a sort with data here (aliases resolved); else one line listing the sorts offered.
    `choices`: `sort_choices(ctx)` when the caller has them."""
    name = "order" if name in BENCHMARK_ORDER_ALIASES else name
    choices = sort_choices(ctx) if choices is None else choices
    by_name = {c.name: c for c in choices}
    base = name
    if name.startswith(DIFF_PREFIX):
        a, b, metric = split_diff(name)
        unknown = [r for r in (a, b) if r not in ctx.runs]
        if unknown or a == b:
            raise ServiceError(
                f"sort {name!r}: A and B must be two different runs of {', '.join(ctx.runs) or '(none)'}"
            )
        if metric is not None and metric not in diff_metrics(ctx.family):
            raise ServiceError(
                f"sort {name!r}: {metric!r} is not a per-query metric an A-vs-B sort compares here; "
                f"use one of {', '.join(diff_metrics(ctx.family))}"
            )
        base = diff_sort(a, b)
    if base not in by_name:
        own = [c.name for c in choices if c.available and c.name != "order" and not c.name.startswith(DIFF_PREFIX)]
        offered = ", ".join(["benchmark", *own, *(["diff:A,B"] if len(ctx.runs) > 1 else [])])
        raise ServiceError(f"unknown sort {name!r}; this benchmark offers: {offered}")
    if not by_name[base].available:
        raise ServiceError(f"sort {name!r} returns nothing here: {by_name[base].reason}")
    return name


def wide(per_query: pd.DataFrame, column: str, runs: Sequence[str]) -> pd.DataFrame:
    """query_id x run of one per-query column (runs without rows are left out; one row per run and query)."""
    rows = per_query[per_query["run"].isin(runs)]
    out = rows.pivot(index="query_id", columns="run", values=column)
    return out[[r for r in runs if r in out.columns]].astype(float)


def _fmt(x: float) -> str:
    return f"{x:.3f}" if x == x else "n/a"


# Each sort: (per_query, ctx) -> (keep, key, why), indexed by query_id; rows sort by `key` (a frame,
# its columns in order) ascending, ties kept in benchmark order.
SortFn = Callable[[pd.DataFrame, SortContext], tuple[pd.Series, pd.DataFrame, pd.Series]]
NOT_RANKED = 1e9  # a target the run never ranked: below every rank


def _keys(*columns: pd.Series) -> pd.DataFrame:
    return pd.DataFrame({f"k{i}": c.astype(float) for i, c in enumerate(columns)})


def _finer(pq, ctx, runs, index) -> pd.DataFrame:
    """The family's finer measure, query x run, oriented so that higher is better (0 without one)."""
    views = ctx.family.views()
    if not views.finer:
        return pd.DataFrame(0.0, index=index, columns=list(runs))
    f = wide(pq, views.finer, runs).reindex(index=index, columns=list(runs))
    return -f.fillna(NOT_RANKED) if views.finer_lower_is_better else f.fillna(0.0)


def _worst(pq, ctx):
    p = wide(pq, ctx.primary, ctx.runs)
    mean = p.mean(axis=1)
    return (
        mean.notna(),
        _keys(mean, _finer(pq, ctx, ctx.runs, p.index).mean(axis=1)),
        mean.map(lambda v: f"mean {ctx.primary} {_fmt(v)}"),
    )


def _all_fail(pq, ctx):
    p = wide(pq, ctx.primary, ctx.runs)
    keep = (p.max(axis=1) == 0) & p.notna().all(axis=1)
    return (
        keep,
        _keys(_finer(pq, ctx, ctx.runs, p.index).mean(axis=1)),
        pd.Series(f"{ctx.primary} = 0 for every run", index=p.index),
    )


def _diff(a: str, b: str, metric: str | None = None) -> SortFn:
    def sort(pq, ctx):
        compared = metric or ctx.primary
        missing = [c for c in sort_columns(ctx.family, [compared]) if c not in pq]
        if missing:
            raise ServiceError(f"no per-query {', '.join(missing)} in the results loaded")
        p = metric_wide(pq, compared, [a, b], ctx.family)
        for run in (a, b):
            if run not in p:
                raise ServiceError(f"no per-query results for run {run!r}")
        gain = p[a] - p[b]
        f = _finer(pq, ctx, [a, b], p.index)
        why = [f"{a} {_fmt(x)} vs {b} {_fmt(y)} ({x - y:+.3f} {compared})" for x, y in zip(p[a], p[b])]
        return gain.notna(), _keys(-gain, -(f[a] - f[b])), pd.Series(why, index=p.index)

    return sort


def _rerank(helped: bool) -> SortFn:
    def sort(pq, ctx):
        runs = [r for r in ctx.runs if f"{r}{RERANK_SUFFIX}" in set(pq["run"])]
        if not runs:
            raise ServiceError(
                "no reranked results to sort by: this app serves no reranker, or its reranked "
                "results are still being computed"
            )
        before = wide(pq, ctx.primary, runs)
        after = wide(pq, ctx.primary, [f"{r}{RERANK_SUFFIX}" for r in runs]).reindex(before.index)
        delta = pd.DataFrame({r: after[f"{r}{RERANK_SUFFIX}"] - before[r] for r in runs})
        best = delta.max(axis=1) if helped else delta.min(axis=1)
        who = (
            delta.fillna(-np.inf if helped else np.inf).idxmax(axis=1)
            if helped
            else delta.fillna(np.inf).idxmin(axis=1)
        )
        keep = best > 0 if helped else best < 0
        why = [f"{ctx.primary} {v:+.3f} after reranking ({w})" for v, w in zip(best, who)]
        return keep, _keys(-best if helped else best), pd.Series(why, index=delta.index)

    return sort


def _shortcut(pq, ctx):
    p = wide(pq, ctx.primary, ctx.runs)
    uni = [r for r in p.columns if ctx.modality.get(r) in ("image", "text")]
    comp = [r for r in p.columns if r not in uni]
    margin = p[uni].max(axis=1) - p[comp].max(axis=1)
    who, vs = p[uni].fillna(-1.0).idxmax(axis=1), p[comp].fillna(-1.0).idxmax(axis=1)
    why = [f"{w} beats {v} by {m:.3f} {ctx.primary}" for m, w, v in zip(margin, who, vs)]
    return margin > 0, _keys(-margin), pd.Series(why, index=p.index)


def negatives_in_top10(neg_recall10, n_neg) -> np.ndarray:
    """How many explicit negatives a top 10 held, from NegRecall@10 and the negative-list length."""
    denom = np.minimum(np.asarray(n_neg, dtype=float), 10.0)
    return np.rint(np.nan_to_num(np.asarray(neg_recall10, dtype=float)) * denom).astype(int)


def _negatives(pq, ctx):
    negr = wide(pq, "NegRecall@10", ctx.runs)
    n_neg = wide(pq, "n_neg", ctx.runs).reindex(negr.index)
    neg = pd.DataFrame({r: negatives_in_top10(negr[r], n_neg[r]) for r in negr.columns}, index=negr.index)
    most, who = neg.max(axis=1), neg.idxmax(axis=1)
    why = [f"{int(n)} explicit negative{'s' if n != 1 else ''} in the top 10 ({w})" for n, w in zip(most, who)]
    return most > 0, _keys(-most), pd.Series(why, index=neg.index)


def _spread(pq, ctx):
    p = wide(pq, ctx.primary, ctx.runs)
    group = pq.groupby("query_id")["group_id"].first().reindex(p.index)
    by_group = p.groupby(group.to_numpy())
    spreads = by_group.transform("max") - by_group.transform("min")
    most, who = spreads.max(axis=1), spreads.fillna(-1.0).idxmax(axis=1)
    why = [f"{ctx.primary} varies by {v:.3f} across paraphrases ({w})" for v, w in zip(most, who)]
    return most > 0, _keys(-most), pd.Series(why, index=p.index)


def _two_image(pq, ctx):
    keep_ids = set(ctx.table.loc[ctx.table["n_refs"] > 1, "query_id"])
    keep, key, why = _worst(pq, ctx)
    return keep & keep.index.isin(keep_ids), key, why


def _target_rank(pq, ctx):
    ranks = wide(pq, "target_rank", ctx.runs)
    worst = ranks.fillna(NOT_RANKED).max(axis=1)
    who = ranks.fillna(NOT_RANKED).idxmax(axis=1)
    why = [
        f"target {'not in the ranking scored' if v >= NOT_RANKED else f'at rank {int(v)}'} ({w})"
        for v, w in zip(worst, who)
    ]
    return worst > 1, _keys(-worst, -ranks.fillna(NOT_RANKED).mean(axis=1)), pd.Series(why, index=ranks.index)


def _reference_first(pq, ctx):
    first = wide(pq, "reference_rank", ctx.runs) == 1
    count = first.sum(axis=1)
    why = [f"reference ranked first by {', '.join(r for r in first.columns if row[r])}" for _, row in first.iterrows()]
    return count > 0, _keys(-count), pd.Series(why, index=first.index)


def _subset_rank(pq, ctx):
    ranks = wide(pq, "subset_rank", ctx.runs)
    worst, who = ranks.max(axis=1), ranks.fillna(0).idxmax(axis=1)
    why = [f"target at rank {_int(v)} within its img_set ({w})" for v, w in zip(worst, who)]
    return worst > 1, _keys(-worst, -ranks.mean(axis=1)), pd.Series(why, index=ranks.index)


def _int(v: float) -> str:
    return str(int(v)) if v == v else "n/a"


def _missed_gt(pq, ctx):
    found = wide(pq, "gt_found@10", ctx.runs)
    n_gt = wide(pq, "n_gt", ctx.runs).reindex(found.index)
    missed = np.minimum(n_gt, 10) - found
    most, who = missed.max(axis=1), missed.fillna(-1).idxmax(axis=1)
    why = [
        f"{_int(m)} of min({_int(n)}, 10) ground truths missed in the top 10 ({w})"
        for m, n, w in zip(most, n_gt.max(axis=1), who)
    ]
    return most > 0, _keys(-most, -missed.mean(axis=1)), pd.Series(why, index=found.index)


def _hard_negative(pq, ctx):
    hn = wide(pq, "hard_negative@1", ctx.runs)
    count = hn.sum(axis=1)
    sub = pq.groupby("query_id")["subcategory"].first().reindex(hn.index) if "subcategory" in pq else None
    why = [
        f"hard negative at rank 1 for {', '.join(r for r in hn.columns if row[r] == 1)}"
        + (f" ({s})" if isinstance(s, str) else "")
        for (_, row), s in zip(hn.iterrows(), sub if sub is not None else [None] * len(hn))
    ]
    return count > 0, _keys(-count), pd.Series(why, index=hn.index)


def _worst_instances(pq, ctx):
    p = wide(pq, ctx.primary, ctx.runs)
    mean = p.mean(axis=1)
    instance = pq.groupby("query_id")["instance"].first().reindex(p.index).astype(str)
    inst_mean = mean.groupby(instance).transform("mean")
    why = [
        f"instance {i}: mean {ctx.primary} {_fmt(m)} (this query {_fmt(v)})"
        for i, m, v in zip(instance, inst_mean, mean)
    ]
    return mean.notna(), _keys(inst_mean, instance.rank(method="dense"), mean), pd.Series(why, index=p.index)


SORT_FUNCTIONS: dict[str, SortFn] = {
    "worst": _worst,
    "all_fail": _all_fail,
    "rerank_helped": _rerank(True),
    "rerank_hurt": _rerank(False),
    "shortcut": _shortcut,
    "negatives": _negatives,
    "spread": _spread,
    "two_image": _two_image,
    "target_rank": _target_rank,
    "reference_first": _reference_first,
    "subset_rank": _subset_rank,
    "missed_gt": _missed_gt,
    "hard_negative": _hard_negative,
    "worst_instances": _worst_instances,
}


def _sort_function(name: str, ctx: SortContext) -> SortFn:
    if name.startswith(DIFF_PREFIX):
        return _diff(*split_diff(name))
    extra = ctx.family.views().extra_sorts
    if name in extra:
        return resolve_ref(extra[name][1], f"metric family {ctx.family.name!r} sort {name!r}")
    return SORT_FUNCTIONS[name]


def sort_rows(
    rows: pd.DataFrame,
    per_query: pd.DataFrame | None,
    name: str,
    ctx: SortContext,
    choices: Sequence[SortChoice] | None = None,
    memo: dict | None = None,
) -> tuple[pd.DataFrame, str]:
    """Order (and for failure sorts, keep only the failing) `rows` of the query table by sort `name`.

    Returns (rows with a `why` column, a sentence about the sort). Ties keep benchmark order.
    `memo` (optional): the sorts' (keep, key, why) by name, valid while `per_query` is the same.
    """
    name = check_sort(name, ctx, choices)
    rows = rows.copy()
    rows["why"] = ""
    if name == "order":
        return rows, ""
    if per_query is None or not len(per_query):
        raise ServiceError("failure sorts need per-query results of the runs (none are loaded)")
    fn = _sort_function(name, ctx)
    if memo is not None and name in memo:
        keep, key, why = memo[name]
    else:
        keep, key, why = fn(per_query, ctx)
        if memo is not None:
            memo[name] = keep, key, why
    ids = rows["query_id"]
    rows["why"] = why.reindex(ids).fillna("").to_numpy()
    mask = keep.reindex(ids).fillna(False).astype(bool).to_numpy()
    order = key.reindex(ids).reset_index(drop=True)
    order["pos"] = np.arange(len(rows))
    order = order[mask].sort_values(list(order.columns), kind="stable")
    return rows.iloc[order["pos"].to_numpy()], sort_label(name, ctx)
