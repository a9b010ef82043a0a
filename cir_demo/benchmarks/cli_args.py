"""The benchmark-selection flags every command shares (`eval`, `validate`, `index`, `rerank`,
the app), and the loader they feed. One definition, so a flag means the same everywhere."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

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


def add_benchmark_arguments(
    p: argparse.ArgumentParser,
    default: str | None = "world",
    required: bool = False,
    limit: bool = True,
    benchmark_help: str | None = None,
) -> argparse._ArgumentGroup:
    """Add the "benchmark" argument group to `p` and return it."""
    from cir_demo.benchmarks.registry import BENCHMARKS

    *first, last = BENCHMARKS
    g = p.add_argument_group("benchmark")
    g.add_argument(
        "--benchmark",
        default=None if required else default,
        required=required,
        help=benchmark_help
        or (", ".join(first) + f" or {last}" + (f" (default: {default})" if default and not required else "")),
    )
    g.add_argument("--annotations", help="PinPoint parquet, or CIRCO annotations/<split>.json or its folder")
    g.add_argument("--corpus-ids", help="corpus id list (PinPoint index_signatures.txt; optional for CIRCO)")
    g.add_argument("--root", help="benchmark folder (EDIR, jsonl, or a generated world)")
    g.add_argument("--image-dir", help="folder of benchmark images")
    g.add_argument(
        "--split",
        help="CIRR: val (default) | test1; CIRCO: val (default) | test; world: test | "
        "compositional (held-out edits on the same corpus); --eval on the world "
        "without --split reports both",
    )
    g.add_argument(
        "--world-size",
        default=None,
        help="offline world size: tiny, default, or either with a held-out fold, e.g. default-fold1 (default: default)",
    )
    g.add_argument("--world-seed", type=int, default=None, help="offline world seed (default 0)")
    if limit:
        g.add_argument("--limit", type=int, default=None, help="only the first N paraphrase groups")
    else:
        p.set_defaults(limit=None)  # every command's benchmark flags unpack alike (`BenchmarkChoice.from_args`)
    return g


def add_dry_run_and_debug(g, would: str) -> None:
    """`--dry-run` (what the command `would` do, timed on a small batch; creates nothing) and `--debug`."""
    g.add_argument(
        "--dry-run",
        action="store_true",
        help=f"print what the {would}, with a time estimate measured on a small batch on this device; creates nothing",
    )
    g.add_argument("--debug", action="store_true", help="show the traceback of a failure")


def benchmark_kwargs(args: argparse.Namespace) -> dict:
    """The loader keywords the flags in `args` set."""
    given = vars(args)  # a flag its command does not define is not given
    return {k: given[attr] for k, attr in LOADER_ARGS.items() if given.get(attr) is not None}


def benchmark_flags(benchmark: str, kwargs: dict, limit: int | None = None) -> list[str]:
    """The command-line flags that select `benchmark` with loader keywords `kwargs` (the inverse of
    `benchmark_kwargs`), for a child command such as the app's background `--eval` run. Generated from
    the benchmark's declaration, so every argument it takes travels (`--split` included); a keyword
    that no flag sets is a ValueError naming it."""
    from cir_demo.benchmarks.registry import declared_defaults

    spec = declared_defaults(benchmark)
    declared = spec.arguments if spec is not None else tuple(kwargs)
    argv = ["--benchmark", benchmark]
    for key in declared:
        if kwargs.get(key) is None:
            continue
        if key not in LOADER_ARGS:
            raise ValueError(
                f"benchmark {benchmark!r}: argument {key!r} has no command-line flag, so a child "
                "command cannot be given it"
            )
        argv += [f"--{LOADER_ARGS[key].replace('_', '-')}", str(kwargs[key])]
    unknown = sorted(set(k for k, v in kwargs.items() if v is not None) - set(declared))
    if unknown:
        raise ValueError(f"benchmark {benchmark!r} does not take {', '.join(unknown)}")
    return argv + (["--limit", str(limit)] if limit else [])


@dataclass(frozen=True)
class BenchmarkChoice:
    """The benchmark a command's flags select, unpacked once from them (`from_args`): its name, the
    loader keywords the flags set and `--limit`."""

    name: str
    kwargs: dict = field(default_factory=dict)
    limit: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, name: str | None = None) -> BenchmarkChoice:
        return cls(name or args.benchmark, benchmark_kwargs(args), args.limit)

    @property
    def split(self) -> str | None:
        return self.kwargs.get("split")

    def load(self, split: str | None = None):
        """The benchmark (with `split` in place of its default split when given), cut to `--limit`
        paraphrase groups when given."""
        from cir_demo.benchmarks.registry import load_benchmark

        bench = load_benchmark(self.name, **{**self.kwargs, **({"split": split} if split else {})})
        return bench.limit(self.limit) if self.limit else bench


def load_benchmark_from_args(args: argparse.Namespace, name: str | None = None):
    """The benchmark the flags name (cut to `--limit` paraphrase groups when given)."""
    return BenchmarkChoice.from_args(args, name).load()
