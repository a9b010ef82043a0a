"""`python -m cir_demo rerank` runs here (its flags are parsed in rerank/cli.py): a results file is
reranked as the run store reranks every run (`store.produce_rerank`: the engine's images, reranker and
benchmark score cache, which `--eval` and the app share), so a candidate the command scored is read,
not scored again, by them, and the other way round. Above the rerank package because it needs the
engine and the store.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from cir_demo.benchmarks.cli_args import load_benchmark_from_args
    from cir_demo.benchmarks.schema import BenchmarkError
    from cir_demo.errors import print_error
    from cir_demo.results import read_results
    from cir_demo.utils.names import UnknownNameError

    try:
        bench = load_benchmark_from_args(args)
        first = read_results(args.results_json, bench, fmt=args.results_format)
    except (BenchmarkError, UnknownNameError, TypeError, FileNotFoundError) as exc:
        print_error(exc)  # a results file's problems say "error:" once each
        return 2
    if bench.images is None:
        print(f"error: benchmark {bench.name!r} has no images; the reranker needs pixels", file=sys.stderr)
        return 2
    from cir_demo.engine import RetrievalEngine
    from cir_demo.rerank.cli import backend_kwargs

    # encode_reranker_corpus off: the corpus features stored already are used, the others computed per
    # candidate (as the app does), so reranking a top n never encodes a whole corpus first
    engine = RetrievalEngine(bench, [], progress=False, encode_reranker_corpus=False)
    with tempfile.TemporaryDirectory(prefix="cir_demo-rerank-") as scratch:
        if args.no_cache or args.cache:  # --no-cache: a cache of this run only, never read again
            engine.use_score_cache(Path(scratch) / "scores.sqlite" if args.no_cache else Path(args.cache))
        try:
            try:
                kw = backend_kwargs(args)
                reranker = engine.reranker(args.backend, **kw)
            except (ValueError, TypeError, FileNotFoundError, UnknownNameError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            try:
                return _rerank(bench, first, engine, kw, args.backend, args.top_n, Path(args.out), args.overwrite)
            finally:
                reranker.close()
        finally:
            engine.close()


def _rerank(bench, first, engine, kw: dict, backend: str, top_n: int, out: Path, overwrite: bool) -> int:
    from cir_demo.rerank.results_file import write_reranked_file
    from cir_demo.store.store import produce_rerank
    from cir_demo.utils.owned_folder import writing_files

    with writing_files([out, out.with_name(out.stem + ".rerank.json")], overwrite):  # earlier ones kept aside
        result = produce_rerank(
            engine, backend, first.run, first.scores or None, top_n, bench.queries, kw, progress=True
        )
        details = write_reranked_file(bench, first, result, out)
    s = result.stats
    print(
        f"reranked {s['queries']} queries (top {top_n}): {s['candidates_scored']} candidates, "
        f"{s['from_cache']} from cache, {s['tokens_missing']} tokens missing, {s['errors']} errors, "
        f"{s['seconds']:.1f} s"
    )
    print(f"wrote {out} and {details}")
    if s["errors"]:
        print(
            f"warning: {s['errors']} candidates could not be scored and kept their first-stage slots; "
            "run again to retry them (errors are not cached)",
            file=sys.stderr,
        )
        return 1
    return 0
