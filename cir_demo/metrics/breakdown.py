"""Per-query metrics broken down by a metadata field, with group-bootstrap intervals.

`breakdown(per_query_df, meta, "skin_tone_bucket", ["AP@10"])` gives one row
per value of the field: how many scored queries and paraphrase groups carry
it, and for each metric its mean with a 95% interval from resampling the
paraphrase groups within that value. List-valued fields (CIRCO's
`semantic_aspects`) are exploded: a query counts once under each value it
lists. Queries without the field are shown under "(missing)".
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from cir_demo.benchmarks.schema import SKIN_TONE_BUCKETS, Query
from cir_demo.metrics.bootstrap import _group_codes, bootstrap_cis, scored_rows
from cir_demo.utils.names import UnknownNameError

MISSING = "(missing)"

# Display order of known categorical values; other values sort alphabetically after them.
_KNOWN_ORDERS = {
    "skin_tone_bucket": (*SKIN_TONE_BUCKETS, "UNKNOWN"),
    "length_category": ("short", "medium", "long"),
}


def query_meta_frame(queries: Iterable[Query]) -> pd.DataFrame:
    """query_id, group_id, then every meta key found on any query (first-seen order); None where absent."""
    queries = list(queries)
    keys: dict[str, None] = {}
    for q in queries:
        keys.update(dict.fromkeys(q.meta))
    data = {"query_id": [q.query_id for q in queries], "group_id": [q.group_id for q in queries]}
    for key in keys:
        if key in data:  # a meta key may not shadow the identifying columns
            continue
        column = [q.meta.get(key) for q in queries]
        if not set(map(type, column)) <= _SCALARS:  # lists only in some fields (CIRCO's semantic_aspects)
            column = [_plain(v) for v in column]
        data[key] = pd.Series(column, dtype=object)
    return pd.DataFrame(data)


_SCALARS = {str, bool, int, float, type(None)}


def _plain(value):
    """Lists and tuples as tuples (hashable, explodable); everything else unchanged."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(value)
    return value


def _is_missing(value) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _sort_key(field: str, value):
    if value == MISSING:
        return (2, 0, "")
    known = _KNOWN_ORDERS.get(field, ())
    if value in known:
        return (0, known.index(value), "")
    return (1, 0, str(value))


def _with_field(per_query_df: pd.DataFrame, meta: pd.DataFrame | None, field: str) -> pd.DataFrame:
    if meta is not None and field in meta.columns:
        if "query_id" not in meta.columns:
            raise ValueError("parameter meta: needs a query_id column")
        base = per_query_df.drop(columns=[field], errors="ignore")
        return base.merge(meta[["query_id", field]], on="query_id", how="left", validate="many_to_one")
    if field in per_query_df.columns:
        return per_query_df
    available = [c for c in (meta.columns if meta is not None else []) if c not in ("query_id", "group_id")]
    raise UnknownNameError("breakdown field", field, available or list(per_query_df.columns))


_LISTS = (list, tuple, set, np.ndarray)


def _value_pairs(cells: np.ndarray) -> tuple[np.ndarray, list]:
    """(row, value) pairs of a field's cells: a list-valued cell gives one pair per listed value,
    an empty list one MISSING pair; missing values (None, NaN, NA) become MISSING."""
    if not any(issubclass(t, _LISTS) for t in set(map(type, cells))):
        # scalars only (every PinPoint field): one pair per row, missing ones found in one pass
        keys = cells.copy()
        keys[pd.isna(cells)] = MISSING
        return np.arange(len(cells), dtype=np.int64), keys.tolist()
    rows_of, keys = [], []
    for i, v in enumerate(cells):
        if isinstance(v, _LISTS):
            listed = list(v) or [None]
            rows_of += [i] * len(listed)
            keys += [MISSING if _is_missing(x) else x for x in listed]
        else:
            rows_of.append(i)
            keys.append(v if type(v) is str or type(v) is bool else MISSING if _is_missing(v) else v)
    return np.asarray(rows_of, dtype=np.int64), keys


def breakdown(
    per_query_df: pd.DataFrame,
    meta: pd.DataFrame | None,
    field: str,
    metrics: Sequence[str],
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """One row per value of `field` over the scored rows of `per_query_df`.

    `meta` is a frame with query_id and the field (see `query_meta_frame`);
    when None the field is read from `per_query_df` itself. Columns: field,
    value, n_queries, n_groups, then for each metric `<metric>`, `<metric>_lo`,
    `<metric>_hi` (mean and (1 - alpha) group-bootstrap interval).
    """
    missing_metrics = [m for m in metrics if m not in per_query_df.columns]
    if missing_metrics:
        raise UnknownNameError("metric", missing_metrics[0], [c for c in per_query_df.columns if "@" in c])
    rows, values, group_codes = scored_arrays(_with_field(per_query_df, meta, field), metrics)
    return field_breakdown(field, rows[field].to_numpy(dtype=object), values, group_codes, metrics, n_boot, seed, alpha)


def scored_arrays(per_query_df: pd.DataFrame, metrics: Sequence[str]) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """What `field_breakdown` reads of a run: its scored rows (all without a `scored` column), their
    metrics' values (rows x metrics) and their paraphrase-group codes."""
    rows = scored_rows(per_query_df)
    values = rows[list(metrics)].to_numpy(dtype=float).reshape(len(rows), len(metrics))
    return rows, values, _group_codes(rows["group_id"].to_numpy(), len(rows))


def field_breakdown(
    field: str,
    cells: np.ndarray,
    values: np.ndarray,
    group_codes: np.ndarray,
    metrics: Sequence[str],
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
    run: str | None = None,
) -> pd.DataFrame:
    """`breakdown`'s table from arrays of the scored rows: the field's cells (object), the metrics'
    values (rows x metrics) and the rows' paraphrase-group codes. A caller that breaks one run down by
    several fields selects these once (`harness.report.breakdown_parts`); `run` adds a first column."""
    rows_of, keys = _value_pairs(cells)
    codes, uniques = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=False)
    columns = ["field", "value", "n_queries", "n_groups"]
    for metric in metrics:
        columns += [metric, f"{metric}_lo", f"{metric}_hi"]
    table: dict[str, list] = {c: [] for c in columns}
    for code in sorted(range(len(uniques)), key=lambda c: _sort_key(field, uniques[c])):
        idx = rows_of[codes == code]
        groups = group_codes[idx]
        for column, cell in zip(columns, (field, uniques[code], len(idx), len(np.unique(groups)))):
            table[column].append(cell)
        if n_boot == 0:  # intervals disabled (--n-boot 0): means only
            means = values[idx].mean(axis=0) if len(idx) else np.full(values.shape[1], np.nan)
            cis = [(m, np.nan, np.nan) for m in means]
        else:
            cis = bootstrap_cis(values[idx], groups, n_boot, alpha, seed)
        for metric, (mean, lo, hi) in zip(metrics, cis):
            table[metric].append(float(mean))
            table[f"{metric}_lo"].append(float(lo))
            table[f"{metric}_hi"].append(float(hi))
    if not table["field"]:  # no scored row: the columns, with the types of a frame made from no rows
        frame = pd.DataFrame([], columns=columns)
        if run is not None:
            frame.insert(0, "run", run)
        return frame
    if run is not None:
        table = {"run": [run] * len(table["field"]), **table}
    return pd.DataFrame(table)


def all_breakdowns(
    per_query_df: pd.DataFrame,
    meta: pd.DataFrame,
    fields: Sequence[str],
    metrics: Sequence[str],
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """`breakdown` for each field that `meta` has (others skipped), stacked into one frame."""
    frames = [breakdown(per_query_df, meta, f, metrics, n_boot, seed) for f in fields if f in meta.columns]
    if not frames:
        return pd.DataFrame(columns=["field", "value", "n_queries", "n_groups"])
    return pd.concat(frames, ignore_index=True)
