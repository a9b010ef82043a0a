"""Rankings computed elsewhere, used as a (ranking-only) retriever.

Reads the official results formats:
- PinPoint: `{"00001": {"retrieved_items": ["sig_a", ...]}, ...}`; an optional
  `"scores"` list aligned with `retrieved_items` is used when present (other
  keys in an entry are ignored);
- CIRCO: `{"0": [12345, ...], ...}` (image ids may be ints; they become strings).
Without scores, a ranking's scores are reciprocal ranks 1, 1/2, 1/3, ...

PinPoint query ids are looked up as given and then in their normalised
5-digit form, so `rank("query_00001", k)` finds `"00001"`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cir_demo.benchmarks.schema import IssueCollector, normalize_pinpoint_query_id
from cir_demo.retrievers.base import RankingOnlyRetriever, resolve_path
from cir_demo.utils.names import UnknownNameError

FAMILY = "precomputed"
PARAMS = {"path": None, "format": "auto"}
FORMATS = ("auto", "pinpoint", "circo")
RUNS_MODEL = False  # reads rankings from a file: no device, and not among the models the doctor checks by default


def validate(config: dict, where: str) -> None:
    params = config.get("params", {})
    if not isinstance(params.get("path"), str) or not params.get("path"):
        raise ValueError(f"{where}: key 'params.path' (the results file) is required for family 'precomputed'")
    if params.get("format", "auto") not in FORMATS:
        raise ValueError(f"{where}: key 'params.format' must be one of {FORMATS}, got {params.get('format')!r}")


def weights(config: dict) -> list:
    from cir_demo.utils.needs import LocalFile

    path = config["params"]["path"]
    return [LocalFile(path, "precomputed rankings", f"put the rankings file at {path}")]


def detect_format(data: dict) -> str:
    """'pinpoint' when entries are objects, 'circo' when they are lists."""
    for value in data.values():
        if isinstance(value, dict):
            return "pinpoint"
        if isinstance(value, list):
            return "circo"
        break
    return "circo"


def parse_results(data: Any, fmt: str, file: str) -> tuple[dict[str, list[str]], dict[str, list[float]] | None, str]:
    """(rankings, scores or None, format) from a parsed results JSON; every problem is reported."""
    issues = IssueCollector(file)
    if not isinstance(data, dict):
        issues.error(None, None, f"top level must be an object mapping query ids to rankings, got {type(data).__name__}")
        issues.raise_if_errors()
    if fmt == "auto":
        fmt = detect_format(data)
    rankings: dict[str, list[str]] = {}
    scores: dict[str, list[float]] = {}
    for qid, value in data.items():
        loc = f"query {qid!r}"
        if fmt == "pinpoint":
            if not isinstance(value, dict):
                issues.error(loc, None, f"PinPoint entries must be objects with 'retrieved_items', got {type(value).__name__}")
                continue
            if "retrieved_items" not in value:
                issues.error(loc, "retrieved_items", "missing")
                continue
            items, entry_scores = value["retrieved_items"], value.get("scores")
            field = "retrieved_items"
        else:
            items, entry_scores, field = value, None, None
        if not isinstance(items, list):
            issues.error(loc, field, f"must be a list of image ids, got {type(items).__name__}")
            continue
        bad = [i for i, x in enumerate(items) if isinstance(x, bool) or not isinstance(x, (str, int))]
        if bad:
            issues.error(loc, field, f"item {bad[0]} is {items[bad[0]]!r}; image ids must be strings (or ints)")
            continue
        ids = [str(x) for x in items]
        if len(set(ids)) != len(ids):
            dup = next(x for i, x in enumerate(ids) if x in ids[:i])
            issues.error(loc, field, f"image id {dup!r} appears more than once")
            continue
        rankings[str(qid)] = ids
        if entry_scores is not None:
            if not isinstance(entry_scores, list) or len(entry_scores) != len(ids) or not all(
                isinstance(s, (int, float)) and not isinstance(s, bool) for s in entry_scores
            ):
                issues.error(loc, "scores", f"must be a list of {len(ids)} numbers aligned with retrieved_items")
                continue
            scores[str(qid)] = [float(s) for s in entry_scores]
    if scores and len(scores) != len(rankings):
        issues.error(None, "scores", f"{len(scores)} of {len(rankings)} queries have scores; give all or none")
    issues.raise_if_errors()
    return rankings, (scores or None), fmt


class PrecomputedRetriever(RankingOnlyRetriever):
    """A results file as a retriever: `rank(query_id, k)` answers from the file."""

    def __init__(self, name: str, rankings: dict[str, list[str]], scores: dict[str, list[float]] | None,
                 fmt: str, spec: dict):
        self.name = name
        self.rankings = rankings
        self.scores = scores
        self.format = fmt
        self.spec = spec

    @classmethod
    def from_file(cls, path: str | Path, name: str | None = None, fmt: str = "auto") -> "PrecomputedRetriever":
        from cir_demo.utils.io import sha256_file

        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"results file not found: {path}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            from cir_demo.benchmarks.schema import BenchmarkError

            raise BenchmarkError(f"{path}: not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        rankings, scores, fmt = parse_results(data, fmt, str(path))
        name = name or path.stem
        spec = {
            "name": name,
            "family": FAMILY,
            "path": str(path),
            "sha256": sha256_file(path),
            "format": fmt,
            "scores": "file" if scores else "reciprocal_rank",
            "n_queries": len(rankings),
        }
        return cls(name, rankings, scores, fmt, spec)

    def query_ids(self) -> list[str]:
        return list(self.rankings)

    def _key(self, query_id: str) -> str:
        if query_id in self.rankings:
            return query_id
        if self.format == "pinpoint":
            norm = normalize_pinpoint_query_id(query_id)
            if norm in self.rankings:
                return norm
        raise UnknownNameError(f"query id in {self.spec.get('path', self.name)}", query_id, self.rankings.keys())

    def rank(self, query_id: str, k: int) -> tuple[list[str], list[float]]:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        key = self._key(query_id)
        ids = self.rankings[key][:k]
        if self.scores is not None:
            return ids, self.scores[key][:k]
        return ids, [1.0 / (i + 1) for i in range(len(ids))]


def load(config: dict, device: str | None = None, progress: bool = False, **_: Any) -> PrecomputedRetriever:
    params = config["params"]
    retriever = PrecomputedRetriever.from_file(resolve_path(params["path"]), config["name"], params.get("format", "auto"))
    if config.get("model"):
        retriever.spec["model"] = config["model"]
    return retriever
