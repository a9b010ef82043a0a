"""The explorer: the only thing the UI (`cir_demo/ui/`) calls.

It answers the questions the app asks of a benchmark, its retrievers, a reranker and
the latest `--eval` run, and returns plain data (dataclasses, pandas frames, data-URI
thumbnails); it never imports gradio, and none of its modules imports torch. Retrieval
goes through `RetrievalEngine`, so a ranking shown in the app is the ranking the report scored.

    loader = ServiceLoader(ServiceConfig(benchmark="world"))   # loads in a thread
    service = loader.wait()
    service.find_queries("dress", {"intent_category": "Swap"}, sort="negatives")   # or "worst", "diff:A,B"
    cmp = service.compare("w00001", ["world-cir", "world-clip-image"], k=10, rerank=True, top_n=20)
    img, notes = validate_upload("photo.heic")                  # UploadError names the file and problem

Heavy libraries (torch, faiss, open_clip) load inside the engine, on first use.

Modules, one concern each: `config` (what is served, defaults, error types), `queries` (query
table, search, filters), `failures` (the failure sorts, declared per metric family in
benchmarks/failure_views.py), `cli` (`python -m cir_demo failures`), `ranking_metrics` (per-query
metrics of a shown ranking), `images` (thumbnail and pixel stores, the warmer process),
`uploads` (validating uploaded images), `views` (the dataclasses returned), `runs` (eval run
reports), `own_runs` (results files as columns: `--runs`, uploads), `paired` (the Report's
scores and paired comparisons of those), `per_query_rows` (the failure sorts' rows, from the run
store), `service` (`ExplorerService`, which holds a `store.RunStore`: every run it reads comes from
there), `loader` (building it, in the background), `api` (the JSON answers of the app's API endpoints).
"""

from cir_demo.explorer.config import (
    FILTER_FIELDS,
    MAX_COLUMNS,
    MAX_QUERY_ROWS,
    MODALITY_LABELS,
    NO_VALUE,
    REFERENCE_PX,
    SEARCH_K,
    TILE_PX,
    ServiceConfig,
    ServiceError,
    UploadError,
    default_retrievers,
    filter_fields,
    resolve_reranker,
    retriever_modality,
)
from cir_demo.explorer.failures import SortChoice, SortContext, negatives_in_top10, sort_choices, sort_rows
from cir_demo.explorer.images import (
    PixelCachedStore,
    ThumbnailStore,
    encode_jpeg_data_uri,
    start_image_warmer,
    warm_images,
    warm_thumbnails,
)
from cir_demo.explorer.loader import LoadStatus, RememberingStore, ServiceLoader, build_service
from cir_demo.explorer.queries import filter_choices, filter_queries, filter_value, query_table
from cir_demo.explorer.ranking_metrics import metrics_many, query_metrics
from cir_demo.explorer.runs import load_report, metrics_display_table
from cir_demo.explorer.service import ExplorerService
from cir_demo.store.folders import list_runs
from cir_demo.explorer.uploads import ValidatedImage, validate_upload
from cir_demo.explorer.views import (
    Column,
    Comparison,
    Paraphrase,
    QueryList,
    QueryView,
    Report,
    RunSummary,
    Tile,
    fill_metrics,
)

__all__ = [
    "FILTER_FIELDS",
    "MAX_COLUMNS",
    "MAX_QUERY_ROWS",
    "MODALITY_LABELS",
    "NO_VALUE",
    "REFERENCE_PX",
    "SEARCH_K",
    "TILE_PX",
    "ServiceConfig",
    "ServiceError",
    "UploadError",
    "default_retrievers",
    "filter_fields",
    "resolve_reranker",
    "retriever_modality",
    "SortChoice",
    "SortContext",
    "negatives_in_top10",
    "sort_choices",
    "sort_rows",
    "PixelCachedStore",
    "ThumbnailStore",
    "encode_jpeg_data_uri",
    "start_image_warmer",
    "warm_images",
    "warm_thumbnails",
    "LoadStatus",
    "RememberingStore",
    "ServiceLoader",
    "build_service",
    "filter_choices",
    "filter_queries",
    "filter_value",
    "query_table",
    "metrics_many",
    "query_metrics",
    "list_runs",
    "load_report",
    "metrics_display_table",
    "ExplorerService",
    "ValidatedImage",
    "validate_upload",
    "Column",
    "Comparison",
    "Paraphrase",
    "QueryList",
    "QueryView",
    "Report",
    "RunSummary",
    "Tile",
    "fill_metrics",
]
