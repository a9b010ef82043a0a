"""The query a first visit of the app opens, chosen when the shipped eval outputs are written
(`index prebuilt`) and read from their manifest when the app starts: a cold start's first page then
reads one small JSON field instead of waiting for the failure rows of a whole run (or decompressing
the shipped per-query rows) to choose it. The choice is `telling_query`'s, made for every set of
first-stage runs the app may show as columns; the explorer (`explorer/first_view.py`) computes it
the same way when the manifest has no choice for what it serves.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:  # pandas is imported by the functions that read rows: the manifest's readers need none
    import pandas as pd

FIELD = "first_query"  # the shipped manifest's field
MAX_RUNS_EVERY_SET = 6  # up to this many runs: a choice for every set of them (63); more: only for all of them


def telling_query(per_query: pd.DataFrame, primary: str, runs: Sequence[str], order: Sequence[str]) -> str | None:
    """Of the queries in `order` (the benchmark order), the one whose `runs` (first stage) differ most on
    `primary` while the best of them scores above 0 (a judged image ranked where the metric counts it);
    equal spreads: the earliest. With one run: its first query that scores. None: no such query."""
    rows = per_query[per_query["run"].isin(list(runs))]
    if rows.empty or primary not in rows:
        return None
    wide = rows.pivot_table(index="query_id", columns="run", values=primary, aggfunc="first")
    return _telling_in(wide, order)


def _telling_in(wide: pd.DataFrame, order: Sequence[str]) -> str | None:
    best, spread = wide.max(axis=1), wide.max(axis=1) - wide.min(axis=1)
    keep = (best > 0) & ((spread > 0) if wide.shape[1] > 1 else True)
    position = {q: i for i, q in enumerate(order)}
    candidates = [(-float(spread[q]), position[q], q) for q in wide.index[keep.to_numpy()] if q in position]
    return min(candidates)[2] if candidates else None


def runs_key(runs: Sequence[str]) -> str:
    """How a set of runs is named in the field: sorted, comma-joined (the app's column order aside)."""
    return ",".join(sorted(set(runs)))


def first_query_field(per_query: pd.DataFrame, primary: str, runs: Sequence[str], order: Sequence[str]) -> dict:
    """The manifest field: `primary`, and per set of `runs` (`runs_key`) the query a first visit opens
    (`telling_query`, else the first of `order`). One pivot over all runs; each set's choice from its columns."""
    runs = list(dict.fromkeys(runs))
    rows = per_query[per_query["run"].isin(runs)]
    choices: dict[str, str | None] = {}
    if not rows.empty and primary in rows and len(order):
        wide = rows.pivot_table(index="query_id", columns="run", values=primary, aggfunc="first")
        have = [r for r in runs if r in wide.columns]
        sizes = range(1, len(have) + 1) if len(have) <= MAX_RUNS_EVERY_SET else (len(have),)
        for size in sizes:
            for subset in combinations(have, size):
                chosen = _telling_in(wide[list(subset)].dropna(how="all"), order)
                choices[runs_key(subset)] = chosen or str(order[0])
    return {"primary": primary, "by_runs": choices}


def shipped_first_query(
    manifest: Mapping, fingerprint: str, primary: str, runs: Sequence[str], order: Sequence[str]
) -> str | None:
    """The query the shipped `manifest` chose for these `runs` of this benchmark content on `primary`;
    None when it holds no such choice (older outputs, other content or runs): compute it then."""
    field = manifest.get(FIELD)
    if not isinstance(field, Mapping) or (manifest.get("key") or {}).get("benchmark_fingerprint") != fingerprint:
        return None
    if field.get("primary") != primary or not isinstance(field.get("by_runs"), Mapping):
        return None
    chosen = field["by_runs"].get(runs_key(runs))
    return chosen if isinstance(chosen, str) and chosen in set(order) else None


def read_per_query(run_dir: Path, primary: str) -> pd.DataFrame:
    """run, query_id and `primary` of an `--eval` run folder's per_query.csv."""
    import pandas as pd

    return pd.read_csv(
        Path(run_dir) / "per_query.csv", usecols=["run", "query_id", primary], dtype={"query_id": str, "run": str}
    )
