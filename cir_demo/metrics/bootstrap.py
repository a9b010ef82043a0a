"""Bootstrap confidence intervals that resample paraphrase groups, not rows.

The paraphrases of one intent share their judgments and mostly their
retrieval outcome, so rows are not independent; resampling rows would make
intervals too narrow. Each bootstrap replicate draws groups with replacement
(as many as there are) and takes the mean over all rows of the drawn groups:
sum of drawn group sums / sum of drawn group sizes. Intervals are percentile
intervals of the replicates. Everything is vectorised over replicates and
seedable (`numpy.random.default_rng(seed)`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

# Replicates per chunk: chunk * n_groups counts at most. Small on purpose: arrays of half a megabyte
# are reused by the allocator, while multi-megabyte ones are fresh memory every time, and the page
# faults cost more system time than the arithmetic (16 PinPoint-sized bootstraps: 0.38 s -> 0.004 s).
_CHUNK_CELLS = 65_536


def _as_values(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"parameter {name}: expected a 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"parameter {name}: row {bad} is {arr[bad]} (drop unscored rows before bootstrapping)")
    return arr


def _group_codes(groups, n: int) -> np.ndarray:
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"parameter groups: expected {n} labels (one per value), got shape {groups.shape}")
    codes, _ = pd.factorize(groups, use_na_sentinel=False)
    return codes


def _check_params(n_boot: int, alpha: float) -> None:
    if int(n_boot) != n_boot or n_boot < 1:
        raise ValueError(f"parameter n_boot: expected a positive integer, got {n_boot!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"parameter alpha: expected a number in (0, 1), got {alpha!r}")


def group_bootstrap_means(group_sums: np.ndarray, group_sizes: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """`n_boot` replicate means: groups drawn with replacement, mean over their rows.

    `group_sums` may be 2-D (n_groups, m): the same draws are then applied to
    m columns at once (used by the paired bootstrap), giving (n_boot, m).
    """
    n_groups = len(group_sizes)
    sums = np.asarray(group_sums, dtype=float)
    squeeze = sums.ndim == 1
    sums = sums.reshape(n_groups, -1)
    sizes = np.asarray(group_sizes, dtype=float)
    out = np.empty((n_boot, sums.shape[1]))
    both = np.column_stack([sums, sizes])
    start = 0
    for times in _draw_counts(n_groups, n_boot, seed):
        stop = start + len(times)
        totals = times @ both  # one product: the drawn sums of every column and of the sizes
        out[start:stop] = totals[:, :-1] / totals[:, -1:]
        start = stop
    return out[:, 0] if squeeze else out


# (n_groups, n_boot, seed) -> each chunk's draw counts: every bootstrap with the same seed over the same
# number of groups draws the same groups, and an eval of 10 runs asks for them hundreds of times
# (intervals of every run, every pair of runs, every breakdown value of every run), while drawing and
# counting cost 20-40 times the product. Kept as the float64 arrays the product reads (a smaller dtype
# would cost a conversion per use): 7.4 MB for the world's 928 groups.
_DRAW_MEMO: OrderedDict = OrderedDict()
_DRAW_MEMO_BYTES = 48 << 20
_DRAW_LOCK = threading.Lock()


def _draw_counts(n_groups: int, n_boot: int, seed):
    """Per chunk of replicates (`_CHUNK_CELLS`), `times[b, g]`: how often replicate b drew group g, as float64
    (exact small integers); drawn once per (n_groups, n_boot, seed) and kept while the memo has room."""
    key = (n_groups, n_boot, int(seed)) if isinstance(seed, (int, np.integer)) else None
    with _DRAW_LOCK:  # the app's threads share it
        kept = _DRAW_MEMO.get(key) if key is not None else None
        if kept is not None:
            _DRAW_MEMO.move_to_end(key)
    if kept is not None:
        return kept
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_CELLS // max(n_groups, 1))
    offsets = np.arange(min(chunk, n_boot))[:, None] * n_groups
    # counting with unit weights gives float counts directly (half the time of counting, then converting)
    ones = np.ones(min(chunk, n_boot) * n_groups)
    chunks = []
    for start in range(0, n_boot, chunk):
        m = min(start + chunk, n_boot) - start
        draws = rng.integers(0, n_groups, size=(m, n_groups))
        draws += offsets[:m]
        chunks.append(
            np.bincount(draws.ravel(), weights=ones[: m * n_groups], minlength=m * n_groups).reshape(m, n_groups)
        )
    if key is not None:
        for c in chunks:
            c.flags.writeable = False  # shared by every later caller
        with _DRAW_LOCK:
            if sum(c.nbytes for c in chunks) <= _DRAW_MEMO_BYTES:
                _DRAW_MEMO[key] = chunks
                while sum(c.nbytes for kept in _DRAW_MEMO.values() for c in kept) > _DRAW_MEMO_BYTES:
                    _DRAW_MEMO.popitem(last=False)
    return chunks


def _group_sums(values: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n_groups = int(codes.max()) + 1
    sizes = np.bincount(codes, minlength=n_groups)
    if values.ndim == 1:
        return np.bincount(codes, weights=values, minlength=n_groups), sizes
    sums = np.zeros((n_groups, values.shape[1]))  # zero columns give an empty (n_groups, 0) table
    for j in range(values.shape[1]):
        sums[:, j] = np.bincount(codes, weights=values[:, j], minlength=n_groups)
    return sums, sizes


def bootstrap_ci(
    values: np.ndarray, groups: np.ndarray, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(mean of values, lower, upper) with a (1 - alpha) percentile interval from group resampling.

    `groups` labels each value's resampling unit (the paraphrase group). No
    values gives (nan, nan, nan); NaN values are an error (drop unscored rows).
    """
    _check_params(n_boot, alpha)
    values = _as_values(values, "values")
    if values.size == 0:
        return (np.nan, np.nan, np.nan)
    codes = _group_codes(groups, values.size)
    sums, sizes = _group_sums(values, codes)
    replicates = group_bootstrap_means(sums, sizes, int(n_boot), seed)
    lo, hi = np.quantile(replicates, [alpha / 2, 1 - alpha / 2])
    return float(np.mean(values)), float(lo), float(hi)


def bootstrap_cis(
    values: np.ndarray, groups: np.ndarray, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> np.ndarray:
    """`bootstrap_ci` for each column of a (n, m) array with one shared set of draws.

    Returns (m, 3): mean, lower, upper per column; equal to calling
    `bootstrap_ci` per column with the same seed, at the cost of one call.
    """
    _check_params(n_boot, alpha)
    values = np.asarray(values, dtype=float)
    if values.ndim != 2:
        raise ValueError(f"parameter values: expected a 2-D array, got shape {values.shape}")
    if values.shape[0] == 0 or values.shape[1] == 0:
        return np.full((values.shape[1], 3), np.nan)
    for j in range(values.shape[1]):
        _as_values(values[:, j], f"values[:, {j}]")
    codes = _group_codes(groups, values.shape[0])
    sums, sizes = _group_sums(values, codes)
    replicates = group_bootstrap_means(sums, sizes, int(n_boot), seed).reshape(int(n_boot), -1)
    lo, hi = np.quantile(replicates, [alpha / 2, 1 - alpha / 2], axis=0)
    return np.stack([values.mean(axis=0), lo, hi], axis=1)


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, groups: np.ndarray, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> dict:
    """Difference mean(b) - mean(a) of two runs scored on the same queries (row i of a and b is one query).

    Each replicate draws groups once and applies the draw to both runs. Returns
    diff, lo, hi (percentile interval of the replicate differences), p_value
    (two-sided: twice the share of replicates on the far side of 0, clipped
    to 1), mean_a, mean_b, n_queries, n_groups, n_boot.
    """
    _check_params(n_boot, alpha)
    a = _as_values(a, "a")
    b = _as_values(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"parameters a and b: expected the same queries, got {a.size} and {b.size} values")
    if a.size == 0:
        nan = float("nan")
        return dict(
            diff=nan, lo=nan, hi=nan, p_value=nan, mean_a=nan, mean_b=nan, n_queries=0, n_groups=0, n_boot=int(n_boot)
        )
    codes = _group_codes(groups, a.size)
    sums, sizes = _group_sums(b - a, codes)
    diffs = group_bootstrap_means(sums, sizes, int(n_boot), seed)
    lo, hi = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    p_value = min(1.0, 2.0 * min(np.mean(diffs <= 0), np.mean(diffs >= 0)))
    return dict(
        diff=float(np.mean(b) - np.mean(a)),
        lo=float(lo),
        hi=float(hi),
        p_value=float(p_value),
        mean_a=float(np.mean(a)),
        mean_b=float(np.mean(b)),
        n_queries=int(a.size),
        n_groups=int(sizes.size),
        n_boot=int(n_boot),
    )


def scored_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The per-query rows that enter the means (the official evaluators skip empty rankings): every
    mean, interval and comparison of a run reads these, through this one function."""
    return df[df["scored"].to_numpy(dtype=bool)] if "scored" in df.columns else df


def metric_cis(
    per_query_df: pd.DataFrame, metrics: Sequence[str], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> pd.DataFrame:
    """One row per metric: metric, mean, lo, hi, n_queries, n_groups (scored rows, groups = group_id)."""
    df = scored_rows(per_query_df)
    rows = []
    for metric in metrics:
        mean, lo, hi = bootstrap_ci(df[metric].to_numpy(), df["group_id"].to_numpy(), n_boot, alpha, seed)
        rows.append(dict(metric=metric, mean=mean, lo=lo, hi=hi, n_queries=len(df), n_groups=df["group_id"].nunique()))
    return pd.DataFrame(rows, columns=["metric", "mean", "lo", "hi", "n_queries", "n_groups"])


def compare_runs(
    per_query_a: pd.DataFrame,
    per_query_b: pd.DataFrame,
    metrics: Sequence[str],
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> pd.DataFrame:
    """Paired bootstrap of run b minus run a for each metric, over the queries scored in both runs; a query
    where a metric is undefined (NaN) in either run is left out of that metric.

    One row per metric with the keys of `paired_bootstrap` plus `metric`.
    """
    a = scored_rows(per_query_a)[["query_id", "group_id", *metrics]]
    b = scored_rows(per_query_b)[["query_id", *metrics]]
    both = a.merge(b, on="query_id", suffixes=("_a", "_b"), validate="one_to_one", sort=False)
    rows = []
    for metric in metrics:
        va, vb = both[f"{metric}_a"].to_numpy(dtype=float), both[f"{metric}_b"].to_numpy(dtype=float)
        keep = np.isfinite(va) & np.isfinite(vb)
        result = paired_bootstrap(va[keep], vb[keep], both["group_id"].to_numpy()[keep], n_boot, alpha, seed)
        rows.append({"metric": metric, **result})
    return pd.DataFrame(rows)


def paired_table(
    per_query: Mapping[str, pd.DataFrame], metrics: Sequence[str], n_boot: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """`compare_runs` for every pair of runs (a before b in the mapping's order) that share a scored query,
    on the metrics both have. Rows: a, b, metric, then `paired_bootstrap`'s keys (diff = mean(b) - mean(a)).
    `per_query`: run name -> frame with query_id, group_id and the metric columns."""
    names = list(per_query)
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            fa, fb = per_query[a], per_query[b]
            shared = [m for m in metrics if m in fa.columns and m in fb.columns]
            if not shared or not set(scored_rows(fa)["query_id"]) & set(scored_rows(fb)["query_id"]):
                continue
            for row in compare_runs(fa, fb, shared, n_boot=n_boot, seed=seed).to_dict("records"):
                rows.append({"a": a, "b": b, **row})
    return pd.DataFrame(rows)
