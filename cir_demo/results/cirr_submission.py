"""CIRR test-server submission files, from any run on the test1 split.

The server (Cuberick-Orion/CIRR, Test-split_server.md) takes two JSON objects:

    {"version": "rc2", "metric": "recall", "<pairid>": [top 50 images], ...}
    {"version": "rc2", "metric": "recall_subset", "<pairid>": [top 3 images of the img_set], ...}

Both lists are taken after the query's reference image is deleted from its ranking, as CLIP4Cir's
`cirr_test_submission.py` does; the subset list is the ranking cut to the img_set members (the
reference excluded), members the run never ranked appended in the set's order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from cir_demo.benchmarks.schema import Benchmark, BenchmarkError
from cir_demo.benchmarks.scoped import subset_of
from cir_demo.results.submission_checks import refuse_problems, usable_rankings
from cir_demo.utils.io import write_json_atomic

VERSION = "rc2"
TOP_RECALL, TOP_SUBSET = 50, 3


def submission_entries(benchmark: Benchmark, run: Mapping[str, Sequence[str]]) -> tuple[dict, dict, list[str]]:
    """({pairid: top 50}, {pairid: top 3 of the set}, warnings) for the queries `run` ranks.

    Raises BenchmarkError when a query has no ranking or a ranking repeats an image: the server
    scores every pair, so a partial file would be scored as if the missing pairs had failed.
    """
    recall: dict[str, list[str]] = {}
    subset: dict[str, list[str]] = {}
    usable, missing, repeated = usable_rankings(benchmark, run)
    short, unseen = 0, 0
    for q, ranking in usable:
        ref = q.reference_ids[0]
        kept = [i for i in ranking if i != ref]
        members = [m for m in subset_of(q.judgments) if m != ref]
        in_set = set(members)
        ranked_members = [i for i in kept if i in in_set]
        seen = set(ranked_members)
        unseen += len(seen) < len(members)
        short += len(kept) < TOP_RECALL
        recall[q.query_id] = kept[:TOP_RECALL]
        subset[q.query_id] = (ranked_members + [m for m in members if m not in seen])[:TOP_SUBSET]
    refuse_problems(missing, "pairs have no ranking (e.g. {examples}); the server scores every pair", repeated)
    notes = []
    if short:
        notes.append(f"{short} rankings list fewer than {TOP_RECALL} images once the reference is deleted")
    if unseen:
        notes.append(f"{unseen} rankings lack some img_set members; those are appended in the set's order")
    return recall, subset, notes


def submission_paths(out_dir: str | Path, name: str) -> dict[str, Path]:
    """`recall_submission_<name>.json` and `recall_subset_submission_<name>.json` (CLIP4Cir's names)."""
    out = Path(out_dir)
    return {
        "recall": out / f"recall_submission_{name}.json",
        "recall_subset": out / f"recall_subset_submission_{name}.json",
    }


def write_cirr_submission(
    benchmark: Benchmark, run: Mapping[str, Sequence[str]], out_dir: str | Path, name: str
) -> tuple[dict[str, Path], list[str]]:
    """Write the two submission files of `run` (submission_paths) into `out_dir`."""
    if benchmark.metric_family != "cirr":
        raise BenchmarkError(f"benchmark {benchmark.name!r}: submission files are written for CIRR only")
    recall, subset, notes = submission_entries(benchmark, run)
    paths = submission_paths(out_dir, name)
    write_json_atomic(paths["recall"], {"version": VERSION, "metric": "recall", **recall}, indent=None)
    write_json_atomic(paths["recall_subset"], {"version": VERSION, "metric": "recall_subset", **subset}, indent=None)
    return paths, notes
