"""Which of a benchmark's images are on this machine, and the benchmark cut to them.

A run needs every corpus image (to index it) and every query's reference images.
`image_coverage` counts what is present without opening anything; `restrict_to_present`
gives the benchmark a run can do with what it has: the corpus images present and the
queries whose references are all present (the coverage is stated, never silent).
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field

from cir_demo.benchmarks.cli_args import LOADER_ARGS, BenchmarkChoice


@dataclass
class ImageCoverage:
    corpus_total: int
    corpus_present: int
    refs_total: int
    refs_present: int
    missing: list[str] = field(default_factory=list)  # every missing id (corpus first)
    looked_in: list[str] = field(default_factory=list)  # folders searched
    fetchable: bool = False  # the store has a URL pattern and a cache folder

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def n_missing(self) -> int:
        return len(self.missing)

    def describe(self) -> str:
        return (
            f"{self.corpus_present} of {self.corpus_total} corpus images and {self.refs_present} of "
            f"{self.refs_total} reference images present (looked in {', '.join(self.looked_in) or 'no folder'})"
        )


def has_file_images(bench) -> bool:
    """Images that live in files (a folder or a download cache), as opposed to generated ones."""
    return bench.images is not None and hasattr(bench.images, "local_path")


def reference_ids(bench) -> list[str]:
    return list(dict.fromkeys(r for q in bench.queries for r in q.reference_ids))


def needed_image_ids(bench) -> list[str]:
    """Every image a run opens: the corpus, then reference images outside it."""
    return list(dict.fromkeys(list(bench.corpus_ids) + reference_ids(bench)))


def image_coverage(bench) -> ImageCoverage | None:
    """None when the benchmark's images are generated (always present) or it has none."""
    if not has_file_images(bench):
        return None
    store = bench.images
    present: dict[str, bool] = {}

    def has(i: str) -> bool:
        if i not in present:
            try:
                present[i] = store.local_path(i) is not None
            except ValueError:  # an id that cannot be a file name: it can never be present
                present[i] = False
        return present[i]

    corpus_ok = sum(has(i) for i in bench.corpus_ids)
    refs = reference_ids(bench)
    refs_ok = sum(has(i) for i in refs)
    looked = [str(p) for p in (getattr(store, "root", None), getattr(store, "cache_dir", None)) if p is not None]
    return ImageCoverage(
        corpus_total=len(bench.corpus_ids),
        corpus_present=corpus_ok,
        refs_total=len(refs),
        refs_present=refs_ok,
        missing=[i for i in needed_image_ids(bench) if not present[i]],
        looked_in=looked,
        fetchable=getattr(store, "url_pattern", None) is not None and getattr(store, "cache_dir", None) is not None,
    )


def restrict_to_present(bench, cov: ImageCoverage):
    """The benchmark on the images present: their corpus, and the queries whose references are all present."""
    if cov.complete:
        return bench
    missing = set(cov.missing)
    queries = [q for q in bench.queries if not any(r in missing for r in q.reference_ids)]
    info = {k: v for k, v in (bench.info or {}).items() if k not in ("corpus_fingerprint", "checksum")}
    info["image_coverage"] = (
        f"{cov.corpus_present} of {cov.corpus_total} corpus images, "
        f"{len(queries)} of {len(bench.queries)} queries"
    )  # a string: run_info.json keeps it
    return dataclasses.replace(
        bench, queries=queries, corpus_ids=[i for i in bench.corpus_ids if i not in missing], info=info
    )


def coverage_line(bench, kept) -> str:
    """One line stating what a run on `kept` (from `restrict_to_present(bench, ...)`) covers."""
    c, k = len(bench.corpus_ids), len(kept.corpus_ids)
    return (
        f"images: running on {k} of {c} corpus images ({100 * k / max(c, 1):.1f}%) and "
        f"{len(kept.queries)} of {len(bench.queries)} queries (those whose reference images are present); "
        "missing positives count as misses"
    )


def benchmark_flags(choice: BenchmarkChoice) -> str:
    """The benchmark-selection flags of `choice`, as a user would type them (for fix commands)."""
    parts = ["--benchmark", choice.name]
    for key, attr in LOADER_ARGS.items():
        value = choice.kwargs.get(key)
        if value is not None:
            parts += ["--" + attr.replace("_", "-"), str(value)]
    return " ".join(shlex.quote(p) for p in parts)


def fetch_command(choice: BenchmarkChoice) -> str:
    return f"python -m cir_demo images fetch {benchmark_flags(choice)}"


def missing_images_parts(cov: ImageCoverage, choice: BenchmarkChoice) -> tuple[str, str]:
    """(what is missing and where we looked, the fix)."""
    from cir_demo.benchmarks.registry import image_source

    source = image_source(choice.name)
    fix = (
        f"fetch them with `{fetch_command(choice)}` (or add --fetch-images to this command)"
        if cov.fetchable
        else (f"{source} " if source else "") + "put them in the folder given by --image-dir"
    )
    return f"{cov.n_missing} benchmark images are missing: {cov.describe()}", fix


def missing_images_message(cov: ImageCoverage, choice: BenchmarkChoice) -> str:
    """One line: how many are missing, where we looked, and the fix."""
    return "; ".join(missing_images_parts(cov, choice))
