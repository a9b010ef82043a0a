"""The plain data the service returns to the UI."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from cir_demo.benchmarks.failure_views import FailureViews
from cir_demo.benchmarks.families import MetricFamily, metric_family
from cir_demo.benchmarks.schema import Query
from cir_demo.benchmarks.scoped import gallery_of, subset_of
from cir_demo.explorer.ranking_metrics import metrics_many
from cir_demo.store.folders import RunSummary


@dataclass
class Tile:
    image_id: str
    rank: int  # 1-based, as shown
    score: float | None
    judgment: str | None  # "positive", "negative" (explicit negative) or None
    thumb: str | None  # data URI
    first_stage_rank: int | None = None  # 1-based, when reranked
    p_yes: float | None = None
    flag: str | None = None
    reranked: bool = False
    p_near: float | None = None  # the judge's P(near miss), when it answers that
    marks: tuple[str, ...] = ()  # the protocol's marks ("img_set": a member of CIRR's img_set)

    @property
    def moved(self) -> int | None:
        """Positive: moved up by reranking."""
        return None if self.first_stage_rank is None else self.first_stage_rank - self.rank


@dataclass
class Column:
    retriever: str
    modality: str
    tiles: list[Tile] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # of the ranking shown
    first_stage_metrics: dict[str, float] | None = None  # before reranking
    error: str | None = None
    note: str | None = None
    seconds: float = 0.0
    ranking: list[str] = field(default_factory=list, repr=False)  # the full ranking shown (as deep as --eval ranks)
    # the official ranks of the target in `ranking` (target_rank; CIRR's subset_rank), NaN when not ranked
    ranks: dict[str, float] = field(default_factory=dict)
    where: str = ""  # where the target is when its tile is not among those shown (`where_line`)
    first_stage_ranking: list[str] | None = field(default=None, repr=False)  # before reranking


def protocol_scope(scope: str | None, query: Query | None, ids: Sequence[str]) -> tuple[list[int], dict, str]:
    """What a column shows of a ranking so that its rank labels are the official ranks: (positions of
    `ids` kept, image id -> marks, a note for the column). `scope` is the family's
    `FailureViews.scope`: "reference_deleted" (CIRR: the reference is left out, as the protocol deletes
    it; img_set members are marked), "gallery" (images outside the query's gallery are hidden). Where the
    protocol ranks a query's own reference image (FashionIQ's gallery holds it, PinPoint's corpus may),
    its tile is marked REFERENCE_MARK: a run that returns the query image is a failure worth seeing."""
    if query is None:
        return list(range(len(ids))), {}, ""
    if scope is None:
        return list(range(len(ids))), _reference_marks(query, ids), ""
    if scope == "reference_deleted":
        refs = set(query.reference_ids)
        kept = [i for i, x in enumerate(ids) if x not in refs]
        members = set(subset_of(query.judgments)) - refs
        marks = {x: ("img_set",) for x in ids if x in members}
        where = [i + 1 for i, x in enumerate(ids) if x in refs]
        note = (
            f"the reference image (ranked {where[0]} by the run) is left out, as the protocol deletes it; "
            "ranks are official"
            if where
            else ""
        )
        return kept, marks, note
    gallery = gallery_of(query.judgments)
    if gallery is None:
        return list(range(len(ids))), _reference_marks(query, ids), ""
    kept = [i for i, x in enumerate(ids) if x in gallery]
    hidden = len(ids) - len(kept)
    note = (
        f"{hidden} of the {len(ids)} images retrieved are outside the query's gallery and hidden, as the "
        "protocol ranks only the gallery; ranks are official"
        if hidden
        else ""
    )
    return kept, _reference_marks(query, [ids[i] for i in kept]), note


REFERENCE_MARK = "query's reference"


def _reference_marks(query: Query, shown: Sequence[str]) -> dict:
    refs = set(query.reference_ids)
    return {x: (REFERENCE_MARK,) for x in shown if x in refs}


def rank_columns(views: FailureViews) -> tuple[str, ...]:
    """The per-query rank columns a column states for the family: the target's official rank on
    single-target families, and its rank within the img_set where the protocol has one (CIRR)."""
    return (("target_rank",) if views.target_rank else ()) + (
        ("subset_rank",) if views.scope == "reference_deleted" else ()
    )


def fill_metrics(columns: Sequence[Column], query: Query, family: MetricFamily | str = "pinpoint", memo=None) -> None:
    """Per-column metrics (the family's shown ones) of the shown and first-stage rankings, in one call,
    and the target's official ranks in the shown ranking (`Column.ranks`, `rank_columns`).
    `memo` (an `LRU`, optional): metrics by (query id, ranking), so a view seen before (swapping
    back to a phrasing, toggling the reranker) costs no call of the per-query code."""
    fam = metric_family(family) if isinstance(family, str) else family
    extra = rank_columns(fam.views())
    jobs = [(c, "metrics", c.ranking) for c in columns if c.error is None]
    jobs += [
        (c, "first_stage_metrics", c.first_stage_ranking)
        for c in columns
        if c.error is None and c.first_stage_ranking is not None
    ]
    todo = []
    found = {}
    for col, attr, ranking in jobs:
        key = (query.query_id, tuple(ranking))
        known = memo.get(key) if memo is not None else None
        if known is not None:
            found[id(col), attr] = dict(known)
        else:
            todo.append((col, attr, ranking, key))
    for (col, attr, _, key), values in zip(todo, metrics_many([(r, query) for _, _, r, _ in todo], fam, extra)):
        found[id(col), attr] = values
        if memo is not None:
            memo.put(key, dict(values))
    for col, attr, _ in jobs:
        values = found[id(col), attr]
        setattr(col, attr, {m: values[m] for m in fam.shown})
        if attr == "metrics":
            col.ranks = {m: values[m] for m in extra}


def where_line(col: Column, k: int, query: Query | None = None, views: FailureViews | None = None) -> str:
    """Where the column's target is, in official ranks, when its tile is not among the `k` shown (and
    its rank within the img_set, on CIRR, always: no tile shows it); on a family of several ground truths
    (`FailureViews.first_positive`, CIRCO), where the first of `query`'s is ranked; "" without ranks."""
    if col.error is not None:
        return ""
    if views is not None and views.first_positive and query is not None:
        return _first_positive_line(col.ranking, set(query.positives), k, views.positive_word)
    if not col.ranks:
        return ""
    parts = []
    rank = col.ranks.get("target_rank")
    if rank is not None:
        if rank != rank:
            parts.append(f"target not in this run's ranking ({len(col.ranking):,} images ranked)")
        elif rank > k:
            parts.append(f"target at official rank {int(rank):,} (beyond the {k} shown)")
    subset = col.ranks.get("subset_rank")
    if subset is not None and subset == subset:
        parts.append(f"target at rank {int(subset)} within its img_set")
    return "; ".join(parts)


def _first_positive_line(ranking: Sequence[str], positives: set[str], k: int, word: str) -> str:
    rank = next((i + 1 for i, x in enumerate(ranking) if x in positives), None)
    if rank is None:
        return f"no {word} in the top {len(ranking):,} this run ranks"
    return f"first {word} at rank {rank:,} (beyond the {k} shown)" if rank > k else ""


@dataclass
class Comparison:
    instruction: str
    reference_thumbs: list[str | None]
    reference_labels: list[str]
    columns: list[Column]
    k: int
    judged: bool  # tiles carry positive / explicit-negative judgments
    query_id: str | None = None
    reranker: str | None = None
    top_n: int | None = None
    n_positives: int | None = None
    n_negatives: int | None = None
    notes: list[str] = field(default_factory=list)
    ranking: str | None = (
        None  # how the reranker orders its top n, from its spec ("P(yes)", "P(yes) - 0.25 * P(near miss)")
    )
    legend: dict[str, str] = field(default_factory=dict)  # per-column metric -> what it means (the family's words)
    words: tuple[str, str] = ("positive", "explicit negative")  # the family's names of a positive and a negative


@dataclass
class Paraphrase:
    query_id: str
    label: str
    instruction: str


@dataclass
class QueryView:
    query: Query
    paraphrases: list[Paraphrase]
    reference_thumbs: list[str | None]
    facts: list[tuple[str, str]]  # (label, value) lines about the query

    @property
    def paraphrase_index(self) -> int:
        return next(i for i, p in enumerate(self.paraphrases) if p.query_id == self.query.query_id)


@dataclass
class QueryList:
    rows: pd.DataFrame  # query_id, instruction, type, why
    total: int  # matches before the display limit
    note: str


@dataclass
class Report:
    run: RunSummary
    metrics: pd.DataFrame  # display table with CIs
    plots: list[tuple[Path, str]]
    info: list[str]
    paired: pd.DataFrame | None = None  # paired.csv as the Report shows it (`paired.paired_display`)
