"""The declared table of benchmarks: name -> loader, arguments, metric family, and the defaults
that `--eval` and the app both read (default retrievers, the app's first columns, default
reranker; the headline metrics and official columns come with the metric family).

Loaders are "module:function" strings imported only when a benchmark is
loaded, so listing benchmarks never imports pyarrow or the world generator.
Arguments are checked against the declaration before the loader runs:
unknown names get a "did you mean", missing required arguments a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from cir_demo.benchmarks.families import FAMILIES, MetricFamily
from cir_demo.benchmarks.schema import Benchmark
from cir_demo.utils.names import UnknownNameError, lookup, resolve_ref


@dataclass(frozen=True)
class GeneratedData:
    """Data a benchmark's loader generates when it is not on disk yet (the offline world)."""

    what: str  # for people: "the offline world"
    on_disk: str  # "module:function"(**loader arguments) -> bool: there already (checks, never generates)
    command: str  # the command that generates it ahead of a run
    seconds: str  # how long generating takes, for people: "about 5 s"
    # "module:function"(**loader arguments) -> bool: installs a shipped copy of the data when one matches
    # the code (True: on disk now, nothing to generate); "" when nothing is shipped
    install: str = ""


@dataclass(frozen=True)
class BenchmarkSpec:
    """One row of BENCHMARKS: everything the CLI, the doctor, `--eval` and the app know about a benchmark."""

    name: str
    description: str
    metric_family: str  # a key of benchmarks.families.FAMILIES, or "from manifest"
    loader: str  # "module:function"
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    # `--eval` runs these (those registered) when --retrievers is not given, in this order
    default_retrievers: tuple[str, ...] = ()
    # the app's columns when none are named: at most four of default_retrievers, in display order
    app_columns: tuple[str, ...] = ()
    # reranker backend used when none is named (when registered); "+rerank" names its runs
    default_reranker: str | None = None
    generated: GeneratedData | None = None  # data generated on first load instead of read from disk
    # the app's note when none of app_columns is registered ("{columns}" lists them); "" for the generic one
    no_models_hint: str = ""
    # shown above the app's upload tab and with every result on uploaded images ("" for none)
    upload_heading: str = ""
    upload_note: str = ""
    # the values `--split` takes (checked before any work; () when the loader checks its own)
    splits: tuple[str, ...] = ()
    # `--eval` without `--split` evaluates each of these over one corpus: the first at the top of the run
    # folder, the others in `<run folder>/<split>/`, with their headline metrics side by side in report.md
    eval_splits: tuple[str, ...] = ()
    # where the benchmark's image files come from and the folder layout its loader expects, for a benchmark
    # whose images have no per-image address (`images fetch` cannot download them): said instead of a fetch
    image_source: str = ""

    @property
    def arguments(self) -> tuple[str, ...]:
        return self.required + self.optional

    @property
    def family(self) -> MetricFamily | None:
        """Headline metrics, official columns, shown metrics (None when the data names its family)."""
        return FAMILIES.get(self.metric_family)


RERANK_SUFFIX = "+rerank"  # a reranked run is named "<retriever>+rerank" (results files, metrics.csv, per_query.csv)


BENCHMARKS: dict[str, BenchmarkSpec] = {
    s.name: s
    for s in (
        BenchmarkSpec(
            "world",
            "the offline procedurally rendered world (no downloads)",
            "pinpoint",
            "cir_demo.world:load_world",
            optional=("size", "seed", "root", "split"),
            default_retrievers=(
                "world-clip-image",
                "world-clip-text",
                "world-clip-fusion",
                "world-clip-slerp",
                "world-cir",
            ),
            app_columns=("world-cir", "world-clip-fusion", "world-clip-image", "world-clip-text"),
            default_reranker="world-verifier",
            generated=GeneratedData(
                "the offline world",
                "cir_demo.world.loader:world_on_disk",
                "python -m cir_demo world generate",
                "about 5 s",
                "cir_demo.world.loader:install_for_loader",
            ),
            no_models_hint=(
                "none of the world models ({columns}) is registered yet; train them "
                "(`python -m cir_demo train ...`, see docs/world_models.md) or start with "
                "--retrievers NAME,..."
            ),
            upload_heading="Your own images on the offline world.",
            upload_note=(
                "The offline world's models were trained only on the world's rendered scenes (flat, "
                "sketch and photo-style drawings of clothes, home objects and accessories). They do not "
                "understand real photos: with your own images expect results that look arbitrary. Upload "
                "world images (for example reference images saved from the Explore tab) to see them "
                "work."
            ),
            splits=("test", "compositional", "train"),
            eval_splits=("test", "compositional"),
        ),
        BenchmarkSpec(
            "pinpoint",
            "PinPoint: pinpoint_licensed.parquet + index_signatures.txt",
            "pinpoint",
            "cir_demo.benchmarks.pinpoint:load_pinpoint",
            required=("annotations",),
            optional=("corpus_ids", "image_dir", "cache_dir", "online"),
        ),
        BenchmarkSpec(
            "edir",
            "EDIR: queries.jsonl, corpus.jsonl, instances.jsonl + images",
            "edir",
            "cir_demo.benchmarks.edir:load_edir",
            required=("root",),
            optional=("image_dir",),
        ),
        BenchmarkSpec(
            "circo",
            "CIRCO: annotations/<split>.json (val; test for the server) + COCO unlabeled2017",
            "circo",
            "cir_demo.benchmarks.circo:load_circo",
            required=("annotations",),
            optional=("image_dir", "corpus_ids", "split"),
            splits=("val", "test"),
            image_source="CIRCO's images are COCO 2017's unlabeled images: download unlabeled2017.zip "
            "(and image_info_unlabeled2017.zip) from cocodataset.org/#download and unpack "
            "them as CIRCO/COCO2017_unlabeled/unlabeled2017/000000xxxxxx.jpg (found there by "
            "default) and CIRCO/COCO2017_unlabeled/annotations/image_info_unlabeled2017.json "
            "(give it as --corpus-ids).",
        ),
        BenchmarkSpec(
            "cirr",
            "CIRR: captions/cap.rc2.<split>.json + image_splits/split.rc2.<split>.json (+ images)",
            "cirr",
            "cir_demo.benchmarks.cirr:load_cirr",
            required=("root",),
            optional=("split", "image_dir"),
            splits=("val", "test1"),
            image_source="CIRR's images are NLVR2's raw images: request them from the NLVR2 authors "
            "(github.com/lil-lab/nlvr, nlvr2/README.md, 'direct image download') and unpack "
            "them so that the paths in image_splits/split.rc2.<split>.json (./dev/..., "
            "./test1/..., ./train/...) resolve under <root>/img_raw/ (found there by "
            "default), or give that folder as --image-dir.",
        ),
        BenchmarkSpec(
            "fashioniq",
            "FashionIQ val: captions/cap.<category>.val.json + image_splits/split.<category>.val.json",
            "fashioniq",
            "cir_demo.benchmarks.fashioniq:load_fashioniq",
            required=("root",),
            optional=("image_dir", "categories"),
            image_source="FashionIQ's images come with its release (github.com/XiaoxiaoGuo/fashion-iq: "
            "the image_url lists; many of those addresses are gone, so use the image "
            "archive its authors or a paper's repository share): put them as "
            "<root>/images/<image id>.jpg (found there by default), or give their folder "
            "as --image-dir.",
        ),
        BenchmarkSpec(
            "icir",
            "i-CIR: query_files.csv + database_files.csv (image_path,text,instance)",
            "icir",
            "cir_demo.benchmarks.icir:load_icir",
            required=("root",),
            optional=("image_dir",),
        ),
        BenchmarkSpec(
            "jsonl",
            "a benchmark folder in the project's JSONL format (docs/formats.md)",
            "from manifest",
            "cir_demo.benchmarks.jsonl:load_jsonl_benchmark",
            required=("root",),
        ),
    )
}


class BenchmarkArgumentError(TypeError):
    """A benchmark was asked for with missing or unknown arguments."""


def list_benchmarks() -> list[BenchmarkSpec]:
    return list(BENCHMARKS.values())


def get_spec(name: str) -> BenchmarkSpec:
    return lookup("benchmark", name, BENCHMARKS)


def resolve_loader(spec: BenchmarkSpec) -> Callable[..., Benchmark]:
    return resolve_ref(spec.loader, f"benchmark {spec.name!r}")


def check_arguments(spec: BenchmarkSpec, kwargs: dict[str, Any]) -> None:
    missing = [a for a in spec.required if kwargs.get(a) is None]
    if missing:
        flags = ", ".join(f"--{a.replace('_', '-')}" for a in missing)
        raise BenchmarkArgumentError(
            f"benchmark {spec.name!r} needs {', '.join(missing)} ({flags}); it takes {_describe(spec)}"
        )
    for key in kwargs:
        if key not in spec.arguments:
            try:
                lookup("argument", key, {a: None for a in spec.arguments})
            except UnknownNameError as exc:
                raise BenchmarkArgumentError(f"benchmark {spec.name!r}: {exc}") from None


def load_benchmark(name: str, **kwargs: Any) -> Benchmark:
    """Load a declared benchmark: `load_benchmark("pinpoint", annotations=..., corpus_ids=...)`.

    Arguments that are None are dropped (so CLI defaults pass through).
    """
    spec = get_spec(name)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    check_arguments(spec, kwargs)
    return resolve_loader(spec)(**kwargs)


def _describe(spec: BenchmarkSpec) -> str:
    req = ", ".join(spec.required) or "nothing required"
    opt = ", ".join(spec.optional)
    return f"{req}" + (f" (optional: {opt})" if opt else "")


def image_source(name: str) -> str:
    """Where a declared benchmark's images come from and the layout it expects ("" when not declared)."""
    spec = BENCHMARKS.get(name)
    return spec.image_source if spec is not None else ""


def declared_defaults(name: str) -> BenchmarkSpec | None:
    """The declaration of benchmark `name` (for its defaults), or None for a name not declared here
    (e.g. a JSONL benchmark's own name): such a benchmark has no default retrievers or reranker."""
    return BENCHMARKS.get(name)


def pending_generation(name: str, kwargs: dict[str, Any]) -> GeneratedData | None:
    """What loading benchmark `name` with `kwargs` would generate first (None: nothing, its data is
    there or it reads files). Checks only; generates nothing."""
    spec = declared_defaults(name)
    if spec is None or spec.generated is None:
        return None
    on_disk = resolve_ref(spec.generated.on_disk, f"benchmark {name!r} generated data")
    return None if on_disk(**{k: v for k, v in kwargs.items() if k in spec.arguments}) else spec.generated


def install_shipped(name: str, kwargs: dict[str, Any]) -> bool:
    """Install the shipped copy of benchmark `name`'s generated data for `kwargs` when one matches the code;
    True when the data is on disk now (nothing left to generate)."""
    spec = declared_defaults(name)
    if spec is None or spec.generated is None or not spec.generated.install:
        return False
    install = resolve_ref(spec.generated.install, f"benchmark {name!r} shipped data")
    return bool(install(**{k: v for k, v in kwargs.items() if k in spec.arguments}))
