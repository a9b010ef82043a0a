"""Metric families: how the runs of a benchmark are scored, summarised and shown.

A benchmark names its family (`Benchmark.metric_family`); the family names the metrics module
whose `per_query` and `aggregate` reproduce the official evaluator (imported only when scoring,
so this table stays plain data), the official CSV columns, the headline metrics that get
confidence intervals, and the per-query metrics the app shows under each ranking.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from cir_demo.utils.names import lookup

MetricFamilyName = Literal["pinpoint", "circo", "edir", "cirr", "fashioniq", "icir"]


@dataclass(frozen=True)
class MetricFamily:
    """How runs of one benchmark family are scored and summarised."""

    name: str
    module: str  # a cir_demo.metrics module with per_query(run, queries) and aggregate(per_query)
    official_columns: str  # attribute of `module` listing the official CSV columns
    # per-query column -> aggregate name, for the metrics that get CIs and breakdowns
    headline: Mapping[str, str]
    primary: str  # per-query column used for paired comparisons and sorting
    shown: tuple[str, ...]  # per-query columns the app shows for one ranking
    shown_kwargs: Mapping[str, Any] = field(default_factory=dict)  # per_query arguments enough for `shown`

    def metrics_module(self):
        return importlib.import_module(self.module)

    def official(self) -> list[str]:
        return list(getattr(self.metrics_module(), self.official_columns))


FAMILIES: dict[str, MetricFamily] = {f.name: f for f in (
    MetricFamily(
        name="pinpoint",
        module="cir_demo.metrics.pinpoint",
        official_columns="OFFICIAL_COLUMNS",
        headline={
            "AP@10": "mAP@10",
            "precision@10": "precision@10",
            "recall@10": "recall@10",
            "NegRecall@10": "NegRecall@10",
            "AP@10_noNeg": "mAP@10_noNeg",
        },
        primary="AP@10",
        shown=("AP@10", "precision@10", "NegRecall@10"),
        shown_kwargs={"ks": (10,)},
    ),
    MetricFamily(
        name="circo",
        module="cir_demo.metrics.circo",
        official_columns="OFFICIAL_COLUMNS",
        headline={"AP@5": "mAP@5", "AP@10": "mAP@10", "AP@25": "mAP@25", "AP@50": "mAP@50", "Recall@10": "Recall@10"},
        primary="AP@10",
        shown=("AP@10", "AP@25", "Recall@10"),
    ),
    MetricFamily(
        name="edir",
        module="cir_demo.metrics.edir",
        official_columns="OFFICIAL_COLUMNS",
        headline={"Recall@1": "Recall@1", "Recall@3": "Recall@3", "hard_negative@1": "hard_negative@1"},
        primary="Recall@1",
        shown=("Recall@1", "Recall@3", "hard_negative@1"),
    ),
    MetricFamily(
        name="cirr",
        module="cir_demo.metrics.cirr",
        official_columns="OFFICIAL_COLUMNS",
        headline={"Recall@1": "Recall@1", "Recall@5": "Recall@5", "Recall@10": "Recall@10", "Recall@50": "Recall@50",
                  "Recall_subset@1": "Recall_subset@1"},
        primary="Recall@1",
        shown=("Recall@1", "Recall@10", "Recall_subset@1"),
    ),
    MetricFamily(
        name="fashioniq",
        module="cir_demo.metrics.fashioniq",
        official_columns="OFFICIAL_COLUMNS",
        headline={"Recall@10": "Recall@10_pooled", "Recall@50": "Recall@50_pooled"},
        primary="Recall@10",
        shown=("Recall@10", "Recall@50"),
    ),
    MetricFamily(
        name="icir",
        module="cir_demo.metrics.icir",
        official_columns="OFFICIAL_COLUMNS",
        headline={"AP": "mAP"},
        primary="AP",
        shown=("AP",),
    ),
)}


def metric_family(name: str) -> MetricFamily:
    """The family called `name` (unknown names get a "did you mean")."""
    return lookup("metric family", name, FAMILIES)
