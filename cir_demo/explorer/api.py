"""The app's programmatic answers (the Space's /search, /query, /failures, /evaluate and /image endpoints,
and the same as MCP tools), built from the service as plain JSON-able data: lists, dicts, strings,
numbers and None (never NaN, never a server path). The UI's `cir_demo/ui/api.py` only exposes them.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from cir_demo.benchmarks.registry import RERANK_SUFFIX
from cir_demo.explorer.config import ServiceError
from cir_demo.explorer.public_text import hide_paths
from cir_demo.explorer.uploads import ValidatedImage
from cir_demo.explorer.views import Column, Comparison

MAX_FAILURE_ROWS = 10_000  # rows one /failures answer holds at most (the benchmark order of a large benchmark)


def plain(value: Any) -> Any:
    """`value` as JSON takes it: numpy scalars as Python numbers, NaN and infinities as None."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def records(frame) -> list[dict[str, Any]]:
    """A DataFrame's rows as plain dicts, column order kept."""
    columns = [str(c) for c in frame.columns]
    return [dict(zip(columns, map(plain, row))) for row in frame.itertuples(index=False, name=None)]


# ------------------------------------------------------------------ rankings
def column_answer(col: Column, judged: bool) -> dict[str, Any]:
    """One retriever's column: its ranked list (rank 1 first) and, for a benchmark query, its metrics."""
    results = []
    for t in col.tiles:
        item = {"image_id": t.image_id, "rank": t.rank, "score": plain(t.score)}
        if col.first_stage_ranking is not None:  # reranked: where it was, and the judge's answer
            item.update(first_stage_rank=t.first_stage_rank, p_yes=plain(t.p_yes), reranked=t.reranked)
            if t.p_near is not None:
                item["p_near_miss"] = plain(t.p_near)
        if judged:
            item["judgment"] = t.judgment
            if t.marks:
                item["marks"] = list(t.marks)
        results.append(item)
    out: dict[str, Any] = {
        "retriever": col.retriever,
        "modality": col.modality,
        "results": results,
        "seconds": round(col.seconds, 4),
    }
    if judged and col.error is None:
        out["metrics"] = plain(col.metrics)
        if col.first_stage_metrics is not None:
            out["first_stage_metrics"] = plain(col.first_stage_metrics)
    out["error"] = hide_paths(col.error) if col.error else None
    out["note"] = hide_paths(col.note) if col.note else None
    return out


def comparison_answer(cmp: Comparison, started: float) -> dict[str, Any]:
    return {
        "instruction": cmp.instruction,
        "k": cmp.k,
        "reranker": cmp.reranker,
        "rerank_top_n": cmp.top_n,
        "ranking_rule": cmp.ranking,
        "columns": [column_answer(c, cmp.judged) for c in cmp.columns],
        "notes": [hide_paths(n) for n in cmp.notes],
        "seconds": round(time.perf_counter() - started, 4),
    }


def search_answer(
    service,
    images: Sequence[ValidatedImage],
    instruction: str,
    retrievers: Sequence[str] | None,
    k: int,
    rerank: bool,
    top_n: int,
) -> dict[str, Any]:
    """Each retriever's top `k` of the loaded corpus for uploaded reference image(s) and an instruction."""
    started = time.perf_counter()
    cmp = service.search_uploads(images, instruction, retrievers, k=k, rerank=rerank, top_n=top_n)
    return {"benchmark": service.benchmark.name, **comparison_answer(cmp, started)}


def query_answer(
    service, query_id: str, retrievers: Sequence[str] | None, k: int, rerank: bool, top_n: int
) -> dict[str, Any]:
    """A benchmark query's columns with each item's judgment and each column's per-query metrics (the
    family's, over the whole ranking, as per_query.csv has them), and the query's paraphrases."""
    started = time.perf_counter()
    cmp = service.compare(query_id, retrievers, k=k, rerank=rerank, top_n=top_n)
    view = service.query_view(query_id)
    q = view.query
    query = {
        "query_id": q.query_id,
        "intent": q.group_id,
        "instruction": q.instruction,
        "reference_ids": list(q.reference_ids),
        "n_positives": len(q.positives),
        "n_negatives": len(q.negatives),
        "facts": {label: value for label, value in view.facts},
    }
    paraphrases = [{"query_id": p.query_id, "label": p.label, "instruction": p.instruction} for p in view.paraphrases]
    return {
        "benchmark": service.benchmark.name,
        "query": query,
        "paraphrases": paraphrases,
        "metric_family": service.family.name,
        "judgment_words": list(cmp.words),
        **comparison_answer(cmp, started),
    }


# ------------------------------------------------------------------ failures
class RunRankings:
    """Each column's per-query rows as the failure sorts read them, from the service's run store
    (`RunStore.rows`: a stored eval run under the run's key, else the cache, else produced: the rows
    per_query.csv holds); reranked runs (`<run>+rerank`) when asked."""

    def __init__(self, service):
        from cir_demo.utils.lru import LRU

        self.service = service
        self.rows = LRU(32)  # (sort, runs) -> the sorted rows: the runs never change, their rows neither

    def scored(self, name: str):
        """Run `name`'s per-query rows."""
        return self.service.store.rows(name)

    def run(self, name: str) -> Mapping[str, Sequence[str]]:
        """Run `name`'s rankings `{query id: ids best first}`."""
        return self.service.store.ranking(name)


def check_runs(service, runs: Sequence[str] | None) -> list[str]:
    """The runs asked for (default: every column the app serves), each a column of this app."""
    served = list(service.retriever_names) + list(service.uploaded_runs)
    names = list(dict.fromkeys(service.retriever_names if not runs else runs))
    unknown = [n for n in names if n not in served]
    if unknown:
        raise ServiceError(f"unknown run(s) {', '.join(unknown)}; this app serves: {', '.join(served) or 'none'}")
    return names


def failures_answer(
    service, cache: RunRankings, sort: str, runs: Sequence[str] | None, top: int | None
) -> dict[str, Any]:
    """The rows `python -m cir_demo failures --sort SORT` writes for these runs (query_id, why, then
    `<run>/<metric>`), in sort order, at most `top` of them."""
    from cir_demo.explorer.cli import failure_rows_from

    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ServiceError(f"top must be a positive integer, got {top!r}")
    names = check_runs(service, runs)
    if (sort or "").startswith("rerank"):
        if not service.reranker_name:
            raise ServiceError(f"sort {sort!r} needs a reranker; {service.reranker_note or 'none is configured'}")
        cost = len(service.benchmark.queries) * len(names) * service.config.default_top_n
        if cost > service.max_rerank_scores:
            raise ServiceError(
                f"sort {sort!r} needs reranked results for all {len(service.benchmark.queries):,} "
                f"queries ({cost:,} candidate scores); ask for fewer runs, or use the app's Report"
            )
        names += [f"{n}{RERANK_SUFFIX}" for n in names]
    key = (sort, tuple(names))
    rows = cache.rows.get(key)
    if rows is None:
        rows = failure_rows_from(service.benchmark, {n: cache.scored(n) for n in names}, sort)
        cache.rows.put(key, rows)
    total = len(rows)
    rows = rows.head(min(top or MAX_FAILURE_ROWS, MAX_FAILURE_ROWS))
    return {
        "benchmark": service.benchmark.name,
        "sort": sort,
        "runs": names,
        "total": total,
        "columns": [str(c) for c in rows.columns],
        "rows": records(rows),
    }


# ------------------------------------------------------------------ evaluate
def evaluate_answer(service, path: str | Path, name: str | None = None) -> dict[str, Any]:
    """An uploaded results file read and scored as `--eval` reads and scores it: its headline metrics, and
    the paired comparisons (B − A with its 95% interval and p-value) against the results files the app
    serves. The file becomes a column of the app (as an upload in the page does)."""
    stem = (name or Path(path).stem or "run").strip() or "run"
    column, notes = service.add_file_run(path, stem)
    scored = service.scored_file_runs(extra=[column])
    metrics = scored.metrics
    paired = scored.paired
    if len(paired):
        paired = paired[(paired["a"] == column) | (paired["b"] == column)]
    return {
        "benchmark": service.benchmark.name,
        "run": column,
        "notes": [hide_paths(n) for n in notes],
        "metrics": records(metrics[metrics["run"] == column]),
        "other_runs": records(metrics[metrics["run"] != column]),
        "paired": records(paired),
        "n_boot": scored.n_boot,
    }


# ------------------------------------------------------------------ images
def image_of(service, image_id: str):
    """The benchmark image `image_id` (a corpus image or a query's reference), as a PIL image."""
    bench = service.benchmark
    if not isinstance(image_id, str) or not image_id:
        raise ServiceError("image_id: give an image id (e.g. one of a ranking's image_id values)")
    if image_id not in set(bench.corpus_ids) and not any(image_id in q.reference_ids for q in bench.queries):
        raise ServiceError(f"image_id: {image_id[:80]!r} is not an image of {bench.name!r}")
    try:
        return service.engine.open_image(image_id)
    except (OSError, ValueError) as exc:
        raise ServiceError(f"image {image_id!r} cannot be opened here: {hide_paths(str(exc))}") from None
