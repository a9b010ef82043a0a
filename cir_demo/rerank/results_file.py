"""Reranking a results file (`python -m cir_demo rerank`): the top n of every query reordered,
written in the file's own format (`_spec` holds the first stage's spec and the reranker's with
its exact prompt template), and beside it `<out>.rerank.json` with every candidate's first-stage
rank and score, P(yes), new rank and flag.
"""

from __future__ import annotations

from pathlib import Path

from cir_demo.rerank.rerank import RunRerank, rerank_run


def rerank_results_file(bench, first, reranker, out: Path, top_n: int, cache=None) -> tuple[RunRerank, Path]:
    """Rerank results file `first` (read on `bench`) into `out`; closes `reranker` and `cache`.
    (the rerank, the details file)."""
    from cir_demo.results import write_results
    from cir_demo.utils.io import write_json_atomic

    try:
        result = rerank_run(
            bench.queries,
            first.run,
            bench.images.open,
            reranker,
            top_n=top_n,
            cache=cache,
            run_scores=first.scores or None,
        )
    finally:
        if cache is not None:
            cache.close()
        reranker.close()
    spec = {
        "first_stage": first.spec,
        "first_stage_file": str(first.path),
        "reranker": {"spec": result.spec, "spec_hash": result.spec_hash, "top_n": result.top_n},
    }
    write_results(out, bench, result.run, spec=spec, fmt=first.format)
    details = out.with_name(out.stem + ".rerank.json")
    write_json_atomic(details, {"first_stage_file": str(first.path), **result.to_dict()}, indent=None)
    return result, details
