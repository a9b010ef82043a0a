"""The common in-memory model of a CIR benchmark.

Every adapter (PinPoint, EDIR, CIRCO, our own JSONL format, the offline world)
produces a `Benchmark`; every later stage (metrics, retrievers, the app) reads
only this model.

Vocabulary
----------
- image id: a string naming one image (a PinPoint signature, a COCO id as a
  string, a world image id).
- corpus: the ordered list of retrievable image ids (`Benchmark.corpus_ids`).
  Reference images need not be in the corpus; `Benchmark.images` resolves any
  image id, corpus or reference, to a source.
- query: one or two reference image ids plus an instruction. Queries that are
  paraphrases of one intent share a `group_id` and one `Judgments` object.
- run: `{query_id: [image_id, ...]}`, best first (what metric functions take).

Metadata keys (all optional; breakdowns use whichever are present):
`intent_category` (PinPoint query_category / world intent type),
`edit_subcategory` (EDIR subcategory), `edit_category` (EDIR category), `domain` (PinPoint l1_interest),
`skin_tone_bucket` (one of SKIN_TONE_BUCKETS), `is_question`, `is_imperative`,
`length_category`, `is_single` (bool; derived from the reference count when absent),
`shared_concept`, `semantic_aspects` (CIRCO), `category` (FashionIQ), `instance` (i-CIR),
`img_set_size`, `sole_target` (CIRR).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from cir_demo.benchmarks.families import MetricFamilyName

SKIN_TONE_BUCKETS = ("LIGHTEST", "SECOND_LIGHTEST", "SECOND_DARKEST", "DARKEST")

# Metadata keys that the breakdowns know by name, in display order.
BREAKDOWN_FIELDS = (
    "is_single",
    "intent_category",
    "edit_subcategory",
    "edit_category",
    "domain",
    "skin_tone_bucket",
    "is_question",
    "is_imperative",
    "length_category",
    "semantic_aspects",
    "category",  # FashionIQ garment category (dress, shirt, toptee)
    "img_set_size",  # CIRR: members of the query's img_set
    "sole_target",  # CIRR: target_soft marks no image but the hard target as a match
)


# --------------------------------------------------------------------------- errors
@dataclass(frozen=True)
class ValidationIssue:
    """One problem found while reading a benchmark.

    `location` is a row (0-based parquet row), a line (1-based JSONL line) or a
    list index, written out in full, e.g. "line 12" or "row 3 (query_00004)".
    """

    level: Literal["error", "warning"]
    file: str
    location: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        parts = [self.file]
        if self.location:
            parts.append(self.location)
        if self.field:
            parts.append(f"field {self.field!r}")
        return f"{self.level}: {', '.join(parts)}: {self.message}"


class BenchmarkError(ValueError):
    """Raised when a benchmark (or a results file) cannot be used as given.

    The message lists every error found (not just the first), each naming the
    file, the row or line and the field.
    """

    def __init__(self, issues: Sequence[ValidationIssue] | str):
        if isinstance(issues, str):
            self.issues: tuple[ValidationIssue, ...] = ()
            super().__init__(issues)
            return
        self.issues = tuple(issues)
        shown = [str(i) for i in self.issues[:20]]
        more = len(self.issues) - len(shown)
        if more > 0:
            shown.append(f"... and {more} more")
        super().__init__("\n".join(shown))


class IssueCollector:
    """Collects validation issues while an adapter reads; raises on errors at the end."""

    def __init__(self, file: str | Path):
        self.file = str(file)
        self.issues: list[ValidationIssue] = []

    def error(self, location: str | None, field: str | None, message: str, file: str | Path | None = None) -> None:
        self.issues.append(ValidationIssue("error", str(file or self.file), location, field, message))

    def warn(self, location: str | None, field: str | None, message: str, file: str | Path | None = None) -> None:
        self.issues.append(ValidationIssue("warning", str(file or self.file), location, field, message))

    @property
    def errors(self) -> list[ValidationIssue]:
        return [i for i in self.issues if i.level == "error"]

    @property
    def warnings(self) -> list[ValidationIssue]:
        return [i for i in self.issues if i.level == "warning"]

    def raise_if_errors(self) -> None:
        if self.errors:
            raise BenchmarkError(self.errors)


# --------------------------------------------------------------------------- images
@dataclass(frozen=True)
class ImageSource:
    """Where one image comes from: a local file, a URL, or generated on demand."""

    kind: Literal["file", "url", "generated"]
    location: str  # a path, a URL, or a generator spec (e.g. "world:<image id>")


class ImageStore:
    """Resolves image ids to sources and opens them as RGB PIL images.

    Subclasses implement `source` and `_open`; `open` converts to RGB.
    """

    def source(self, image_id: str) -> ImageSource:  # pragma: no cover - interface
        raise NotImplementedError

    def _open(self, image_id: str):  # pragma: no cover - interface
        raise NotImplementedError

    def open(self, image_id: str):
        img = self._open(image_id)
        return img if img.mode == "RGB" else img.convert("RGB")


class CallableImageStore(ImageStore):
    """Images generated on demand by a function (the offline world's renderer).

    `open_many`, when given, is a picklable function of a list of ids that returns their images
    as `open` would: bulk readers (the corpus encoder) run it in worker processes, as rendering
    holds the GIL for most of its work."""

    def __init__(
        self,
        render: Callable[[str], Any],
        prefix: str = "generated",
        open_many: Callable[[list[str]], list] | None = None,
    ):
        self._render = render
        self._prefix = prefix
        self.open_many = open_many

    def source(self, image_id: str) -> ImageSource:
        return ImageSource("generated", f"{self._prefix}:{image_id}")

    def _open(self, image_id: str):
        return self._render(image_id)


# --------------------------------------------------------------------------- queries
@dataclass(frozen=True)
class Judgments:
    """Relevance judgments of one intent; shared by all its paraphrases."""

    positives: tuple[str, ...]
    negatives: tuple[str, ...] = ()
    # Entries of the source negative list that name no image (the real PinPoint file
    # ends 6,729 lists with a null). The official evaluator counts them in NegRecall@k's
    # denominator min(len(negatives), k), so exact parity needs the count.
    n_null_negatives: int = 0

    @property
    def negative_list_length(self) -> int:
        """len(negatives) as the official evaluator sees the list (nulls included)."""
        return len(self.negatives) + self.n_null_negatives

    def __post_init__(self):
        object.__setattr__(self, "positives", tuple(self.positives))
        object.__setattr__(self, "negatives", tuple(self.negatives))


@dataclass(frozen=True)
class Query:
    query_id: str
    reference_ids: tuple[str, ...]
    instruction: str
    group_id: str
    judgments: Judgments
    meta: Mapping[str, Any] = field(default_factory=dict)
    # CIRCO-style single target (Recall@k uses it); None elsewhere.
    target_id: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "reference_ids", tuple(self.reference_ids))
        if not 1 <= len(self.reference_ids) <= 2:
            raise ValueError(f"query {self.query_id}: needs 1 or 2 reference images, got {len(self.reference_ids)}")
        meta = dict(self.meta)
        meta.setdefault("is_single", len(self.reference_ids) == 1)
        object.__setattr__(self, "meta", MappingProxyType(meta))

    @property
    def positives(self) -> tuple[str, ...]:
        return self.judgments.positives

    @property
    def negatives(self) -> tuple[str, ...]:
        return self.judgments.negatives

    @property
    def is_single(self) -> bool:
        return len(self.reference_ids) == 1

    def with_instruction(self, instruction: str) -> "Query":
        return dataclasses.replace(self, instruction=instruction)


# --------------------------------------------------------------------------- benchmark
def normalize_pinpoint_query_id(query_id: Any) -> str:
    """`query_00001` -> `00001`, `1` -> `00001` (the official evaluator's rule)."""
    s = str(query_id)
    if s.startswith("query_"):
        s = s[len("query_") :]
    return s.zfill(5)


@dataclass
class Benchmark:
    """A benchmark: queries (in file order), the retrievable corpus and an image store.

    `results_key(query_id)` is the key used in official-format results files
    (PinPoint writes `query_00001` as `00001`, set by `results_id_format="pinpoint"`).
    """

    name: str
    metric_family: MetricFamilyName  # which official evaluator it is scored like (benchmarks/families.py)
    queries: list[Query]
    corpus_ids: list[str]
    images: ImageStore | None = None
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[ValidationIssue] = field(default_factory=list)
    results_id_format: Literal["same", "pinpoint"] = "same"

    def __post_init__(self):
        self._by_id = {q.query_id: q for q in self.queries}
        if len(self._by_id) != len(self.queries):
            raise BenchmarkError(f"benchmark {self.name}: duplicate query ids")
        self._corpus_set = frozenset(self.corpus_ids)

    def results_key(self, query_id: str) -> str:
        if self.results_id_format == "pinpoint":
            return normalize_pinpoint_query_id(query_id)
        return query_id

    # lookups
    def query(self, query_id: str) -> Query:
        try:
            return self._by_id[query_id]
        except KeyError:
            raise KeyError(f"benchmark {self.name!r} has no query {query_id!r}") from None

    def __contains__(self, image_id: str) -> bool:
        return image_id in self._corpus_set

    @property
    def corpus_set(self) -> frozenset[str]:
        return self._corpus_set

    def groups(self) -> dict[str, list[Query]]:
        """Paraphrase groups, in first-appearance order."""
        out: dict[str, list[Query]] = {}
        for q in self.queries:
            out.setdefault(q.group_id, []).append(q)
        return out

    def paraphrases(self, query_id: str) -> list[Query]:
        """The query's paraphrase group in benchmark order: from `groups()` built once (the app asks at
        every view and API answer; a scan of the default world's 5,568 queries took ~1.5 ms each time),
        built again if `queries` was replaced or resized."""
        group = self.query(query_id).group_id
        index = self.__dict__.get("_group_index")
        if index is None or index[0] is not self.queries or index[1] != len(self.queries):
            index = self._group_index = (self.queries, len(self.queries), self.groups())
        return list(index[2][group])

    def meta_fields(self) -> list[str]:
        present = set()
        for q in self.queries:
            present.update(k for k, v in q.meta.items() if v is not None)
        return [f for f in BREAKDOWN_FIELDS if f in present]

    def subset(self, query_ids: Iterable[str]) -> "Benchmark":
        keep = set(query_ids)
        return dataclasses.replace(self, queries=[q for q in self.queries if q.query_id in keep])

    def limit(self, n_groups: int | None) -> "Benchmark":
        """The first `n_groups` paraphrase groups (all their paraphrases)."""
        if n_groups is None:
            return self
        keep_groups = list(self.groups())[:n_groups]
        keep = {q.query_id for g in keep_groups for q in self.groups()[g]}
        return self.subset(keep)
