"""The query table of a benchmark and the Explore tab's text search and filters."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from cir_demo.benchmarks.schema import SKIN_TONE_BUCKETS, Benchmark
from cir_demo.benchmarks.scoped import subset_of
from cir_demo.explorer.config import FILTER_FIELDS, NO_VALUE, SINGLE_LABELS, SKIN_TONE_LABELS, ServiceError


def query_table(benchmark: Benchmark, fields: Mapping[str, str] = FILTER_FIELDS) -> pd.DataFrame:
    """One row per query: query_id, group_id, instruction, n_refs, n_negatives, n_subset (CIRR's img_set
    members), the filter `fields` (meta key -> label), paraphrase index."""
    rows = []
    position: dict[str, int] = {}
    for q in benchmark.queries:
        idx = position.get(q.group_id, 0)
        position[q.group_id] = idx + 1
        row = {
            "query_id": q.query_id,
            "group_id": q.group_id,
            "instruction": q.instruction,
            "n_refs": len(q.reference_ids),
            "n_negatives": len(q.negatives),
            "n_subset": len(subset_of(q.judgments)),
            "paraphrase": idx,
        }
        for key in fields:
            row[key] = filter_value(key, q.meta.get(key))
        rows.append(row)
    return pd.DataFrame(
        rows,
        columns=["query_id", "group_id", "instruction", "n_refs", "n_negatives", "n_subset", "paraphrase", *fields],
    )


NOT_FILTERS = ("query_id", "group_id", "instruction", "n_refs", "n_negatives", "n_subset", "paraphrase")


def filter_value(key: str, value: Any) -> str:
    """The label a meta value has in the filters (every value becomes a string)."""
    if key == "is_single" and value is not None:
        return SINGLE_LABELS[bool(value)]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NO_VALUE
    if key == "skin_tone_bucket":
        return SKIN_TONE_LABELS.get(str(value), str(value))
    return str(value)


def filter_choices(table: pd.DataFrame, fields: Mapping[str, str] = FILTER_FIELDS) -> dict[str, list[str]]:
    """Values present for each filter field (fields with a single value are left out)."""
    out = {}
    for key in fields:
        values = [v for v in table[key].unique()]
        if len(values) < 2 and NO_VALUE in values:
            continue
        order = (
            {SKIN_TONE_LABELS.get(v, v): i for i, v in enumerate(SKIN_TONE_BUCKETS)}
            if key == "skin_tone_bucket"
            else {}
        )
        out[key] = sorted(values, key=lambda v: (v == NO_VALUE, order.get(v, len(order)), v))
    return out


def filter_queries(
    table: pd.DataFrame, text: str = "", filters: Mapping[str, str | None] | None = None
) -> pd.DataFrame:
    """Rows whose instruction or ids contain every word of `text` (case-insensitive) and
    that match every filter (None or "" = any)."""
    mask = np.ones(len(table), dtype=bool)
    for key, value in (filters or {}).items():
        if value in (None, "", "any"):
            continue
        if key not in table:
            known = [c for c in table.columns if c not in NOT_FILTERS]
            raise ServiceError(f"unknown filter {key!r}; filters: {', '.join(known)}")
        mask &= (table[key] == value).to_numpy()
    words = [w for w in (text or "").lower().split() if w]
    if words:
        hay = (
            table["instruction"].str.lower() + " " + table["query_id"].str.lower() + " " + table["group_id"].str.lower()
        ).to_numpy()
        for w in words:
            mask &= np.array([w in h for h in hay], dtype=bool)
    return table[mask]
