"""Reading and writing official-format results files.

Formats
-------
- PinPoint: ``{"00001": {"retrieved_items": [id, ...], "scores": [float, ...]?}, ...}``
  (``scores`` is ours and optional; the official evaluator ignores it).
- CIRCO: ``{"0": [id, ...], ...}``.

Keys starting with ``_`` are metadata (we write ``_spec`` with the retriever and
reranker spec); the official evaluators look up query keys only, so they ignore it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from cir_demo.benchmarks.schema import Benchmark, BenchmarkError, ValidationIssue
from cir_demo.utils.io import write_json_atomic

ResultsFormat = Literal["pinpoint", "circo"]


@dataclass
class ResultsFile:
    """A results file mapped onto a benchmark's query ids, plus what was wrong with it."""

    path: Path
    name: str
    format: ResultsFormat
    run: dict[str, list[str]]
    scores: dict[str, list[float]] = field(default_factory=dict)
    spec: dict[str, Any] | None = None
    unknown_query_keys: list[str] = field(default_factory=list)
    n_missing_queries: int = 0
    n_unknown_ids: int = 0  # retrieved ids not in the corpus (counted per occurrence)
    queries_with_duplicates: list[str] = field(default_factory=list)
    n_empty: int = 0

    @property
    def coverage(self) -> float:
        total = len(self.run) + self.n_missing_queries
        return len(self.run) / total if total else 0.0

    def warnings(self) -> list[ValidationIssue]:
        out: list[ValidationIssue] = []

        def warn(field_: str | None, msg: str) -> None:
            out.append(ValidationIssue("warning", str(self.path), None, field_, msg))

        if self.unknown_query_keys:
            ex = ", ".join(repr(k) for k in self.unknown_query_keys[:5])
            warn(None, f"{len(self.unknown_query_keys)} query keys are not in the benchmark (e.g. {ex}); ignored")
        if self.n_missing_queries:
            warn(None, f"{self.n_missing_queries} benchmark queries have no entry (coverage {self.coverage:.1%}); "
                       "they are left out of every mean, as the official evaluator does")
        if self.n_empty:
            warn("retrieved_items", f"{self.n_empty} queries have an empty ranking; counted in total_queries "
                                    "but left out of the means, as the official evaluator does")
        if self.n_unknown_ids:
            warn("retrieved_items", f"{self.n_unknown_ids} retrieved ids are not in the corpus (they count as misses)")
        if self.queries_with_duplicates:
            ex = ", ".join(self.queries_with_duplicates[:5])
            warn("retrieved_items", f"{len(self.queries_with_duplicates)} rankings repeat an id (e.g. {ex}); "
                                    "the PinPoint evaluator counts every repeat as a hit, so we do too")
        return out


def _fail(path: Path, location: str | None, field_: str | None, message: str) -> BenchmarkError:
    return BenchmarkError([ValidationIssue("error", str(path), location, field_, message)])


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def read_results(path: str | Path, benchmark: Benchmark) -> ResultsFile:
    """Parse a results file (format detected) against `benchmark`; raises BenchmarkError on malformed input."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(path, None, None, "results file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(path, None, None, f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise _fail(path, None, None, f"top level must be an object mapping query ids to rankings, got {type(raw).__name__}")

    spec = raw.get("_spec") if isinstance(raw.get("_spec"), dict) else None
    entries = {k: v for k, v in raw.items() if not str(k).startswith("_")}
    fmt: ResultsFormat | None = None
    for v in entries.values():
        fmt = "circo" if isinstance(v, list) else "pinpoint"
        break
    fmt = fmt or ("circo" if benchmark.metric_family == "circo" else "pinpoint")

    key_to_qid = {benchmark.results_key(q.query_id): q.query_id for q in benchmark.queries}
    # accept our own query ids as keys too (e.g. "query_00001" or world ids)
    for q in benchmark.queries:
        key_to_qid.setdefault(q.query_id, q.query_id)

    errors: list[ValidationIssue] = []
    res = ResultsFile(path=path, name=path.stem, format=fmt, run={}, spec=spec)
    corpus = benchmark.corpus_set
    for key, value in entries.items():
        loc = f"query {key!r}"
        if fmt == "pinpoint":
            if not isinstance(value, dict) or "retrieved_items" not in value:
                errors.append(ValidationIssue("error", str(path), loc, "retrieved_items",
                                              "expected an object with a 'retrieved_items' list (PinPoint format)"))
                continue
            items, scores = value["retrieved_items"], value.get("scores")
        else:
            if not isinstance(value, list):
                errors.append(ValidationIssue("error", str(path), loc, None,
                                              "expected a list of image ids (CIRCO format)"))
                continue
            items, scores = value, None
        if not isinstance(items, list) or not all(isinstance(i, (str, int)) and not isinstance(i, bool) for i in items):
            errors.append(ValidationIssue("error", str(path), loc, "retrieved_items", "must be a list of image ids (strings)"))
            continue
        if scores is not None and (not isinstance(scores, list) or len(scores) != len(items)
                                   or not all(_is_number(s) for s in scores)):
            errors.append(ValidationIssue("error", str(path), loc, "scores",
                                          "must be a list of finite numbers as long as retrieved_items"))
            continue
        qid = key_to_qid.get(str(key))
        if qid is None:
            res.unknown_query_keys.append(str(key))
            continue
        if qid in res.run:
            errors.append(ValidationIssue("error", str(path), loc, None,
                                          f"two keys map to the same query {qid!r}"))
            continue
        ids = [str(i) for i in items]
        res.run[qid] = ids
        if scores is not None:
            res.scores[qid] = [float(s) for s in scores]
        if not ids:
            res.n_empty += 1
        if len(set(ids)) != len(ids):
            res.queries_with_duplicates.append(str(key))
        res.n_unknown_ids += sum(1 for i in ids if i not in corpus)
    if errors:
        raise BenchmarkError(errors)
    res.n_missing_queries = sum(1 for q in benchmark.queries if q.query_id not in res.run)
    return res


def write_results(
    path: str | Path,
    benchmark: Benchmark,
    run: Mapping[str, Sequence[str]],
    scores: Mapping[str, Sequence[float]] | None = None,
    spec: Mapping[str, Any] | None = None,
    fmt: ResultsFormat | None = None,
) -> Path:
    """Write `run` in the benchmark's official results format (atomic)."""
    fmt = fmt or ("circo" if benchmark.metric_family == "circo" else "pinpoint")
    out: dict[str, Any] = {}
    if spec is not None:
        out["_spec"] = dict(spec)
    for q in benchmark.queries:
        if q.query_id not in run:
            continue
        key = benchmark.results_key(q.query_id)
        ids = list(run[q.query_id])
        if fmt == "circo":
            out[key] = ids
        else:
            entry: dict[str, Any] = {"retrieved_items": ids}
            if scores is not None and q.query_id in scores:
                entry["scores"] = [round(float(s), 6) for s in scores[q.query_id]]
            out[key] = entry
    write_json_atomic(path, out, indent=None)
    return Path(path)
