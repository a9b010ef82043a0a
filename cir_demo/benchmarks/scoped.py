"""Judgments that also say where a query is ranked, for protocols that do not rank the whole corpus.

CIRR ranks the query's `img_set` members on their own (Recall_subset@k); FashionIQ ranks each
query among its category's images only, i-CIR among its instance's database. The benchmark model
keeps one corpus, so these restrictions travel with the query's judgments and the metric applies
them to any run (a run over the whole corpus then scores exactly as the reference code's
per-category or per-instance ranking would).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cir_demo.benchmarks.schema import Judgments


@dataclass(frozen=True)
class ScopedJudgments(Judgments):
    """Judgments plus the protocol's candidate restrictions.

    gallery: the images this query is ranked among (None: the whole corpus). Shared by the queries
        of one category or instance (one frozenset object, not a copy per query).
    subset: CIRR's `img_set` members, ranked on their own for Recall_subset@k (empty elsewhere).
    """

    gallery: frozenset[str] | None = field(default=None, repr=False)  # thousands of ids
    subset: tuple[str, ...] = ()

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "subset", tuple(self.subset))


def gallery_of(judgments: Judgments) -> frozenset[str] | None:
    """The images a query is ranked among, None for the whole corpus."""
    return getattr(judgments, "gallery", None)


def subset_of(judgments: Judgments) -> tuple[str, ...]:
    return getattr(judgments, "subset", ())
