"""The app's programmatic answers (the Space's /search, /query, /failures, /evaluate and /image endpoints,
and the same as MCP tools), built from the service as plain JSON-able data: lists, dicts, strings,
numbers and None (never NaN, never a server path). The UI's `cir_demo/ui/api.py` only exposes them.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Sequence

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
    # no thumbnails: the answer names each image by id (/image sends one), rendering tiles it never sends
    cmp = service.search_uploads(images, instruction, retrievers, k=k, rerank=rerank, top_n=top_n, thumbnails=False)
    return {"benchmark": service.benchmark.name, **comparison_answer(cmp, started)}


def query_answer(
    service, query_id: str, retrievers: Sequence[str] | None, k: int, rerank: bool, top_n: int, owner: str = ""
) -> dict[str, Any]:
    """A benchmark query's columns with each item's judgment and each column's per-query metrics (the
    family's, over the whole ranking, as per_query.csv has them), and the query's paraphrases. `owner`: the
    client's session, whose uploaded runs it may name (another session's it may not)."""
    started = time.perf_counter()
    if retrievers:
        check_runs(service, retrievers, owner, noun="retriever")
    cmp = service.compare(query_id, retrievers, k=k, rerank=rerank, top_n=top_n, thumbnails=False)  # ids only
    view = service.query_view(query_id, thumbnails=False)
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
        """Run `name`'s whole per-query rows (per_query.csv's): the store's for a column the app serves (read,
        never produced again, where an eval run or the cache holds them), an upload's scored from its file
        once."""
        base = name[: -len(RERANK_SUFFIX)] if name.endswith(RERANK_SUFFIX) else name
        if base in self.service.retriever_names:
            return self.service.store.rows(name)
        rows = self.rows.get(("upload rows", name))
        if rows is None:
            from cir_demo.store.store import rows_of

            rows = rows_of(self.service.benchmark, self.service.engine.retriever(name).rankings, name)
            self.rows.put(("upload rows", name), rows)
        return rows


def served_runs(service, owner: str = "") -> list[str]:
    """The runs a client may name: every column the app serves, and the results files its session uploaded."""
    return list(service.retriever_names) + [n for n in service.uploads_of(owner) if n not in service.retriever_names]


def check_runs(service, runs: Sequence[str] | None, owner: str = "", noun: str = "run") -> list[str]:
    """The runs asked for (default: every column the app serves), each one this client may name."""
    served = served_runs(service, owner)
    names = list(dict.fromkeys(service.retriever_names if not runs else runs))
    unknown = [n for n in names if n not in served]
    if unknown:
        raise ServiceError(f"unknown {noun}(s) {', '.join(unknown)}; this app serves: {', '.join(served) or 'none'}")
    return names


FAILURE_COLUMNS = ("key", "all")  # /failures' `columns`: the rows' key columns, or every column `failures` writes


def failure_sort_rows(service, names: Sequence[str], stats, cache: RunRankings):
    """(the per-query rows a sort over runs `names` reads, its sort context): the page's own rows `stats` for
    the app's columns (`failure_stats`: an eval run's per_query.csv, the app's cache, else computed once), an
    uploaded run's scored from its file; the context is the page's (each column's modality, whether a
    reranker serves), over `names`."""
    import pandas as pd

    from cir_demo.explorer.failures import SortContext

    ctx = SortContext(
        service.family,
        service.table,
        list(names),
        {n: service.modality.get(n, "composed") for n in names},
        bool(service.reranker_name),
    )
    parts = [] if stats is None else [stats]
    parts += [cache.scored(name) for name in names if name not in service.retriever_names]  # uploads
    return pd.concat(parts, ignore_index=True), ctx


def key_metrics(service, sort: str) -> list[str]:
    """The per-query columns /failures answers by default: the family's primary metric, its tie-breaking
    measure (CIRR's target_rank) and the metric an A-vs-B sort compares."""
    from cir_demo.benchmarks.failure_views import DIFF_PREFIX
    from cir_demo.explorer.failures import sort_columns, split_diff

    compared = split_diff(sort)[2] if sort.startswith(DIFF_PREFIX) else None
    views = service.views
    return list(
        dict.fromkeys(
            [
                service.family.primary,
                *([views.finer] if views.finer else []),
                *sort_columns(service.family, [compared] if compared else []),
            ]
        )
    )


def failures_answer(
    service,
    cache: RunRankings,
    sort: str,
    runs: Sequence[str] | None,
    top: int | None,
    columns: str = "key",
    owner: str = "",
) -> dict[str, Any]:
    """The queries in the order of sort `sort` as the page lists them (its per-query rows, its sort context:
    every sort its menu offers), with `why` and each run's per-query columns as
    `python -m cir_demo failures --sort SORT` writes them (`<run>/<metric>`), at most `top` rows.
    `columns`: "key" (the primary metric, the family's tie-breaking measure and a compared metric) or "all"
    (every column `failures` writes). `owner`: the client's session (its uploaded runs may be named)."""
    from cir_demo.explorer.failures import sort_rows

    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ServiceError(f"top must be a positive integer, got {top!r}")
    if columns not in FAILURE_COLUMNS:
        raise ServiceError(f"columns must be one of {', '.join(FAILURE_COLUMNS)}, got {columns!r}")
    names = check_runs(service, runs, owner)
    sort = sort or ""
    reranking = sort.startswith("rerank")
    if reranking and not service.reranker_name:
        raise ServiceError(f"sort {sort!r} needs a reranker; {service.reranker_note or 'none is configured'}")
    served = any(n in service.retriever_names for n in names)
    stats = service.failure_stats(need_rerank=reranking) if served else None
    key = (sort, tuple(names), columns)
    found = cache.rows.get(key)
    if found is None or found[0] is not stats:  # new per-query rows (an eval run published): sorted again
        per_query, ctx = failure_sort_rows(service, names, stats, cache)
        rows, _ = sort_rows(service.table, per_query, sort, ctx)
        rows = rows[["query_id", "why"]].reset_index(drop=True)
        reranked = [f"{n}{RERANK_SUFFIX}" for n in names if reranking]
        present = set(per_query["run"].unique())  # once, not per run: a whole column of rows each time
        shown = [n for n in [*names, *reranked] if n in present]
        found = (stats, shown, failure_columns(service, cache, rows, per_query, shown, sort, columns))
        cache.rows.put(key, found)
    _, shown, rows = found
    total = len(rows)
    rows = rows.head(min(top or MAX_FAILURE_ROWS, MAX_FAILURE_ROWS))
    return {
        "benchmark": service.benchmark.name,
        "sort": sort,
        "runs": shown,
        "total": total,
        "columns": [str(c) for c in rows.columns],
        "rows": records(rows),
        "more": "columns='all': every per-query column of `failures`; top: more rows (null: all)",
    }


def failure_columns(service, cache: RunRankings, rows, per_query, names: Sequence[str], sort: str, columns: str):
    """`rows` (query_id, why) with `<run>/<metric>` for each run of `names` and each key metric, or (`columns`
    "all") each column `failures` writes, from the runs' whole per-query rows. Ranks and counts are whole
    numbers, null where there is none (the CSV's empty cell)."""
    import pandas as pd

    from cir_demo.explorer.cli import INTEGER_COLUMNS, failure_rows_from

    if columns == "all":
        full = failure_rows_from(service.benchmark, {n: cache.scored(n) for n in names}, "benchmark")
        full = full.drop(columns=["why"]).set_index("query_id").reindex(rows["query_id"]).reset_index(drop=True)
        out = rows.join(full)
    else:
        out = rows.copy()
        for name in names:
            own = per_query[per_query["run"] == name].set_index("query_id").reindex(out["query_id"])
            for m in key_metrics(service, sort):
                if m in own:
                    out[f"{name}/{m}"] = own[m].to_numpy()
    for c in out.columns[2:]:
        if c.rpartition("/")[2] in INTEGER_COLUMNS:
            out[c] = pd.Series(
                [None if v is None or v == "" or v != v else int(float(v)) for v in out[c]], dtype=object
            )
    return out


# ------------------------------------------------------------------ evaluate
def evaluate_answer(service, path: str | Path, name: str | None = None, owner: str = "") -> dict[str, Any]:
    """An uploaded results file read and scored as `--eval` reads and scores it: its headline metrics, and
    the paired comparisons (B − A with its 95% interval and p-value, written as paired.csv writes it: "< 0.001"
    below 1/n_boot) against the results files the app serves. The file becomes a column of the client's
    session `owner` (as an upload in the page does for its visitor): no other client sees it."""
    from cir_demo.metrics.headline import p_values_as_text

    stem = (name or Path(path).stem or "run").strip() or "run"
    column, notes = service.add_file_run(path, stem, owner)
    scored = service.scored_file_runs(extra=[column])
    metrics = scored.metrics
    paired = scored.paired
    if len(paired):
        paired = p_values_as_text(paired[(paired["a"] == column) | (paired["b"] == column)])
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
    # the corpus by its set (no set built per call); only an id outside it is looked for among the references
    if image_id not in bench.corpus_set and not any(image_id in q.reference_ids for q in bench.queries):
        raise ServiceError(f"image_id: {image_id[:80]!r} is not an image of {bench.name!r}")
    try:
        return service.engine.open_image(image_id)
    except (OSError, ValueError) as exc:
        raise ServiceError(f"image {image_id!r} cannot be opened here: {hide_paths(str(exc))}") from None
