"""Writing a reranked results file (`python -m cir_demo rerank`, harness/rerank_run.py): the top n of
every query reordered, written in the first-stage file's own format (`_spec` holds the first stage's
spec and the reranker's with its exact prompt template), and beside it `<out>.rerank.json` with every
candidate's first-stage rank and score, P(yes), new rank and flag.
"""

from __future__ import annotations

from pathlib import Path

from cir_demo.rerank.rerank import RunRerank


def write_reranked_file(bench, first, result: RunRerank, out: Path) -> Path:
    """The reranked run `result` of results file `first` (read on `bench`) written to `out`, and its
    details file beside it; returns the details file's path."""
    from cir_demo.results import write_results
    from cir_demo.utils.io import write_json_atomic

    spec = {
        "first_stage": first.spec,
        "first_stage_file": str(first.path),
        "reranker": {"spec": result.spec, "spec_hash": result.spec_hash, "top_n": result.top_n},
    }
    write_results(out, bench, result.run, spec=spec, fmt=first.format)
    details = out.with_name(out.stem + ".rerank.json")
    write_json_atomic(details, {"first_stage_file": str(first.path), **result.to_dict()}, indent=None)
    return details
