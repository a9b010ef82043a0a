"""The CIRCO evaluation server's submission file, from any run on the test split.

The server (miccunifi/CIRCO, README "Submission Format"; its src/evaluation.py) takes one JSON object
mapping every query id of the split to the ids of its top 50 retrieved images, as COCO integers:

    {"0": [9761, 489535, ...], "1": [...], ..., "799": [...]}

It asserts the keys are exactly the query ids 0..N-1, so every query needs a ranking. The ranking is
sent as ranked (CIRCO's metrics keep the reference image where the run put it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from cir_demo.benchmarks.schema import Benchmark, BenchmarkError
from cir_demo.results.submission_checks import examples, refuse_problems, usable_rankings
from cir_demo.utils.io import write_json_atomic

TOP = 50


def submission_entries(benchmark: Benchmark, run: Mapping[str, Sequence[str]]) -> tuple[dict[str, list], list[str]]:
    """({query id: top 50 image ids (ints)}, warnings). BenchmarkError when a query has no ranking, a ranking
    repeats an image or names an id that is not a COCO integer: the server would refuse or misscore it."""
    out: dict[str, list] = {}
    usable, missing, repeated = usable_rankings(benchmark, run)
    not_int, short = [], 0
    for q, ranking in usable:
        top = list(ranking[:TOP])
        bad = [i for i in top if not str(i).isdigit()]
        if bad:
            not_int.append(f"{q.query_id} ({bad[0]!r})")
            continue
        short += len(top) < TOP
        out[q.query_id] = [int(i) for i in top]
    refuse_problems(
        missing,
        "queries have no ranking (e.g. {examples}); the server requires every query id of the split",
        repeated,
        (f"{len(not_int)} rankings name an image id that is not a COCO integer (e.g. {examples(not_int)})", not_int),
    )
    notes = [f"{short} rankings list fewer than {TOP} images"] if short else []
    if (benchmark.info or {}).get("split") != "test":
        notes.append(
            "this is not the test split: the server scores test.json's queries (--split test); a val "
            "file is only useful with CIRCO's src/evaluation.py"
        )
    return out, notes


def submission_path(out_dir: str | Path, name: str) -> Path:
    return Path(out_dir) / f"circo_test_submission_{name}.json"


def write_circo_submission(
    benchmark: Benchmark, run: Mapping[str, Sequence[str]], out_dir: str | Path, name: str
) -> tuple[dict[str, Path], list[str]]:
    """Write the submission file of `run` (`submission_path`) into `out_dir`: ({"predictions": path}, notes)."""
    if benchmark.metric_family != "circo":
        raise BenchmarkError(f"benchmark {benchmark.name!r}: this submission file is CIRCO's")
    entries, notes = submission_entries(benchmark, run)
    path = submission_path(out_dir, name)
    write_json_atomic(path, entries, indent=None)
    return {"predictions": path}, notes
