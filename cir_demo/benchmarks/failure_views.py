"""Failure views of each metric family: what the explorer and `python -m cir_demo failures` may
sort, mark and say for a benchmark of that family. A `MetricFamily` row names its views by a
"module:attribute" reference (`MetricFamily.failure_views`), as it names its plots.

A view lists the family's own sorts (the common ones, `COMMON_SORTS`, apply to every family), the
per-query columns those sorts read beyond the primary metric, the finer measure that breaks ties
of the primary, how the protocol scopes a ranking on the tiles, and the wording of the query's
judgments and of the per-column metrics. Which sorts have data for a loaded benchmark and its runs
is decided in cir_demo/explorer/failures.py, which implements every sort named here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from cir_demo.benchmarks.schema import Query
from cir_demo.benchmarks.scoped import gallery_of, subset_of

# Sorts every family offers (where their data exists), in menu order; `diff:A,B` is one entry per
# ordered pair of runs. Labels may name the primary metric as {primary}.
COMMON_SORTS = ("order", "worst", "all_fail", "rerank_helped", "rerank_hurt", "shortcut")
DIFF_PREFIX = "diff:"
SORT_LABELS = {
    "order": "Benchmark order",
    "worst": "Worst first (lowest mean {primary} over the runs)",
    "all_fail": "Every run fails ({primary} = 0 for all)",
    "rerank_helped": "Reranker helped most ({primary} gain)",
    "rerank_hurt": "Reranker hurt most ({primary} loss)",
    "shortcut": "Modality shortcut (image-only or text-only beats composed)",
    "negatives": "Explicit negatives in the top 10 (most first)",
    "spread": "Largest paraphrase spread ({primary} max − min)",
    "two_image": "Two-image queries (lowest {primary} first)",
    "target_rank": "Target ranked lowest (official rank, after the protocol)",
    "reference_first": "Returned the reference first (the protocol deletes it)",
    "subset_rank": "Target ranked lowest within its img_set (Recall_subset)",
    "missed_gt": "Ground truths missed in the top 10 (most first)",
    "hard_negative": "Hard negative ranked above the target (at rank 1)",
    "worst_instances": "Worst instances first (lowest instance mean AP)",
}
BENCHMARK_ORDER_ALIASES = ("benchmark",)  # `failures --sort benchmark` is the benchmark order


def diff_sort(a: str, b: str, metric: str | None = None) -> str:
    """The name of the A-vs-B sort (stable: the Report links to it); `metric`: the per-query metric it
    compares when not the primary one (`diff:A,B:Recall@5`; run names hold no ':')."""
    return f"{DIFF_PREFIX}{a},{b}" + (f":{metric}" if metric else "")


def base_sort(name: str) -> str:
    """The sort `name` is a variant of: `diff:A,B` for `diff:A,B:METRIC` (the same rows), else `name`."""
    return name.rpartition(":")[0] if name.startswith(DIFF_PREFIX) and name.count(":") > 1 else name


def diff_label(a: str, b: str, primary: str) -> str:
    return f"{a} vs {b} (largest {primary} gain of {a} over {b} first)"


@dataclass(frozen=True)
class FailureViews:
    """What the explorer offers for one metric family (see the module docstring)."""

    sorts: tuple[str, ...]  # the family's own sorts, after the common ones in the menu
    measures: tuple[str, ...] = ()  # per-query columns the sorts read, beyond the primary metric
    finer: str | None = None  # per-query column breaking ties of the primary (None: none)
    finer_lower_is_better: bool = False
    # how the protocol scopes a ranking before it is scored, shown on the tiles:
    # "reference_deleted" (CIRR), "gallery" (FashionIQ, i-CIR: images outside the query's gallery hidden)
    scope: str | None = None
    target_rank: bool = False  # single-target family: per-query `target_rank` after the protocol
    first_positive: bool = False  # several ground truths: a column says where the first one is ranked
    positive_word: str = "positive"  # the tile badge of a judged positive
    negative_word: str = "explicit negative"
    legend: Mapping[str, str] = field(default_factory=dict)  # per-column metric -> what it means
    filters: Mapping[str, str] = field(default_factory=dict)  # query meta key -> label: filters of this family
    # the family's own sorts beyond those cir_demo/explorer/failures.py implements: name -> (label,
    # "module:function"), the function (per_query, ctx) -> (keep, key, why) as failures.py's sorts
    extra_sorts: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # what a query's judgments are, in a sentence of the app's help (the family's own terms only)
    about: str = ""
    # per-query metrics the app's A-vs-B sorts also compare by, beside the primary (the headline ones papers
    # lead with; an official average of the family names its per-query mean)
    compare_by: tuple[str, ...] = ()

    def judgments_line(self, q: Query) -> str:
        """The query's judgments in the family's words (the query header's "judgments" line)."""
        if self.scope == "reference_deleted":
            members = [m for m in subset_of(q.judgments) if m not in q.reference_ids]
            return f"target {q.target_id}; img_set of {len(members)} other images (Recall_subset ranks among them)"
        gallery = gallery_of(q.judgments)
        where = f" in a gallery of {len(gallery):,} images" if gallery is not None else ""
        if self.target_rank:
            return f"target {q.target_id}{where}"
        n_pos, n_neg = len(q.positives), len(q.negatives)
        text = f"{n_pos} {self.positive_word}{'s' if n_pos != 1 else ''}"
        if self.negative_word:
            text += f", {n_neg} {self.negative_word}{'s' if n_neg != 1 else ''}"
        return text + where


GENERIC = FailureViews(sorts=())  # a family that declares none: the common sorts only
PINPOINT = FailureViews(
    about=(
        "Each query is judged exactly: **positives** satisfy the instruction; **explicit negatives** are near "
        "misses (the right item with the wrong change)."
    ),
    sorts=("negatives", "spread", "two_image"),
    measures=("NegRecall@10", "n_neg"),
    finer="precision@10",
    legend={
        "AP@10": "average precision of the top 10: 1 = every positive ranked first",
        "precision@10": "positives among the top 10, divided by 10",
        "NegRecall@10": "explicit negatives in the top 10 over min(negatives, 10): lower is better",
    },
)
CIRCO = FailureViews(
    about=(
        "Each query has several **ground truths**: every corpus image that satisfies it (CIRCO's annotators "
        "searched the whole corpus); the rest are unjudged."
    ),
    sorts=("missed_gt",),
    compare_by=("AP@25", "AP@50"),
    first_positive=True,
    measures=("n_gt", "gt_found@10"),
    finer="AP@50",
    positive_word="ground truth",
    negative_word="",
    legend={
        "AP@10": "average precision of the top 10 over min(ground truths, 10)",
        "AP@25": "average precision of the top 25 over min(ground truths, 25)",
        "Recall@10": "1 when the target image is in the top 10",
    },
)
EDIR = FailureViews(
    about="Each query has **positives** and **hard negatives** (images that miss the edit by one detail).",
    sorts=("hard_negative",),
    measures=("hard_negative@1", "subcategory"),
    finer="Recall@3",
    negative_word="hard negative",
    legend={
        "Recall@1": "share of the positives at rank 1",
        "Recall@3": "share of the positives in the top 3",
        "hard_negative@1": "1 when a hard negative is ranked first: lower is better",
    },
)
CIRR = FailureViews(
    about=(
        "Each query has one **target** image. The protocol deletes the reference image from the ranking; "
        "Recall_subset ranks the target among the query's **img_set** (a handful of similar images)."
    ),
    sorts=("target_rank", "reference_first", "subset_rank"),
    compare_by=("Recall@5", "Recall_subset@1", "mean(Recall@5,Recall_subset@1)"),
    measures=("target_rank", "subset_rank", "reference_rank"),
    finer="target_rank",
    finer_lower_is_better=True,
    scope="reference_deleted",
    target_rank=True,
    positive_word="target",
    negative_word="",  # no explicit negatives: no ✗ badge word, count or legend line
    filters={"length_category": "Caption length"},
    legend={
        "Recall@1": "1 when the target is first once the reference is deleted",
        "Recall@10": "1 when the target is in the top 10 once the reference is deleted",
        "Recall_subset@1": "1 when the target is first among the img_set members",
    },
)
FASHIONIQ = FailureViews(
    about=(
        "Each query has one **target** image in its category's gallery (dress, shirt or top); only that "
        "gallery is ranked."
    ),
    sorts=("target_rank",),
    compare_by=("Recall@50",),
    measures=("target_rank",),
    finer="target_rank",
    finer_lower_is_better=True,
    scope="gallery",
    target_rank=True,
    positive_word="target",
    negative_word="",  # no explicit negatives: no ✗ badge word, count or legend line
    filters={"category": "Category"},
    legend={
        "Recall@10": "1 when the target is in the top 10 of the category's gallery",
        "Recall@50": "1 when the target is in the top 50 of the category's gallery",
    },
)
ICIR = FailureViews(
    about="Each query names an instance; its **positives** are that instance's images in the database it ranks.",
    sorts=("worst_instances",),
    measures=("instance",),
    scope="gallery",
    filters={"instance": "Instance"},
    negative_word="",
    legend={"AP": "average precision over the instance's database (trapezoidal, as the reference code)"},
)
