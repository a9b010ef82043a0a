"""Metric families: how the runs of a benchmark are scored, summarised, reported and written.

A benchmark names its family (`Benchmark.metric_family`); the family names the metrics module
whose `per_query` and `aggregate` reproduce the official evaluator (imported only when scoring,
so this table stays plain data), the official CSV columns, the headline metrics that get
confidence intervals, the per-query metrics the app shows under each ranking, the results-file
format its official evaluator reads, the plots and report sections only it has, and its failure
views (the explorer's sorts, tile scope and wording: benchmarks/failure_views.py).

A new family is its metrics module plus one row of `FAMILIES`; the harness, the results files
and the app ask the row, never the family's name. Plots and report sections are
"package.module:function" references, imported when a report is written:

    plot(benchmark, evaluations, out_dir) -> {file name: path}   (PNG files written into out_dir)
    section(benchmark, evaluations, table) -> str               (markdown, "" to leave it out)
    rerank_section(benchmark, pairs, top_n, reranker_spec, n_boot, seed) -> str
                                        (markdown; pairs: (first stage, reranked) RunEvaluations)

where `evaluations` are the runs' `store.score.RunEvaluation`s and `table` is metrics.csv's
frame. Sections go after the official and extra columns; plots before the breakdown plots.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from cir_demo.utils.names import lookup, resolve_ref

MetricFamilyName = str  # a key of FAMILIES


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
    # results-file format written by default and assumed for an empty file (a cir_demo.results format)
    results_format: str = "pinpoint"
    summary: tuple[str, ...] = ()  # aggregates `--eval` prints when done (empty: the headline aggregates)
    plots: tuple[str, ...] = ()  # "module:function" plot makers only this family has (see above)
    # aggregates the app's Report shows, in order (empty: the summary, then the headline aggregates)
    report_columns: tuple[str, ...] = ()
    report_sections: tuple[str, ...] = ()  # "module:function" report sections only this family has
    # "module:function" writing the reranking section of the report (see above)
    rerank_section: str = "cir_demo.harness.pipeline:rerank_section"
    # "module:attribute" naming the family's `FailureViews` (the explorer's sorts, tile scope, wording)
    failure_views: str = "cir_demo.benchmarks.failure_views:GENERIC"
    # a per-query column whose values' own means are the official numbers, then averaged over its values
    # (FashionIQ's categories: `Recall@10/dress`, ..., `Recall@10` their mean); "" for plain means
    strata: str = ""
    strata_order: tuple[str, ...] = ()  # the strata in the official table's order (others after, sorted)
    # official averages of aggregates: (name, the aggregates averaged), with intervals and paired rows too
    averages: tuple[tuple[str, tuple[str, ...]], ...] = ()
    plot_metrics: tuple[str, ...] = ()  # per-query metrics each breakdown is plotted for (empty: the primary)

    def plotted_metrics(self) -> list[str]:
        """The per-query metrics each breakdown plot is drawn for, the first one's file named plainly."""
        return list(self.plot_metrics or (self.primary,))

    def metrics_module(self):
        return importlib.import_module(self.module)

    def official(self) -> list[str]:
        return list(getattr(self.metrics_module(), self.official_columns))

    def summary_columns(self) -> list[str]:
        return list(self.summary or self.headline.values())

    def report_aggregates(self) -> list[str]:
        """The aggregates of metrics.csv the Report shows: every headline one, with the official average
        where the family has one."""
        return list(dict.fromkeys(self.report_columns or (*self.summary_columns(), *self.headline.values())))

    def plot_makers(self) -> list:
        return [resolve_ref(ref, f"metric family {self.name!r} plot") for ref in self.plots]

    def rerank_section_maker(self):
        return resolve_ref(self.rerank_section, f"metric family {self.name!r} reranking section")

    def views(self):
        """The family's `FailureViews` (cir_demo/benchmarks/failure_views.py)."""
        return resolve_ref(self.failure_views, f"metric family {self.name!r} failure views")

    def section_makers(self) -> list:
        return [resolve_ref(ref, f"metric family {self.name!r} report section") for ref in self.report_sections]


FAMILIES: dict[str, MetricFamily] = {
    f.name: f
    for f in (
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
            summary=("mAP@10", "precision@10", "NegRecall@10", "ling_sens_paraphrase_range"),
            plots=("cir_demo.harness.plots:precision_vs_safety", "cir_demo.harness.plots:paraphrase_sensitivity"),
            report_sections=("cir_demo.harness.report:linguistic_sensitivity",),
            rerank_section="cir_demo.harness.pipeline:pinpoint_rerank_section",
            failure_views="cir_demo.benchmarks.failure_views:PINPOINT",
        ),
        MetricFamily(
            name="circo",
            module="cir_demo.metrics.circo",
            official_columns="OFFICIAL_COLUMNS",
            headline={
                "AP@5": "mAP@5",
                "AP@10": "mAP@10",
                "AP@25": "mAP@25",
                "AP@50": "mAP@50",
                "Recall@10": "Recall@10",
            },
            primary="AP@10",
            shown=("AP@5", "AP@10", "AP@25", "AP@50", "Recall@10"),
            results_format="circo",
            failure_views="cir_demo.benchmarks.failure_views:CIRCO",
        ),
        MetricFamily(
            name="edir",
            module="cir_demo.metrics.edir",
            official_columns="OFFICIAL_COLUMNS",
            headline={"Recall@1": "Recall@1", "Recall@3": "Recall@3", "hard_negative@1": "hard_negative@1"},
            primary="Recall@1",
            shown=("Recall@1", "Recall@3", "hard_negative@1"),
            failure_views="cir_demo.benchmarks.failure_views:EDIR",
        ),
        MetricFamily(
            name="cirr",
            module="cir_demo.metrics.cirr",
            official_columns="OFFICIAL_COLUMNS",
            headline={
                "Recall@1": "Recall@1",
                "Recall@5": "Recall@5",
                "Recall@10": "Recall@10",
                "Recall@50": "Recall@50",
                "Recall_subset@1": "Recall_subset@1",
                "Recall_subset@2": "Recall_subset@2",
                "Recall_subset@3": "Recall_subset@3",
            },
            primary="Recall@1",
            shown=(
                "Recall@1",
                "Recall@5",
                "Recall@10",
                "Recall@50",
                "Recall_subset@1",
                "Recall_subset@2",
                "Recall_subset@3",
            ),
            report_columns=(
                "Recall@1",
                "Recall@5",
                "Recall@10",
                "Recall@50",
                "Recall_subset@1",
                "Recall_subset@2",
                "Recall_subset@3",
                "mean(Recall@5,Recall_subset@1)",
            ),
            averages=(("mean(Recall@5,Recall_subset@1)", ("Recall@5", "Recall_subset@1")),),
            plot_metrics=("Recall@1", "Recall@5", "Recall_subset@1"),
            failure_views="cir_demo.benchmarks.failure_views:CIRR",
        ),
        MetricFamily(
            name="fashioniq",
            module="cir_demo.metrics.fashioniq",
            official_columns="OFFICIAL_COLUMNS",
            headline={"Recall@10": "Recall@10_pooled", "Recall@50": "Recall@50_pooled"},
            primary="Recall@10",
            shown=("Recall@10", "Recall@50"),
            # the official numbers average the three categories; the pooled ones (all queries) carry the intervals
            report_columns=(
                *(f"Recall@{k}/{c}" for c in ("dress", "shirt", "toptee") for k in (10, 50)),
                "Recall@10",
                "Recall@50",
                "average_recall",
                "Recall@10_pooled",
                "Recall@50_pooled",
            ),
            summary=("Recall@10", "Recall@50", "average_recall", "Recall@10_pooled"),
            plot_metrics=("Recall@10", "Recall@50"),
            strata="category",
            strata_order=("dress", "shirt", "toptee"),
            averages=(("average_recall", ("Recall@10", "Recall@50")),),
            failure_views="cir_demo.benchmarks.failure_views:FASHIONIQ",
        ),
        MetricFamily(
            name="icir",
            module="cir_demo.metrics.icir",
            official_columns="OFFICIAL_COLUMNS",
            headline={"AP": "mAP"},
            primary="AP",
            shown=("AP",),
            report_columns=("mAP", "mmAP", "minmAP"),
            failure_views="cir_demo.benchmarks.failure_views:ICIR",
        ),
    )
}


def breakdown_plot_file(fname: str, metric: str, first: bool) -> str:
    """A breakdown plot's file name: `fname` for the family's first plotted metric, the metric's name added
    for the others (`per_garment_category_recall_at_50.png`)."""
    if first:
        return fname
    slug = re.sub(r"[^a-z0-9]+", "_", metric.lower().replace("@", "_at_")).strip("_")
    return f"{fname.rsplit('.', 1)[0]}_{slug}.png"


def metric_family(name: str) -> MetricFamily:
    """The family called `name` (unknown names get a "did you mean")."""
    return lookup("metric family", name, FAMILIES)
