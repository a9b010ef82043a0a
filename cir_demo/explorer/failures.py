"""Failure measures per query from several runs' per-query metrics, and the failure sorts."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from cir_demo.benchmarks.registry import RERANK_SUFFIX
from cir_demo.explorer.config import SORTS, ServiceError


def negatives_in_top10(neg_recall10: np.ndarray, n_neg: np.ndarray) -> np.ndarray:
    """How many explicit negatives a top 10 held, from NegRecall@10 and the negative-list length."""
    denom = np.minimum(np.asarray(n_neg, dtype=float), 10.0)
    return np.rint(np.nan_to_num(np.asarray(neg_recall10, dtype=float)) * denom).astype(int)


def failure_scores(per_query: pd.DataFrame, modality: Mapping[str, str]) -> pd.DataFrame:
    """Per-query failure measures from per-query metrics of several runs.

    `per_query`: long frame with columns run, query_id, group_id, AP@10, NegRecall@10,
    n_neg (as `--eval` writes per_query.csv); runs named `<retriever>` and optionally
    `<retriever>+rerank`. `modality`: retriever -> image/text/composed (the retrievers
    that count). Returns one row per query (index query_id) with:
    neg_top10 / neg_who (most explicit negatives in any top 10, and whose),
    spread / spread_who (largest AP@10 max - min over the paraphrases of the intent),
    mean_ap (mean AP@10 over retrievers),
    shortcut / shortcut_who / shortcut_vs (best unimodal AP@10 minus best composed AP@10),
    rerank_gain / rerank_gain_who, rerank_loss / rerank_loss_who (AP@10 after - before reranking).
    """
    names = [n for n in modality if n in set(per_query["run"])]
    if not names:
        raise ServiceError(f"no per-query results for the app's retrievers ({', '.join(modality) or 'none'})")
    base = per_query[per_query["run"].isin(names)]
    ap = base.pivot_table(index="query_id", columns="run", values="AP@10", aggfunc="first")[names]
    negr = base.pivot_table(index="query_id", columns="run", values="NegRecall@10", aggfunc="first")[names]
    n_neg = base.groupby("query_id")["n_neg"].first().reindex(ap.index)
    group = base.groupby("query_id")["group_id"].first().reindex(ap.index)
    out = pd.DataFrame(index=ap.index)
    out["group_id"] = group

    neg = pd.DataFrame({n: negatives_in_top10(negr[n].to_numpy(), n_neg.to_numpy()) for n in names}, index=ap.index)
    out["neg_top10"] = neg.max(axis=1)
    out["neg_who"] = neg.idxmax(axis=1)

    spreads = ap.groupby(group).transform(lambda s: s.max() - s.min())
    out["spread"] = spreads.max(axis=1)
    out["spread_who"] = spreads.fillna(-1.0).idxmax(axis=1)
    out["mean_ap"] = ap.mean(axis=1)

    uni = [n for n in names if modality[n] in ("image", "text")]
    comp = [n for n in names if modality[n] == "composed"]
    if uni and comp:
        out["shortcut"] = ap[uni].max(axis=1) - ap[comp].max(axis=1)
        out["shortcut_who"] = ap[uni].fillna(-1.0).idxmax(axis=1)
        out["shortcut_vs"] = ap[comp].fillna(-1.0).idxmax(axis=1)

    reranked = [n for n in names if f"{n}{RERANK_SUFFIX}" in set(per_query["run"])]
    if reranked:
        rr = per_query[per_query["run"].isin([f"{n}{RERANK_SUFFIX}" for n in reranked])]
        rr_ap = rr.pivot_table(index="query_id", columns="run", values="AP@10", aggfunc="first")
        delta = pd.DataFrame({n: rr_ap[f"{n}{RERANK_SUFFIX}"].reindex(ap.index) - ap[n] for n in reranked})
        out["rerank_gain"] = delta.max(axis=1)
        out["rerank_gain_who"] = delta.fillna(-np.inf).idxmax(axis=1)
        out["rerank_loss"] = delta.min(axis=1)
        out["rerank_loss_who"] = delta.fillna(np.inf).idxmin(axis=1)
    return out


def sort_queries(table: pd.DataFrame, scores: pd.DataFrame | None, sort: str) -> tuple[pd.DataFrame, str]:
    """Order (and for failure sorts, keep only the failing) rows of a query table.

    Returns (rows with a `why` column, a sentence about the sort). Ties keep benchmark order.
    """
    if sort not in SORTS:
        from cir_demo.utils.names import UnknownNameError

        raise UnknownNameError("sort", sort, SORTS)
    rows = table.copy()
    rows["why"] = ""
    if sort == "order":
        return rows, ""
    if scores is None:
        raise ServiceError("failure sorts need per-query results of the retrievers (none are loaded)")
    s = scores.reindex(rows["query_id"])
    s.index = rows.index

    def fmt(x: float) -> str:
        return f"{x:+.3f}" if x == x else "n/a"

    if sort == "negatives":
        keep = s["neg_top10"] > 0
        rows["key"] = -s["neg_top10"]
        rows["why"] = [f"{int(n)} explicit negative{'s' if n != 1 else ''} in the top 10 ({w})"
                       for n, w in zip(s["neg_top10"].fillna(0), s["neg_who"])]
        note = "queries with at least one explicit negative in some retriever's top 10"
    elif sort == "spread":
        keep = s["spread"] > 0
        rows["key"] = -s["spread"]
        rows["why"] = [f"AP@10 varies by {v:.3f} across paraphrases ({w})" for v, w in zip(s["spread"], s["spread_who"])]
        note = "queries whose intent's AP@10 changes with the phrasing"
    elif sort == "two_image":
        keep = rows["n_refs"] == 2
        rows["key"] = s["mean_ap"]
        rows["why"] = [f"mean AP@10 {v:.3f}" for v in s["mean_ap"]]
        note = "two-image queries, hardest first"
    elif sort in ("rerank_helped", "rerank_hurt"):
        col = "rerank_gain" if sort == "rerank_helped" else "rerank_loss"
        if col not in s:
            raise ServiceError("no reranked results to sort by: this app serves no reranker, or its reranked "
                               "results are still being computed")
        keep = s[col] > 0 if sort == "rerank_helped" else s[col] < 0
        rows["key"] = -s[col] if sort == "rerank_helped" else s[col]
        rows["why"] = [f"AP@10 {fmt(v)} after reranking ({w})" for v, w in zip(s[col], s[f"{col}_who"])]
        note = f"queries whose AP@10 {'rose' if sort == 'rerank_helped' else 'fell'} with the reranker"
    else:  # shortcut
        if "shortcut" not in s:
            raise ServiceError("the modality-shortcut sort needs an image-only or text-only retriever and a "
                               "composed one among the app's retrievers")
        keep = s["shortcut"] > 0
        rows["key"] = -s["shortcut"]
        rows["why"] = [f"{w} beats {v} by {m:.3f} AP@10" for m, w, v in zip(s["shortcut"], s["shortcut_who"], s["shortcut_vs"])]
        note = "queries where an image-only or text-only retriever beats every composed one"
    rows = rows[keep.fillna(False).to_numpy()]
    rows = rows.sort_values("key", kind="stable").drop(columns="key")
    return rows, note
