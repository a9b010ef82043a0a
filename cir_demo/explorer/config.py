"""What the app serves and its defaults: columns, reranker, filters, sorts, sizes, and the
service's error types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from cir_demo.benchmarks.registry import declared_defaults

# The benchmark's defaults (columns, reranker) and the "+rerank" run suffix are declared with the
# benchmark (cir_demo/benchmarks/registry.py), where `--eval` reads them too.
MAX_COLUMNS = 4
SEARCH_K = 50  # rankings are retrieved this deep (as `--eval` does), whatever the view shows
TILE_PX = 128
REFERENCE_PX = 224
MAX_QUERY_ROWS = 300  # rows the query list shows at once

# Filters the Explore tab offers, in order: meta key -> label.
FILTER_FIELDS = {
    "intent_category": "Intent type",
    "edit_subcategory": "Edit subcategory",
    "domain": "Domain",
    "is_single": "Reference images",
    "skin_tone_bucket": "Skin tone (reference)",
}  # a metric family adds its own (`FailureViews.filters`: FashionIQ's category, i-CIR's instance, ...)


def filter_fields(views=None) -> dict[str, str]:
    """The filters of a family's benchmarks (`views`: its `FailureViews`), or of every family (None):
    the common ones, then the family's."""
    if views is not None:
        return {**FILTER_FIELDS, **views.filters}
    from cir_demo.benchmarks.families import FAMILIES

    out = dict(FILTER_FIELDS)
    for fam in FAMILIES.values():
        out.update({k: v for k, v in fam.views().filters.items() if k not in out})
    return out


SINGLE_LABELS = {True: "single image", False: "two images"}
# PinPoint's skin-tone buckets of the reference image, on the Monk skin tone scale (1 lightest .. 10 darkest)
SKIN_TONE_LABELS = {
    "LIGHTEST": "lightest (Monk 1-3)",
    "SECOND_LIGHTEST": "second lightest (Monk 4-5)",
    "SECOND_DARKEST": "second darkest (Monk 6-7)",
    "DARKEST": "darkest (Monk 8-10)",
}
NO_VALUE = "(none)"


class ServiceError(Exception):
    """A request the service cannot answer as asked; the message is written for the user."""


class UploadError(ServiceError):
    """An uploaded file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class ServiceConfig:
    """What the app serves. `retrievers=None` means the benchmark's defaults; `reranker=None`
    the default (the world verifier on the world, when registered), "none" disables it."""

    benchmark: str = "world"
    benchmark_kwargs: Mapping[str, Any] = field(default_factory=dict)
    retrievers: tuple[str, ...] | None = None
    reranker: str | None = None
    reranker_kwargs: Mapping[str, Any] = field(default_factory=dict)
    limit_groups: int | None = None
    device: str | None = None
    allow_stale: bool = False
    index_uri: str | None = None  # the corpus indexes in Milvus (`--index-uri`); None: faiss files
    trust_remote_code: bool = False  # retrievers that run model-repo code (BGE-VL, GME): explicit opt-in only
    warm_thumbnails: bool = True  # a background process fills the thumbnail and pixel caches
    pixel_cache: bool = True  # serve exact pixels from the PNG cache instead of re-rendering
    # torch CPU threads while serving (index builds before use torch's default). One is fastest for
    # single queries on a busy CPU: with two, OpenMP threads wait on each other (docs/benchmarks.md).
    threads: int | None = 1
    default_top_n: int = 20
    # `--runs`: (column name, results file) pairs served as columns (beside `retrievers` when those are
    # named, instead of the benchmark's default models when not), and eval run folders the Report lists
    runs: tuple[tuple[str, str], ...] = ()
    run_folders: tuple[str, ...] = ()


def default_retrievers(benchmark_name: str, known: Iterable[str]) -> list[str]:
    """The app's columns when none are named: the benchmark's declared `app_columns` that are registered."""
    known = set(known)
    spec = declared_defaults(benchmark_name)
    return [n for n in (spec.app_columns if spec else ()) if n in known]


def resolve_reranker(benchmark_name: str, requested: str | None, backends: Iterable[str]) -> tuple[str | None, str]:
    """(backend name or None, a sentence for the user about the reranker)."""
    backends = set(backends)
    if requested is not None and requested.lower() == "none":
        return None, "Reranker disabled (--reranker none)."
    if requested is not None:
        if requested not in backends:
            from cir_demo.utils.names import UnknownNameError

            raise UnknownNameError("reranker backend", requested, backends)
        return requested, f"Reranker: {requested}."
    spec = declared_defaults(benchmark_name)
    default = spec.default_reranker if spec else None
    if default and default in backends:
        return default, f"Reranker: {default}."
    if default:
        return None, (
            f"The reranker toggle is off: the {default!r} model is not available yet "
            "(train it, or start the app with --reranker NAME)."
        )
    return None, "No reranker configured (start the app with --reranker NAME to enable the toggle)."


def retriever_modality(config: Mapping[str, Any]) -> str:
    """'image', 'text' or 'composed': what a retriever's query vector looks at; 'file' for a results file
    (what its run looked at is not known here)."""
    if config.get("family") == "precomputed":
        return "file"
    recipe = config.get("recipe")
    if recipe == "image_only":
        return "image"
    if recipe == "text_only":
        return "text"
    name = str(config.get("name", ""))
    if recipe is None and name.endswith("-image"):
        return "image"
    if recipe is None and name.endswith("-text"):
        return "text"
    return "composed"


MODALITY_LABELS = {"image": "image only", "text": "text only", "composed": "composed", "file": "results file"}
