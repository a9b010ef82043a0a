"""Rankings computed elsewhere, used as a (ranking-only) retriever.

Reads every results format `--eval` reads, with the same readers (cir_demo/results): PinPoint
JSON (an optional `scores` list is used), CIRCO JSON, run dicts `{query: {image: score}}`
(ranked as trec_eval ranks them) and TREC run files; the format is detected per file unless
`params.format` names it. Without scores, a ranking's scores are reciprocal ranks 1, 1/2, ...

Query ids are looked up as given, then in their normalised 5-digit PinPoint form (so
`rank("query_00001", k)` finds `"00001"`). `from_results` builds one from a results file already
read onto a benchmark (`cir_demo.results.read_results`), keyed by the benchmark's query ids: the
app's `--runs` columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cir_demo.benchmarks.schema import normalize_pinpoint_query_id
from cir_demo.results import FORMAT_CHOICES
from cir_demo.retrievers.base import RankingOnlyRetriever, resolve_path
from cir_demo.utils.names import UnknownNameError

FAMILY = "precomputed"
PARAMS = {"path": None, "format": "auto"}
FORMATS = FORMAT_CHOICES
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


class PrecomputedRetriever(RankingOnlyRetriever):
    """A results file as a retriever: `rank(query_id, k)` answers from the file."""

    def __init__(
        self, name: str, rankings: dict[str, list[str]], scores: dict[str, list[float]] | None, fmt: str, spec: dict
    ):
        self.name = name
        self.rankings = rankings
        self.scores = scores
        self.format = fmt
        self.spec = spec

    @staticmethod
    def _spec(name: str, path: Path, fmt: str, scored: bool, n_queries: int) -> dict:
        from cir_demo.utils.io import sha256_file

        return {
            "name": name,
            "family": FAMILY,
            "path": str(path),
            "sha256": sha256_file(path),
            "format": fmt,
            "scores": "file" if scored else "reciprocal_rank",
            "n_queries": n_queries,
        }

    @classmethod
    def from_file(cls, path: str | Path, name: str | None = None, fmt: str = "auto") -> "PrecomputedRetriever":
        """Read a results file in any format (`fmt` "auto": detected); errors name the file, query and field."""
        from cir_demo.results import parse_results

        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"results file not found: {path}")
        parsed = parse_results(path, fmt)
        rankings = {e.key: list(e.items) for e in parsed.entries}
        scores = {e.key: list(e.scores) for e in parsed.entries if e.scores is not None}
        scores = scores if scores and len(scores) == len(rankings) else None
        name = name or path.stem
        return cls(
            name, rankings, scores, parsed.format, cls._spec(name, path, parsed.format, bool(scores), len(rankings))
        )

    @classmethod
    def from_results(cls, results, name: str | None = None) -> "PrecomputedRetriever":
        """From a `cir_demo.results.ResultsFile` (read onto a benchmark: keys are its query ids)."""
        name = name or results.name
        scores = dict(results.scores) if results.scores and len(results.scores) == len(results.run) else None
        spec = cls._spec(name, Path(results.path), results.format, bool(scores), len(results.run))
        return cls(name, {q: list(ids) for q, ids in results.run.items()}, scores, results.format, spec)

    def query_ids(self) -> list[str]:
        return list(self.rankings)

    def _found(self, query_id: str) -> str | None:
        """The file's key of `query_id`, None when it ranks no such query."""
        if query_id in self.rankings:
            return query_id
        try:
            norm = normalize_pinpoint_query_id(query_id) if self.format == "pinpoint" else None
        except ValueError:
            return None
        return norm if norm is not None and norm in self.rankings else None

    def _key(self, query_id: str) -> str:
        key = self._found(query_id)
        if key is None:
            raise UnknownNameError(
                f"query id in {Path(self.spec.get('path', self.name)).name}", query_id, self.rankings.keys()
            )
        return key

    def has(self, query_id: str) -> bool:
        """Whether the file ranks this query (a query left out of a run is not an error: it is not scored).
        Asked once per benchmark query when a run is scored: no "did you mean" error is built for a query
        the file leaves out (matching it against every ranked id cost seconds per partial file)."""
        return self._found(query_id) is not None

    def rank(self, query_id: str, k: int) -> tuple[list[str], list[float]]:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        key = self._key(query_id)
        ids = self.rankings[key][:k]
        if self.scores is not None:
            return ids, self.scores[key][:k]
        return ids, [1.0 / (i + 1) for i in range(len(ids))]


def problems(config: dict) -> list[str]:
    """What `retrievers list` can check without a benchmark: the file is there and reads in its format
    (one line each, the file's name only)."""
    from cir_demo.results import parse_results, problem_line

    path = resolve_path(config["params"]["path"])
    if not Path(path).is_file():
        return [f"results file {Path(path).name} not found"]
    try:
        parse_results(Path(path), config["params"].get("format", "auto"))
    except Exception as exc:  # BenchmarkError, OSError, UnicodeError: one line either way
        return [problem_line(exc, path)]
    return []


def load(config: dict, device: str | None = None, progress: bool = False, **_: Any) -> PrecomputedRetriever:
    """The config's results file as a retriever; a file that cannot be read is one line naming the file
    (not its server path), its first problem and how many more (the page shows it as the column's reason)."""
    from cir_demo.results import problem_line

    params = config["params"]
    path = resolve_path(params["path"])
    try:
        retriever = PrecomputedRetriever.from_file(path, config["name"], params.get("format", "auto"))
    except (
        ValueError
    ) as exc:  # BenchmarkError, UnicodeError (a missing file stays FileNotFoundError: the doctor's fact)
        raise ValueError(problem_line(exc, path)) from None
    if config.get("model"):
        retriever.spec["model"] = config["model"]
    return retriever
