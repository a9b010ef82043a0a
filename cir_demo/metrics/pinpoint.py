"""PinPoint metrics, number for number as the official `evaluate.py` computes them.

Per query, at each cutoff k (hits = ranked items, duplicates included, that are
members of the positive list):

- precision@k = hits in the top k / k
- recall@k = hits in the top k / len(positives)
- AP@k = (sum of precision@i over ranks i <= k holding a positive) / min(len(positives), k)
- NegRecall@k = explicit negatives in the top k / min(len(negatives), k)
- AP@k_noNeg = AP@k of the ranking with every explicit negative removed (order kept)

All of these are 0 when the query has no positives (NegRecall: no negatives).
Denominators use the judgment lists as given, duplicates included, like the
official code. A query whose ranking is empty counts as matched
(`total_queries`) but is left out of every mean; a query missing from the run
is left out altogether.

Linguistic sensitivity (official): queries are grouped by their reference
images (first, second or None); in each group with two or more scored queries
take max - min (and the population std) of precision@10; average over groups.
Because the key is the images only, one group can mix different intents that
share a reference image (many single-image intents reuse an image).
`ling_sens_paraphrase_range/_std` is the paper's variant: the same statistics of
AP@10 over the paraphrases of one intent (`Query.group_id`).
"""

from __future__ import annotations

from itertools import chain, islice
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from cir_demo.benchmarks.schema import Query
from cir_demo.metrics import check_ks, duplicate_count, evaluator, matched_rankings, plain_mean, warn_coverage

KS = (1, 5, 10, 50)

# The official evaluate.py column order (its CSV header).
OFFICIAL_COLUMNS = [
    "model",
    "precision@1",
    "precision@10",
    "NegRecall@10",
    "mAP@10",
    "mAP@10_noNeg",
    "delta_mAP@10_noNeg",
    "pct_increase_mAP@10_noNeg",
    "ling_sens_range",
    "total_queries",
    "mAP@1",
    "mAP@5",
    "mAP@50",
    "mAP@1_noNeg",
    "mAP@5_noNeg",
    "mAP@50_noNeg",
    "NegRecall@1",
    "NegRecall@5",
    "NegRecall@50",
    "precision@5",
    "precision@50",
    "recall@1",
    "recall@5",
    "recall@10",
    "recall@50",
    "ling_sens_std",
]

EXTRA_COLUMNS = [
    "n_queries_total",  # queries in the benchmark
    "coverage",  # total_queries / n_queries_total
    "n_scored",  # matched queries with a non-empty ranking (the ones every mean is over)
    "n_empty_rankings",  # matched queries with an empty ranking
    "n_queries_with_duplicates",  # scored queries whose ranking repeats an id
    "n_duplicate_items",  # repeated entries over all rankings
    "ling_sens_paraphrase_range",  # paper variant: AP@10 max - min within a paraphrase group
    "ling_sens_paraphrase_std",
    "n_ling_sens_groups",  # image-key groups with >= 2 scored queries (official variant)
    "n_paraphrase_groups",  # paraphrase groups with >= 2 scored queries (paper variant)
]

# Per-query columns worth a breakdown, in display order (mean of AP@k is mAP@k).
HEADLINE_METRICS = ["precision@1", "precision@10", "AP@10", "AP@10_noNeg", "NegRecall@10", "recall@10"]


def _judgment_flags(
    rankings: Sequence[Sequence[str]],
    pos_sets: Sequence[frozenset],
    neg_sets: Sequence[frozenset],
    width: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positive and negative flags of the ranked items, read in one pass.

    Returns (pos, neg, pos_no_neg), boolean (n, width) matrices: pos[i, j] /
    neg[i, j] say whether the item at rank j+1 of ranking i is in the positive
    / negative list; pos_no_neg is pos for the ranking with its negatives
    removed. Rankings shorter than `width` are padded with misses.

    Removing negatives pulls items from beyond the cutoff, so a ranking that
    is longer than `width` and has negatives in its head is read further, just
    far enough to refill the head.
    """
    codes_per_row: list[list[int]] = []
    for ranking, pos, neg in zip(rankings, pos_sets, neg_sets):
        # code bit 0: positive, bit 1: negative, bit 2: a real item (not padding)
        codes = [4 | (item in pos) | ((item in neg) << 1) for item in islice(ranking, width)]
        n_neg_in_head = sum(c >> 1 & 1 for c in codes) if len(ranking) > width and neg else 0
        if n_neg_in_head:
            refill = islice((item for item in islice(ranking, width, None) if item not in neg), n_neg_in_head)
            codes.extend(4 | (item in pos) for item in refill)
        codes_per_row.append(codes)

    n = len(codes_per_row)
    full_width = max([width, *map(len, codes_per_row)])
    flat = np.zeros((n, full_width), dtype=np.int8)
    lengths = np.fromiter(map(len, codes_per_row), dtype=np.int64, count=n)
    rows = np.repeat(np.arange(n), lengths)
    cols = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    flat[rows, cols] = np.fromiter(chain.from_iterable(codes_per_row), dtype=np.int8, count=len(rows))

    is_item, is_pos, is_neg = (flat & 4) > 0, (flat & 1) > 0, (flat & 2) > 0
    # Compact the kept (non-negative) items to the left, order preserved.
    kept = is_item & ~is_neg
    kept_rank = np.cumsum(kept, axis=1) - 1
    take = kept & (kept_rank < width)
    pos_no_neg = np.zeros((n, width), dtype=bool)
    r, c = np.nonzero(take)
    pos_no_neg[r, kept_rank[r, c]] = is_pos[r, c]
    return is_pos[:, :width], is_neg[:, :width], pos_no_neg


def _precision_terms_cumsum(hits: np.ndarray) -> np.ndarray:
    """Running sum over ranks of precision@i at each rank i that holds a hit.

    Summed left to right, so the sum equals the official per-query loop bit for bit.
    """
    ranks = np.arange(1, hits.shape[1] + 1)
    precision_at_hit = np.where(hits, np.cumsum(hits, axis=1) / ranks, 0.0)
    return np.cumsum(precision_at_hit, axis=1)


def _ranking_metrics(hits: np.ndarray, n_pos: np.ndarray, ks: Sequence[int]) -> dict[str, np.ndarray]:
    """precision@k, recall@k and AP@k for every row of a hit matrix (width >= max(ks))."""
    hit_counts = np.cumsum(hits, axis=1)
    ap_sums = _precision_terms_cumsum(hits)
    has_pos = n_pos > 0
    safe_pos = np.where(has_pos, n_pos, 1)
    out = {}
    for k in ks:
        h = hit_counts[:, k - 1]
        out[f"precision@{k}"] = np.where(has_pos, h / k, 0.0)
        out[f"recall@{k}"] = np.where(has_pos, h / safe_pos, 0.0)
        out[f"AP@{k}"] = np.where(has_pos, ap_sums[:, k - 1] / np.minimum(safe_pos, k), 0.0)
    return out


def per_query(
    run: Mapping[str, Sequence[str]],
    queries: Sequence[Query],
    ks: Sequence[int] = KS,
    results_key: Callable[[str], str] | None = None,
) -> pd.DataFrame:
    """One row per query of `queries` that has an entry in `run` (in the order of `queries`).

    `results_key` maps a query id to its key in `run` (e.g. the benchmark's
    `results_key`, which writes PinPoint's `query_00001` as `00001`); by
    default the run is keyed by query id.

    Columns: query_id, group_id, ref1, ref2 (None for single-image queries),
    scored (the ranking is non-empty), n_retrieved, n_pos, n_neg,
    n_duplicates, then precision@k, recall@k, AP@k, AP@k_noNeg, NegRecall@k for
    each k. Metric values are NaN on rows that are not scored.
    """
    ks = check_ks(ks)
    width = ks[-1]
    matched, rankings = matched_rankings(run, queries, results_key)

    # Paraphrases share one Judgments object: build each membership set once.
    set_cache: dict[int, tuple[frozenset, frozenset]] = {}
    pos_sets, neg_sets = [], []
    for q in matched:
        sets = set_cache.get(id(q.judgments))
        if sets is None:
            sets = set_cache[id(q.judgments)] = (frozenset(q.positives), frozenset(q.negatives))
        pos_sets.append(sets[0])
        neg_sets.append(sets[1])

    n_pos = np.array([len(q.positives) for q in matched], dtype=np.int64)
    # official denominator: the list as given, null entries included (Judgments.n_null_negatives)
    n_neg = np.array([q.judgments.negative_list_length for q in matched], dtype=np.int64)
    scored = np.array([len(r) > 0 for r in rankings], dtype=bool)

    pos_hits, neg_hits, pos_hits_no_neg = _judgment_flags(rankings, pos_sets, neg_sets, width)

    with_neg = _ranking_metrics(pos_hits, n_pos, ks)
    without_neg = _ranking_metrics(pos_hits_no_neg, n_pos, ks)
    neg_counts = np.cumsum(neg_hits, axis=1)
    has_neg = n_neg > 0
    safe_neg = np.where(has_neg, n_neg, 1)

    columns: dict[str, object] = {
        "query_id": [q.query_id for q in matched],
        "group_id": [q.group_id for q in matched],
        "ref1": [q.reference_ids[0] for q in matched],
        "ref2": [q.reference_ids[1] if len(q.reference_ids) > 1 else None for q in matched],
        "scored": scored,
        "n_retrieved": np.array([len(r) for r in rankings], dtype=np.int64),
        "n_pos": n_pos,
        "n_neg": n_neg,
        "n_duplicates": np.array([duplicate_count(r) for r in rankings], dtype=np.int64),
    }
    for k in ks:
        columns[f"precision@{k}"] = with_neg[f"precision@{k}"]
    for k in ks:
        columns[f"recall@{k}"] = with_neg[f"recall@{k}"]
    for k in ks:
        columns[f"AP@{k}"] = with_neg[f"AP@{k}"]
    for k in ks:
        columns[f"AP@{k}_noNeg"] = without_neg[f"AP@{k}"]
    for k in ks:
        columns[f"NegRecall@{k}"] = np.where(has_neg, neg_counts[:, k - 1] / np.minimum(safe_neg, k), 0.0)

    df = pd.DataFrame(columns)
    metric_cols = [c for c in df.columns if "@" in c]
    df.loc[~scored, metric_cols] = np.nan
    return df


def _ks_of(per_query_df: pd.DataFrame) -> list[int]:
    return sorted(int(c.split("@")[1]) for c in per_query_df.columns if c.startswith("precision@"))


def _sensitivity(values: np.ndarray, keys: list) -> tuple[float, float, int]:
    """Mean over key groups with >= 2 values of (max - min) and of the population std.

    Groups are visited in first-appearance order and each std is `np.std` of
    the group's values in row order, as the official loop does.
    """
    grouped: dict = {}
    for key, value in zip(keys, values):
        grouped.setdefault(key, []).append(value)
    groups = [scores for scores in grouped.values() if len(scores) > 1]
    ranges = [max(scores) - min(scores) for scores in groups]
    return plain_mean(np.array(ranges)), plain_mean(_stds(groups)), len(ranges)


def _stds(groups: list[list[float]]) -> np.ndarray:
    """`[np.std(g) for g in groups]`, bit for bit, with groups of 2 to 7 values done together.

    np.std sums a short array left to right, divides by n, then sums the squared deviations
    left to right; the columns of a (groups, n) matrix added in that order give the same
    floats. Groups of 8 or more (numpy sums them pairwise) go through np.std itself.
    """
    out = np.empty(len(groups))
    by_size: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        if len(g) < 8:
            by_size.setdefault(len(g), []).append(i)
        else:
            out[i] = np.std(g)
    for n, rows in by_size.items():
        m = np.array([groups[i] for i in rows], dtype=float)
        mean = _running_sum(m) / n
        dev = m - mean[:, None]
        out[rows] = np.sqrt(_running_sum(dev * dev) / n)
    return out


def _running_sum(m: np.ndarray) -> np.ndarray:
    """0.0 + m[:, 0] + m[:, 1] + ..., left to right (numpy's order for fewer than 8 values)."""
    total = np.zeros(m.shape[0])
    for j in range(m.shape[1]):
        total = total + m[:, j]
    return total


def aggregate(per_query_df: pd.DataFrame, n_queries_total: int) -> dict:
    """Official aggregates (every column of OFFICIAL_COLUMNS but `model`) plus EXTRA_COLUMNS.

    Means are plain means over the scored rows (0.0 when none). Columns of a
    cutoff that `per_query` did not compute are absent; the @10 summaries and
    linguistic sensitivity are NaN when 10 is not among the cutoffs. Warns
    (CoverageWarning) when the run covers fewer than `n_queries_total` queries.
    """
    df = per_query_df
    matched = len(df)
    scored = df[df["scored"].to_numpy(dtype=bool)]
    ks = _ks_of(df)
    out: dict = {"total_queries": matched}
    for k in ks:
        out[f"mAP@{k}"] = plain_mean(scored[f"AP@{k}"].to_numpy())
        out[f"mAP@{k}_noNeg"] = plain_mean(scored[f"AP@{k}_noNeg"].to_numpy())
        out[f"precision@{k}"] = plain_mean(scored[f"precision@{k}"].to_numpy())
        out[f"recall@{k}"] = plain_mean(scored[f"recall@{k}"].to_numpy())
        out[f"NegRecall@{k}"] = plain_mean(scored[f"NegRecall@{k}"].to_numpy())

    if 10 in ks:
        delta = out["mAP@10_noNeg"] - out["mAP@10"]
        out["delta_mAP@10_noNeg"] = delta
        out["pct_increase_mAP@10_noNeg"] = delta / out["mAP@10"] if out["mAP@10"] > 0 else 0.0
        # The official key skips rows without a first image; a single-image query has ref2 None.
        # Columns as Python lists first: iterating an Arrow-backed column yields the same values far more slowly.
        with_image = scored[np.array([bool(r) for r in scored["ref1"].to_numpy().tolist()], dtype=bool)]
        image_keys = [
            (a, b if type(b) is str else None if pd.isna(b) else b)
            for a, b in zip(with_image["ref1"].to_numpy().tolist(), with_image["ref2"].to_numpy().tolist())
        ]
        ls_range, ls_std, n_ls = _sensitivity(with_image["precision@10"].to_numpy(), image_keys)
        pp_range, pp_std, n_pp = _sensitivity(scored["AP@10"].to_numpy(), scored["group_id"].to_numpy().tolist())
    else:
        out["delta_mAP@10_noNeg"] = out["pct_increase_mAP@10_noNeg"] = np.nan
        ls_range = ls_std = pp_range = pp_std = np.nan
        n_ls = n_pp = 0
    out["ling_sens_range"] = ls_range
    out["ling_sens_std"] = ls_std

    ordered = {c: out[c] for c in OFFICIAL_COLUMNS if c in out}
    ordered.update({c: v for c, v in out.items() if c not in ordered})
    ordered.update(
        {
            "n_queries_total": int(n_queries_total),
            "coverage": warn_coverage("PinPoint", matched, n_queries_total),
            "n_scored": int(len(scored)),
            "n_empty_rankings": int(matched - len(scored)),
            "n_queries_with_duplicates": int((scored["n_duplicates"] > 0).sum()),
            "n_duplicate_items": int(scored["n_duplicates"].sum()),
            "ling_sens_paraphrase_range": pp_range,
            "ling_sens_paraphrase_std": pp_std,
            "n_ling_sens_groups": n_ls,
            "n_paraphrase_groups": n_pp,
        }
    )
    return ordered


evaluate = evaluator(per_query, aggregate)
