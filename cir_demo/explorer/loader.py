"""Building an `ExplorerService`: the benchmark, retrievers and their indexes, the reranker, the
image caches; `ServiceLoader` does it in a background thread and reports progress."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from cir_demo.benchmarks.registry import declared_defaults
from cir_demo.explorer.config import ServiceConfig, ServiceError, default_retrievers, resolve_reranker
from cir_demo.explorer.images import PixelCachedStore, pixel_db_path, start_image_warmer, usable_blob_db
from cir_demo.paths import DataFolderError
from cir_demo.explorer.service import ExplorerService

log = logging.getLogger(__name__)


@dataclass
class LoadStatus:
    stage: str
    done: bool
    error: str | None
    elapsed: float
    detail: str = ""

    def text(self) -> str:
        if self.error:
            return f"Loading failed: {self.error}"
        if self.done:
            return f"Ready in {self.elapsed:.1f} s."
        return f"{self.stage} ({self.elapsed:.0f} s){': ' + self.detail if self.detail else ''}"


def live_progress_bars() -> str:
    """What the running tqdm bars say (index builds, world generation), for the status line."""
    try:
        from tqdm import tqdm

        bars = list(getattr(tqdm, "_instances", []))
    except Exception:
        return ""
    parts = []
    for bar in bars:
        total = getattr(bar, "total", None)
        if total:
            parts.append(f"{getattr(bar, 'desc', '') or 'working'} {getattr(bar, 'n', 0):,}/{int(total):,}")
    return "; ".join(parts)


class ServiceLoader:
    """Builds an `ExplorerService` in a background thread so the page can show progress:
    the world generated on first use, retriever models loaded, indexes built or loaded."""

    def __init__(self, config: ServiceConfig, start: bool = True, world_child=None):
        self.config = config
        # a first start's world generation begins now (unless the caller began it earlier: `world_child`),
        # while the caller still builds and serves the page
        self._world_child = world_child or generate_world_aside(config)
        self._service: ExplorerService | None = None
        self._error: BaseException | None = None
        self._stage = "starting"
        self._t0 = time.perf_counter()
        self._t_done: float | None = None
        self._event = threading.Event()
        self._callbacks: list = []  # when_done's, until loading ends
        self._callbacks_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="cir-demo-loader", daemon=True)
        if start:
            self._thread.start()

    def start(self) -> "ServiceLoader":
        if not self._thread.is_alive() and not self._event.is_set():
            self._thread.start()
        return self

    def _set(self, stage: str) -> None:
        self._stage = stage
        log.info("loading: %s", stage)

    def _run(self) -> None:
        try:
            self._service = build_service(self.config, self._set, world_child=self._world_child)
        except BaseException as exc:  # reported on the page; the server stays up
            log.exception("loading the explorer failed")
            self._error = exc
        finally:
            self._t_done = time.perf_counter()
            with self._callbacks_lock:
                self._event.set()
                callbacks, self._callbacks = self._callbacks, []
            for callback in callbacks:
                try:
                    callback()
                except Exception:  # one waiter's failure (e.g. its event loop closed) never stops the others
                    log.exception("a callback waiting for the explorer failed")

    def when_done(self, callback) -> None:
        """`callback()` once loading has ended, ready or failed (at once when it has; else from the loader's
        thread): a page waiting for the explorer wakes then rather than at its next poll."""
        with self._callbacks_lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def status(self) -> LoadStatus:
        end = self._t_done if self._t_done is not None else time.perf_counter()
        err = None if self._error is None else f"{type(self._error).__name__}: {self._error}"
        return LoadStatus(
            self._stage,
            self._event.is_set() and self._error is None,
            err,
            end - self._t0,
            "" if self._event.is_set() else live_progress_bars(),
        )

    @property
    def ready(self) -> bool:
        return self._event.is_set() and self._service is not None

    def wait(self, timeout: float | None = None) -> ExplorerService:
        """The service; raises ServiceError if loading failed or is still running after `timeout`."""
        if not self._event.wait(timeout):
            raise ServiceError(f"still loading: {self.status().text()}")
        if self._service is None:
            raise ServiceError(f"the explorer could not load: {self.status().error}")
        return self._service


class RememberingStore:
    """Wraps an image store while indexes are built: images opened once are kept (up to
    `max_bytes` of pixels), so a second retriever that cannot share corpus embeddings
    (`Retriever.image_spec`) encodes the corpus without rendering it again. Dropped
    once loading is done; costs nothing when every index already exists."""

    def __init__(self, inner, max_bytes: int = 1 << 30):
        self.inner = inner
        self.max_bytes = max_bytes
        self.used = 0
        self._kept: dict[str, Any] = {}

    def source(self, image_id: str):
        return self.inner.source(image_id)

    def open(self, image_id: str):
        img = self._kept.get(image_id)
        if img is None:
            img = self.inner.open(image_id)
            size = img.width * img.height * len(img.getbands())
            if self.used + size <= self.max_bytes:
                self._kept[image_id] = img
                self.used += size
        return img


def load_failure_lines(name: str, exc: BaseException, **kw) -> list[str]:
    from cir_demo.preflight.checks import load_failure_lines as lines  # imported on failure only (no torch at import)

    return lines(name, exc, **kw)


def _index_source(engine, name: str) -> str:
    """How `name`'s index will come, for the progress line: "disk" (a manifest in its folder; whether it
    is fresh is checked when it loads), "prebuilt" (the repository's prebuilt corpus embeddings) or "build"."""
    try:
        from cir_demo.index.build import benchmark_index_name
        from cir_demo.index.manifest import MANIFEST_FILE, index_dir
        from cir_demo.index.prebuilt import image_encoder, prebuilt_dir

        if (index_dir(benchmark_index_name(engine.benchmark), name) / MANIFEST_FILE).is_file():
            return "disk"
        tower = image_encoder(engine.retriever(name))
        return "prebuilt" if tower and (prebuilt_dir(engine.benchmark, tower) / MANIFEST_FILE).is_file() else "build"
    except Exception:  # only the wording of a progress line depends on it
        return "disk"


_INDEX_STAGE = {
    "disk": "loading the model and its index",
    "prebuilt": "loading the model and its index from the prebuilt corpus embeddings",
    "build": "loading the model and building its index (first start)",
    "run": "its results file (no model to load)",
}


def _load_indexes(
    engine, names: Sequence[str], config: ServiceConfig, stage: Callable[[str], None], notes: list[str]
) -> list[str]:
    """Load each retriever and its index (building it on first use); returns those that loaded."""
    loaded = []
    own = {run_name for run_name, _ in config.runs}  # `--runs` columns: their rankings come from the files
    for i, name in enumerate(names, 1):
        source = "run" if name in own else _index_source(engine, name)
        stage(f"retriever {i}/{len(names)} {name}: " + _INDEX_STAGE[source])
        try:
            engine.index(name)
        except Exception as exc:  # the other columns still work
            log.exception("retriever %s failed to load", name)
            notes.append(
                f"{name} could not be loaded and is left out: "
                + " | ".join(load_failure_lines(name, exc, trust_remote_code=config.trust_remote_code))
            )  # the doctor's facts
            continue
        loaded.append(name)
        stale = engine.stale_reasons(name) if config.allow_stale else []
        if stale:
            notes.append(f"{name}: serving a stale index ({'; '.join(stale)})")
    return loaded


FEATURES_POLL_S = 2.0


def adopt_reranker_features(engine, backend: str, kwargs: dict) -> None:
    """Load the reranker without waiting for its corpus features: when none are stored yet (a first
    start: computing the world verifier's features takes a while), views score their candidates
    from pixels (the same scores), and a thread hands the reranker the features
    once the background run (or any `--eval`) has stored them."""
    import weakref

    reranker = engine.reranker(backend, **kwargs)
    if not (
        hasattr(reranker, "use_image_embeddings")
        and engine.benchmark.corpus_ids
        and reranker.needs_image(engine.benchmark.corpus_ids[0])
    ):
        return
    ref = weakref.ref(engine)

    def adopt() -> None:
        while True:
            time.sleep(FEATURES_POLL_S)
            live = ref()
            if live is None:
                return
            try:
                if live.adopt_stored_features(backend, **kwargs):
                    log.info("reranker %s: corpus features adopted from the stored cache", backend)
                    return
            except Exception:  # e.g. a half-written cache: looked at again on the next poll
                log.exception("reranker %s: reading the stored corpus features", backend)
            del live

    threading.Thread(target=adopt, name="cir-demo-reranker-features", daemon=True).start()


def generate_world_aside(config: ServiceConfig):
    """On a first start of a benchmark whose loader generates its data (the offline world), a child
    process that generates it while this process imports torch and loads the models (None when the
    data is on disk or the benchmark reads its files)."""
    from cir_demo.benchmarks.generate_aside import generate_aside

    return generate_aside(config.benchmark, dict(config.benchmark_kwargs))


def preload_retrievers(config: ServiceConfig, names: Sequence[str]) -> dict[str, Any]:
    """The retrievers that load (the others are loaded again, and reported, by the engine)."""
    from cir_demo.retrievers.registry import load_retriever

    loaded = {}
    for name in names:
        try:
            loaded[name] = load_retriever(
                name, device=config.device, trust_remote_code=config.trust_remote_code, progress=False
            )
        except Exception:
            log.info("retriever %s: not preloaded (loaded again below)", name, exc_info=True)
    return loaded


def model_columns(config: ServiceConfig, known) -> list[str]:
    """The model retrievers served: those named, else the benchmark's defaults unless `--runs` replace them."""
    own = {name for name, _ in config.runs}
    if config.retrievers:
        return [n for n in config.retrievers if n not in own]
    return [] if config.runs else default_retrievers(config.benchmark, known)


def own_run_columns(config: ServiceConfig, bench, preloaded: dict, notes: list[str]) -> list[str]:
    """`--runs` results files read onto the benchmark as `--eval` reads them (into `preloaded`); a file
    that cannot be used is left out with one line in `notes`, and a missing image folder is said once."""
    from cir_demo.explorer.own_runs import RunFile, load_run, register_runs

    names = []
    for name, path in config.runs:
        if Path(path).is_dir():  # an eval run folder: the Report lists it (ServiceConfig.run_folders)
            continue
        try:
            preloaded[name], more = load_run(bench, path, name)
            register_runs([RunFile(name, path)])  # the engine knows its columns by registered name
        except ServiceError as exc:
            notes.append(f"run {name} is left out: {exc}")
            continue
        notes.extend(more)
        names.append(name)
    if config.runs and not images_readable(bench):
        notes.append(missing_images_note(bench))
    return names


MISSING_IMAGES = (
    "The images of {benchmark} are not here, so tiles show image ids. To see them, start the app with "
    "--image-dir FOLDER (where they are), or fetch them: python -m cir_demo images fetch --benchmark "
    "{benchmark} [its flags]."
)


def missing_images_note(bench) -> str:
    """What the page says when the benchmark's images are absent: the fetch command where its images have an
    address, else where they come from and the folder they go in (a fetch command would only fail)."""
    from cir_demo.benchmarks.registry import image_source

    source = image_source(bench.name)
    if getattr(bench.images, "url_pattern", None) is not None or not source:
        return MISSING_IMAGES.format(benchmark=bench.name)
    return (
        f"The images of {bench.name} are not here, so tiles show image ids. {source} Then start the app with "
        "--image-dir FOLDER if they are not in that default place."
    )


def images_readable(bench) -> bool:
    """Whether the benchmark's corpus images can be opened (one is tried)."""
    if bench.images is None or not bench.corpus_ids:
        return False
    try:
        bench.images.open(bench.corpus_ids[0])
    except Exception:
        return False
    return True


def _open_benchmark(config: ServiceConfig, stage: Callable[[str], None], world_child=None):
    """(the benchmark, {name: retriever} loaded while a first start's world was generated aside)."""
    from cir_demo.benchmarks.registry import load_benchmark
    from cir_demo.retrievers.registry import list_retrievers

    preloaded: dict[str, Any] = {}
    world_child = world_child or generate_world_aside(config)
    if world_child is not None:
        stage(
            "loading the models (the offline world was generated meanwhile)"
            if world_child.poll() == 0
            else "generating the offline world (first start) while the models load"
        )
        known = [r["name"] for r in list_retrievers()]
        preloaded = preload_retrievers(config, model_columns(config, known))
        if world_child.wait():  # the benchmark's loader below generates it then (a lock keeps one writer)
            log.warning(
                "generating %s aside failed (exit status %s); generating it here",
                config.benchmark,
                world_child.returncode,
            )
    generated = getattr(declared_defaults(config.benchmark), "generated", None)
    stage(
        f"loading benchmark {config.benchmark!r}"
        + (f" ({generated.what} is generated on first use)" if generated else "")
    )
    bench = load_benchmark(config.benchmark, **dict(config.benchmark_kwargs))
    return (bench.limit(config.limit_groups) if config.limit_groups else bench), preloaded


def build_service(
    config: ServiceConfig, stage: Callable[[str], None] = lambda s: None, world_child=None
) -> ExplorerService:
    """Load the benchmark, resolve retrievers and reranker, load models and indexes. `world_child`:
    a `generate_world_aside` process already started (else one is started here when needed)."""
    from cir_demo.rerank import BACKENDS
    from cir_demo.retrievers.registry import list_retrievers

    bench, preloaded = _open_benchmark(config, stage, world_child)
    known = [r["name"] for r in list_retrievers()]
    notes = []
    names = model_columns(config, known) + own_run_columns(config, bench, preloaded, notes)
    spec = declared_defaults(bench.name)
    file_runs = [path for _, path in config.runs if not Path(path).is_dir()]
    if not names and file_runs and not model_columns(config, known):  # every --runs file left out (said above)
        notes.append(
            "No retrievers: none of the --runs files could be used (each one's line says why); fix them, "
            "or start the app with --retrievers NAME,..."
        )
    elif not names:
        hint = spec.no_models_hint if spec else ""
        notes.append(
            "No retrievers: "
            + (
                hint.format(columns=", ".join(spec.app_columns))
                if hint
                else "start the app with --retrievers NAME,... (`python -m cir_demo retrievers list` shows them)"
            )
        )
    reranker, rr_note = resolve_reranker(bench.name, config.reranker, BACKENDS)
    stage("loading retrieval libraries")
    from cir_demo.engine import RetrievalEngine

    engine = RetrievalEngine(
        bench,
        names,
        device=config.device,
        allow_stale=config.allow_stale,
        index_uri=config.index_uri,
        progress=True,
        trust_remote_code=config.trust_remote_code,
        encode_reranker_corpus=False,
    )
    engine.adopt_retrievers(preloaded)
    store = bench.images
    if store is not None and len(names) > 1:
        bench.images = RememberingStore(store)  # the engine holds this same benchmark object
    try:
        loaded = _load_indexes(engine, names, config, stage, notes)
    finally:
        bench.images = store
    names = loaded
    if config.threads and names:
        engine.set_threads(config.threads)
    for name in names:  # bars were for the index builds; per-query encoding stays quiet
        retriever = engine.retriever(name)
        if hasattr(retriever, "progress"):
            retriever.progress = False
    if reranker:
        stage(f"loading reranker {reranker}")
        try:
            adopt_reranker_features(engine, reranker, dict(config.reranker_kwargs))
        except Exception as exc:  # the app works without the toggle
            log.exception("reranker %s failed to load", reranker)
            rr_note = (
                f"The reranker {reranker!r} could not be loaded ("
                + " | ".join(load_failure_lines(reranker, exc, reranker_kw=dict(config.reranker_kwargs)))
                + "); the toggle is off."
            )
            reranker = None
    stage("preparing the explorer")
    cache_notes = []
    if config.pixel_cache and bench.images is not None:
        try:
            db_path, warning = usable_blob_db(pixel_db_path(engine.fingerprint), "pixel cache")
        except DataFolderError as exc:
            db_path, warning = None, f"pixel cache not used ({exc})"
        if db_path is not None:
            bench.images = PixelCachedStore(bench.images, db_path)
        if warning:
            cache_notes.append(warning)
    service = ExplorerService(bench, engine, names, reranker, rr_note, config)
    service.warnings.extend(notes)
    # optional caches that could not be used: one visible line each, the app works without them
    score_cache = engine.score_cache
    cache_notes += [w for w in (service.tiles.warning, service.references.warning, score_cache.warning) if w]
    service.warnings.extend(w.removeprefix("warning: ") for w in cache_notes)
    if config.warm_thumbnails and bench.images is not None and service.tiles.db_path and service.references.db_path:
        pixels = (
            [{"db_path": str(bench.images.db_path), "kind": "png"}]
            if isinstance(bench.images, PixelCachedStore)
            else []
        )
        jpeg = lambda t: {"db_path": str(t.db_path), "kind": "jpeg", "size": t.size, "quality": t.quality}  # noqa: E731
        start_image_warmer(
            config,
            [
                {"what": "references", "targets": [jpeg(service.references)] + pixels},
                {"what": "corpus", "targets": [jpeg(service.tiles)] + pixels},
            ],
        )
    return service
