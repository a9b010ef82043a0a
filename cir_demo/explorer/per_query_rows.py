"""The per-query rows the explorer's failure sorts read (`failures.sort_rows`), as `ExplorerService`
gathers them: from the eval runs on disk that match the benchmark and the columns' specs, else computed
here over the ranking `--eval` scores (never a cut one) and cached on disk."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Mapping, Sequence

import pandas as pd

from cir_demo.benchmarks.registry import RERANK_SUFFIX
from cir_demo.explorer.config import ServiceError
from cir_demo.explorer.failures import diff_metrics, per_query_frame, sort_columns
from cir_demo.explorer.runs import list_runs, read_eval_per_query

log = logging.getLogger(__name__)
# the code that scores a ranking into per-query rows: part of the app's per-query cache key
SCORING_CODE = ("cir_demo.explorer.failures",)


class PerQueryRows:
    """`ExplorerService`'s failure statistics (it provides engine, benchmark, family, views, table,
    config, retriever_names, reranker_name, fingerprint, sorts(), _lock, _failures, _failure_source)."""

    def _spec_hashes(self) -> dict[str, str]:
        """{column: hash of the spec its runs record}, which stored runs must match to be reused."""
        from cir_demo.retrievers.base import spec_hash

        out = {}
        for n in self.retriever_names:
            try:
                out[n] = spec_hash(self.engine.run_spec(n))
            except Exception as exc:
                log.warning("retriever %s: %s", n, exc)
        return out

    def failure_stats(self, progress: Callable[[str], None] | None = None, need_rerank: bool = False) -> pd.DataFrame:
        """The per-query rows the failure sorts read (`failures.sort_rows`): run, query_id, group_id, the
        family's primary metric and its `FailureViews.measures`, for the app's retrievers.

        From the latest eval run of this benchmark content with the same retriever specs when
        there is one; the rest is computed here once (all queries, every retriever) and cached
        on disk. Reranked deltas come from the eval run, or are computed when
        `need_rerank` and the work is small (`max_rerank_scores`).
        """
        with self._lock:
            if self._failures is not None and (
                not need_rerank or not self.reranker_name or self._failures["run"].str.endswith(RERANK_SUFFIX).any()
            ):
                return self._failures
            self._failures = self._gather_per_query(progress, need_rerank)
            return self._failures

    def forget_failures(self) -> None:
        """Drop the cached failure measures (a new eval run was published; the next sort reads it)."""
        with self._lock:
            self._failures = None

    @property
    def failure_source(self) -> str:
        return self._failure_source

    max_rerank_scores = 30_000  # candidate scores the app may compute for the reranker sorts

    def _reranker_hash(self) -> str | None:
        if not self.reranker_name:
            return None
        try:
            return self.engine.reranker(self.reranker_name, **dict(self.config.reranker_kwargs)).spec_hash()
        except Exception as exc:
            log.warning("reranker %s: %s", self.reranker_name, exc)
            return None

    def _stored_per_query(self, hashes: Mapping[str, str], rr_hash: str | None):
        """Per-query results of the eval runs on disk that cover every query the app shows:
        (frames, run names covered, source labels), newest runs first. Reads, never computes."""
        parts: list[pd.DataFrame] = []
        have: set[str] = set()
        sources = []
        for run in list_runs(self.benchmark.name, self.fingerprint):
            if run.matches != "fingerprint":
                continue
            df = read_eval_per_query(
                run.path, {n: h for n, h in hashes.items() if n not in have}, rr_hash, self._sort_columns()
            )
            if df is None or not len(df):
                continue
            df = df[df["query_id"].isin(set(self.table["query_id"]))]
            # a run counts only when it covers every query the app shows (e.g. not an `--limit` eval)
            covered = df.groupby("run")["query_id"].nunique()
            new = sorted(set(covered[covered == len(self.table)].index) - have)
            parts.append(df[df["run"].isin(new)])
            have |= set(new)
            sources.append(run.label)
            if all(n in have for n in hashes) and (not rr_hash or all(f"{n}{RERANK_SUFFIX}" in have for n in hashes)):
                break
        return parts, have, sources

    def stored_sorts(self) -> set[str]:
        """The failure sorts whose data is on disk already (eval runs, or this app's per-query cache
        for the first stage): they answer at once while the background run computes the rest."""
        hashes = self._spec_hashes()
        if not hashes:
            return set()
        rr_hash = self._reranker_hash()
        _, have, _ = self._stored_per_query(hashes, rr_hash)
        if not all(n in have or self._cached_per_query_path(n, h).is_file() for n, h in hashes.items()):
            return set()
        out = {c.name for c in self.sorts() if c.available and c.name not in ("order", "rerank_helped", "rerank_hurt")}
        if rr_hash and all(f"{n}{RERANK_SUFFIX}" in have for n in hashes):
            out |= {"rerank_helped", "rerank_hurt"}
        return out

    def _gather_per_query(self, progress: Callable[[str], None] | None, need_rerank: bool) -> pd.DataFrame:
        if not self.retriever_names:
            raise ServiceError("no retrievers are loaded, so there are no results to sort by")
        hashes = self._spec_hashes()
        rr_hash = self._reranker_hash()
        parts, have, sources = self._stored_per_query(hashes, rr_hash)
        for name in self.retriever_names:
            if name not in have and name in hashes:
                parts.append(self._computed_per_query(name, hashes[name], progress))
                have.add(name)
                sources.append(f"{name} computed here")
        if need_rerank and rr_hash and not any(f"{n}{RERANK_SUFFIX}" in have for n in hashes):
            cost = len(self.benchmark.queries) * len(hashes) * self.config.default_top_n
            if cost <= self.max_rerank_scores:
                for name in hashes:
                    parts.append(self._computed_rerank_per_query(name, hashes[name], rr_hash, progress))
                sources.append("reranker effect computed here")
            else:
                raise ServiceError(
                    f"sorting by the reranker's effect needs reranked results for all {len(self.benchmark.queries):,} "
                    f"queries ({cost:,} candidate scores); the app computes them in the background when it "
                    f"starts (an eval run with {self.reranker_name}), and offers this sort once they exist"
                )
        self._failure_source = "; ".join(sources)
        return pd.concat(parts, ignore_index=True)

    def _cached_per_query_path(self, name: str, spec_hash: str) -> Path:
        """The app's cache of column `name`'s rows: keyed by the benchmark, the column's spec, the depth
        it is ranked to and the code that scores the rows (the family's per-query metrics)."""
        from cir_demo.paths import cache_dir
        from cir_demo.utils.code_hash import code_key

        code = code_key(SCORING_CODE)["sha256"][:12]
        folder = cache_dir() / "app" / "per_query" / self.fingerprint
        return folder / f"{name}-{spec_hash[:16]}-k{self._eval_depth(name)}-c{code}.csv"

    def _eval_depth(self, name: str) -> int:
        """How deep `--eval` ranks for column `name` (`RetrievalEngine.eval_depth`: a results file's whole
        ranking, a model's top DEFAULT_K), so the per-query rows here are its rows."""
        return self.engine.eval_depth(name)

    def _sort_columns(self) -> list[str]:
        """The per_query.csv columns the failure sorts read (A vs B: any metric `diff_metrics` names)."""
        return [
            "run",
            "query_id",
            "group_id",
            *dict.fromkeys(
                [
                    *sort_columns(self.family, diff_metrics(self.family)),
                    *self.views.measures,
                    *([self.views.finer] if self.views.finer else []),
                ]
            ),
        ]

    def _scored_frame(self, name: str, run: Mapping[str, Sequence[str]]) -> pd.DataFrame:
        df = per_query_frame(self.family, name, run, self.benchmark.queries)
        return df[[c for c in self._sort_columns() if c in df.columns]]

    def _computed_per_query(self, name: str, spec_hash: str, progress) -> pd.DataFrame:
        path = self._cached_per_query_path(name, spec_hash)
        cached = _read_cached(path)
        if cached is not None:
            return cached

        def report(done: int, total: int) -> None:
            if progress:
                progress(f"retrieving with {name}: {done:,}/{total:,} queries")

        run, _ = self.engine.run_benchmark(name, k=self._eval_depth(name), progress=report)
        df = self._scored_frame(name, run)
        _save_optional(path, df)
        return df

    def _computed_rerank_per_query(self, name: str, spec_hash: str, rr_hash: str, progress) -> pd.DataFrame:
        top_n = self.config.default_top_n
        path = self._cached_per_query_path(name, spec_hash).with_suffix("")
        path = path.with_name(f"{path.name}+{rr_hash}-top{top_n}.csv")
        cached = _read_cached(path)
        if cached is not None:
            return cached
        if progress:
            progress(f"reranking the top {top_n} of {name} for every query")
        run, scores = self.engine.run_benchmark(name, k=self._eval_depth(name))
        rr = self.engine.rerank_run(
            self.reranker_name, run, scores, top_n=top_n, reranker_kw=dict(self.config.reranker_kwargs)
        )
        df = self._scored_frame(f"{name}{RERANK_SUFFIX}", rr.run)
        _save_optional(path, df)
        return df


def _read_cached(path: Path) -> pd.DataFrame | None:
    """A per-query cache file, or None when there is none or it cannot be read (then it is computed)."""
    if not path.is_file():
        return None
    try:
        return pd.read_csv(path, dtype={"query_id": str, "group_id": str, "run": str})
    except (OSError, ValueError):
        return None


def _save_optional(path: Path, df: pd.DataFrame) -> None:
    """Write a cache file; a folder that cannot take it only costs a recomputation next start."""
    from cir_demo.utils.io import write_text_atomic

    try:
        write_text_atomic(path, df.to_csv(index=False))
    except OSError as exc:
        log.warning("per-query cache %s not written: %s", path, exc)
