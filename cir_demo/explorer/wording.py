"""What the Explore tab says about the loaded benchmark, in its metric family's words: the help
("What am I looking at?") and the filters' label. Only terms that apply to what is loaded: the
world's scenes and models on the world, explicit negatives and NegRecall where the family has them
(PinPoint's), a target and its protocol on CIRR and FashionIQ; the family row
(`benchmarks.families`) and its failure views (`FailureViews.about`, `.legend`, words) say which.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from cir_demo.benchmarks.failure_views import FailureViews
from cir_demo.benchmarks.families import MetricFamily

WORLD = "world"
WORLD_TEXT = (
    "By default the *offline world*: procedurally rendered product scenes (accessories, fashion and home items in "
    "colours, materials and patterns, on backgrounds) with composed queries: a reference image, or two, plus an "
    "instruction such as “this handbag in a neutral colour”, each intent written in six phrasings. The world "
    "models (world-CLIP, world-CIR, the world verifier) were trained here only on such scenes. The app can also "
    "serve CIRR, FashionIQ, CIRCO, PinPoint, EDIR, i-CIR or your own runs."
)
# a row's tag -> what it means (`explorer.config.MODALITY_LABELS` names the tags)
TAG_TEXTS = {
    "composed": "ranks with the reference image(s) and the instruction together",
    "image only": "ranks with the reference image alone (a baseline that shows whether composing matters)",
    "text only": "ranks with the instruction alone (a baseline that shows whether composing matters)",
    "results file": "a ranking read from a results file (yours, or one uploaded in the Report), as --eval reads it",
}
# the world's and PinPoint's per-query metrics, defined in full (other families: their legend's words)
PINPOINT_METRICS = (
    "**AP@10** = average precision (the precision at each rank that holds a positive, summed, over "
    "min(positives, 10); 1 = every positive first); **P@10** = positives among the top 10, divided by 10; "
    "**NegRecall@10** = explicit negatives in the top 10 over min(negatives, 10): lower is better. "
    "**mAP@10** (the Report's headline) = AP@10 averaged over the queries"
)
NEAR_MISS_TEXT = (
    " The world judge (the world verifier) also answers **near miss?** (the wanted item with one thing wrong) and "
    "ranks by P(yes) − penalty × P(near miss), the penalty chosen in its training: a near miss is the costliest "
    "wrong answer, so it is pushed down."
)


def about_markdown(
    benchmark: str, family: MetricFamily, views: FailureViews, tags: Iterable[str], reranker: str | None = None
) -> str:
    """The help of the Explore tab for `benchmark` (its name) of `family`, whose rows carry `tags`
    (MODALITY_LABELS values)."""
    intro = (
        WORLD_TEXT
        if benchmark == WORLD
        else (f"**{benchmark}**: composed queries (a reference image, or two, plus an instruction) over its corpus.")
    )
    parts = [f"**The benchmark.** {intro} {views.about}".rstrip()]
    pos, neg = views.positive_word, views.negative_word
    frames = f"a green solid frame for a {pos}" + (f" and a red dashed one for an {neg}" if neg else "")
    tags = list(dict.fromkeys(tags))
    tag_text = "; ".join(f"**{t}** = {TAG_TEXTS[t]}" for t in tags if t in TAG_TEXTS)
    parts.append(
        f"**The rows.** One per retriever: its top results for the query, ranks left to right with their "
        f"scores, {frames}." + (f" Tags: {tag_text}." if tag_text else "")
    )
    parts.append(
        f"**Metrics** of each row, per query: {metrics_text(family, views)}; the Report's columns are "
        "defined under its table."
    )
    if reranker:
        parts.append(
            f"The **reranker** ({reranker}) rescores each row's top n with P(yes) and reorders them."
            + (NEAR_MISS_TEXT if benchmark == WORLD else "")
        )
    return "\n\n".join(parts)


def metrics_text(family: MetricFamily, views: FailureViews) -> str:
    if family.name == "pinpoint":
        return PINPOINT_METRICS
    shown = [f"**{m}** = {views.legend[m]}" for m in family.shown if m in views.legend]
    headline = [a for a in family.report_aggregates() if "/" not in a][:1]  # not one stratum's
    lead = f"; **{headline[0]}** leads the Report" if headline else ""
    if family.strata and headline:  # the plain name is the official average over the strata, not all queries
        lead += f" (the {family.strata} average, the official number; “pooled”: over all queries at once)"
    return "; ".join(shown) + lead


def filters_label(labels: Mapping[str, str] | Iterable[str], shown: int = 3) -> str:
    """The filters' accordion label naming the filters this benchmark offers: "Filters (caption length)"."""
    names = [str(n).lower() for n in (labels.values() if isinstance(labels, Mapping) else labels)]
    if not names:
        return "Filters"
    return f"Filters ({', '.join(names[:shown])}{', ...' if len(names) > shown else ''})"
