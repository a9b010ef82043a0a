"""The benchmark-selection flags every command shares (`eval`, `validate`, `index`, `rerank`,
the app), and the loader they feed. One definition, so a flag means the same everywhere."""
from __future__ import annotations

import argparse

# benchmark loader keyword <- CLI attribute
LOADER_ARGS = {
    "annotations": "annotations",
    "corpus_ids": "corpus_ids",
    "root": "root",
    "image_dir": "image_dir",
    "size": "world_size",
    "seed": "world_seed",
    "split": "split",
}


def add_benchmark_arguments(p: argparse.ArgumentParser, default: str | None = "world", required: bool = False,
                            limit: bool = True, benchmark_help: str | None = None) -> argparse._ArgumentGroup:
    """Add the "benchmark" argument group to `p` and return it."""
    from cir_demo.benchmarks.registry import BENCHMARKS

    *first, last = BENCHMARKS
    g = p.add_argument_group("benchmark")
    g.add_argument("--benchmark", default=None if required else default, required=required,
                   help=benchmark_help or (", ".join(first) + f" or {last}"
                                           + (f" (default: {default})" if default and not required else "")))
    g.add_argument("--annotations", help="PinPoint parquet or CIRCO annotations/val.json")
    g.add_argument("--corpus-ids", help="corpus id list (PinPoint index_signatures.txt; optional for CIRCO)")
    g.add_argument("--root", help="benchmark folder (EDIR, jsonl, or a generated world)")
    g.add_argument("--image-dir", help="folder of benchmark images")
    g.add_argument("--split", help="CIRR split: val (default) or test1")
    g.add_argument("--world-size", default=None, choices=["tiny", "default"], help="offline world size (default: default)")
    g.add_argument("--world-seed", type=int, default=None, help="offline world seed (default 0)")
    if limit:
        g.add_argument("--limit", type=int, default=None, help="only the first N paraphrase groups")
    return g


def add_dry_run_and_debug(g, would: str) -> None:
    """`--dry-run` (what the command `would` do, timed on a small batch; creates nothing) and `--debug`."""
    g.add_argument("--dry-run", action="store_true",
                   help=f"print what the {would}, with a time estimate measured on a small batch on this device; "
                        "creates nothing")
    g.add_argument("--debug", action="store_true", help="show the traceback of a failure")


def benchmark_kwargs(args: argparse.Namespace) -> dict:
    """The loader keywords the flags in `args` set."""
    return {k: getattr(args, attr) for k, attr in LOADER_ARGS.items() if getattr(args, attr, None) is not None}


def load_benchmark_from_args(args: argparse.Namespace, name: str | None = None):
    """The benchmark the flags name (cut to `--limit` paraphrase groups when given)."""
    from cir_demo.benchmarks.registry import load_benchmark

    bench = load_benchmark(name or args.benchmark, **benchmark_kwargs(args))
    limit = getattr(args, "limit", None)
    return bench.limit(limit) if limit else bench
