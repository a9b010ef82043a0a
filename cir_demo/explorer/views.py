"""The plain data the service returns to the UI."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from cir_demo.benchmarks.families import MetricFamily
from cir_demo.benchmarks.schema import Query
from cir_demo.explorer.ranking_metrics import metrics_many


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
    ranking: list[str] = field(default_factory=list, repr=False)  # the full ranking shown (SEARCH_K deep)
    first_stage_ranking: list[str] | None = field(default=None, repr=False)  # before reranking


def fill_metrics(columns: Sequence[Column], query: Query, family: MetricFamily | str = "pinpoint",
                 memo=None) -> None:
    """Per-column metrics (the family's shown ones) of the shown and first-stage rankings, in one call.
    `memo` (an `LRU`, optional): metrics by (query id, ranking), so a view seen before (swapping
    back to a phrasing, toggling the reranker) costs no call of the per-query code (~10 ms)."""
    jobs = [(c, "metrics", c.ranking) for c in columns if c.error is None]
    jobs += [(c, "first_stage_metrics", c.first_stage_ranking) for c in columns
             if c.error is None and c.first_stage_ranking is not None]
    todo = []
    for col, attr, ranking in jobs:
        key = (query.query_id, tuple(ranking))
        known = memo.get(key) if memo is not None else None
        if known is not None:
            setattr(col, attr, dict(known))
        else:
            todo.append((col, attr, ranking, key))
    for (col, attr, _, key), values in zip(todo, metrics_many([(r, query) for _, _, r, _ in todo], family)):
        setattr(col, attr, values)
        if memo is not None:
            memo.put(key, dict(values))


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
    ranking: str | None = None  # how the reranker orders its top n, from its spec ("P(yes)", "P(yes) - 2 * P(near miss)")


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
class RunSummary:
    path: Path
    label: str
    matches: str  # "fingerprint" (same benchmark content) or "name" (same benchmark name only)


@dataclass
class Report:
    run: RunSummary
    metrics: pd.DataFrame  # display table with CIs
    plots: list[tuple[Path, str]]
    info: list[str]
    paired: pd.DataFrame | None = None  # paired.csv as the Report shows it (`paired.paired_display`)
