"""A benchmark's statistics as `validate` prints them: sizes, paraphrase groups, reference images,
judgment distributions, metadata values."""

from __future__ import annotations

import statistics
from collections import Counter

_TOP_VALUES = 8


def _distribution(values: list[int]) -> str:
    if not values:
        return "none"
    return (
        f"min {min(values)}, median {statistics.median(values):g}, mean {statistics.fmean(values):.2f}, "
        f"max {max(values)} (total {sum(values)})"
    )


def format_stats(bench) -> str:
    """Counts a reader checks first: sizes, groups, image counts, judgment distributions, metadata."""
    groups = bench.groups()
    sizes = [len(g) for g in groups.values()]
    n_single = sum(1 for q in bench.queries if len(q.reference_ids) == 1)
    lines = [
        f"benchmark: {bench.name} (metric family {bench.metric_family}, results ids {bench.results_id_format})",
        f"queries: {len(bench.queries)}",
        f"paraphrase groups: {len(groups)} (queries per group: {_distribution(sizes).split(' (total')[0]}; "
        f"{sum(1 for s in sizes if s == 1)} single-query groups)",
        f"corpus: {len(bench.corpus_ids)} images",
        f"reference images: {n_single} single-image queries, {len(bench.queries) - n_single} two-image queries, "
        f"{len({q.reference_ids for q in bench.queries})} distinct reference sets",
        f"positives per query: {_distribution([len(q.positives) for q in bench.queries])}",
        f"negatives per query: {_distribution([len(q.negatives) for q in bench.queries])}",
    ]
    for key in ("corpus_source", "image_dir", "image_mode", "grouping"):
        if bench.info.get(key):
            lines.append(f"{key.replace('_', ' ')}: {bench.info[key]}")
    for field in bench.meta_fields():
        counts: Counter = Counter()
        for q in bench.queries:
            v = q.meta.get(field)
            for item in v if isinstance(v, (list, tuple)) else [v]:
                counts["(none)" if item is None else str(item)] += 1
        top = ", ".join(f"{k} {n}" for k, n in counts.most_common(_TOP_VALUES))
        more = f", ... ({len(counts)} values)" if len(counts) > _TOP_VALUES else ""
        lines.append(f"meta {field}: {top}{more}")
    return "\n".join(lines)
