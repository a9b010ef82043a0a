"""The explorer app: `create_app(...)` builds the Blocks without launching; `main(argv)` is
`python app.py` (see `python app.py --help`).

The page comes up at once; the benchmark, models and indexes load in a background thread
(`ServiceLoader`) while the page shows what is being done. The URL carries the Explore
view (benchmark, query, paraphrase, retrievers, reranker), so a link opens the same view.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
import time
from dataclasses import replace
from typing import Any, Sequence

import gradio as gr

from cir_demo.explorer import MAX_COLUMNS, ExplorerService, ServiceConfig, ServiceError, filter_fields, ServiceLoader
from cir_demo.explorer.public_text import hide_paths
from cir_demo.ui import api, explore, report, upload
from cir_demo.ui.controls import CONTROLS_JS
from cir_demo.ui.components import loading_html, md_escape, notes_markdown
from cir_demo.ui.guard import guarded
from cir_demo.ui.launch import STATUS_GROUP, WORK_GROUP, launch_app  # noqa: F401 (WORK_GROUP: tests read it here)
from cir_demo.ui.session_copies import bound_session_copies
from cir_demo.ui.settings import AppSettings
from cir_demo.ui.startup import Startup, app_settings, build_parser, prepare  # noqa: F401 (build_parser: the command line)
from cir_demo.ui.tables import frames_as_tables
from cir_demo.ui.state import HUB_ORIGIN, ORDER, ParsedState, decode_state, resolve_state
from cir_demo.utils.gc_pause import kept_for_life

log = logging.getLogger("cir_demo.ui")

TITLE = "CIR failure explorer"
INTRO = (
    f"# {TITLE}\n"
    "Composed image retrieval (reference image + instruction): retrievers' rankings side by side, the queries "
    "sorted by how they fail, the phrasing swapped, a reranker toggled."
)
VIEW_KEYS = (
    "header",
    "paraphrase",
    "results",
    "table",
    "prompt",
    "share",
    "message",
    "k",
    "top_n",
)  # view_outputs order
LOAD_POLL_S = 0.25
PRECOMPUTE_POLL_S = 2.0  # how often a page asks how far the background run is
CALL_TIMEOUT_S = 600.0  # a callback waits this long for loading to finish (first run builds indexes)


class _Ready:
    """A loader-like wrapper of a service that is already built (tests, scripts)."""

    def __init__(self, service: ExplorerService):
        self._service = service
        self.ready = True

    def wait(self, timeout: float | None = None) -> ExplorerService:
        return self._service

    def status(self):
        from cir_demo.explorer import LoadStatus

        return LoadStatus("ready", True, None, 0.0)


def as_loader(source: ServiceLoader | ExplorerService | ServiceConfig):
    if isinstance(source, ExplorerService):
        return _Ready(source)
    if isinstance(source, ServiceConfig):
        return ServiceLoader(source)
    return source


# ------------------------------------------------------------------ page load (plain functions)
def initial_state(service: ExplorerService, params: dict[str, str], pending=None) -> ParsedState:
    """The view a link asks for, checked against what this app serves; without a query, the one
    `first_view.first_query` chooses (the runs disagree on it, one of them ranks a judged image)."""
    from cir_demo.explorer.first_view import first_query

    default_query = first_query(service, pending) if service.query_ids else None
    sorts = service.offered_sorts()  # A vs B under each metric the "compare by" menu offers
    return resolve_state(
        decode_state(params),
        service.benchmark.name,
        service.query_ids,
        service.group_sizes,
        service.retriever_names,
        service.reranker_name is not None,
        default_query,
        sorts,
    )


def run_status_key(pending) -> str:
    """The background run's status as a page shows it: a poll that finds it unchanged sends nothing."""
    return f"{pending.state}:{pending.done}/{pending.total}:{pending.detail}"


def initial_outputs(
    service: ExplorerService, params: dict[str, str], pending=None, with_report: bool = True
) -> dict[str, Any]:
    """Everything the page shows once the service is ready, by name (see `create_app` for the mapping).
    `pending`: the background run's status (None: no background run); `with_report`: the Report tab's
    outputs too (a page view leaves them to the tab's opening: `report.wire`)."""
    parsed = initial_state(service, params, pending)
    s = parsed.state
    out: dict[str, Any] = {}
    choices = service.filter_choices()
    for key in filter_fields():  # the dropdowns create_ui made (hidden): every family's filters
        values = choices.get(key, [])
        if len(values) > 1:  # one that filters nothing stays as the page has it: each update costs gradio a component
            out[f"filter:{key}"] = gr.update(choices=[explore.ANY, *values], value=explore.ANY, visible=True)
    listing = explore.list_queries(service, "", {}, s.sort, pending)
    out.update({"list": explore.list_update(listing["table"]), "ids": listing["ids"], "list_info": listing["info"]})
    if (
        s.sort != ORDER
        and not params.get("query")
        and not params.get("paraphrase")
        and listing["ids"]
        and (pending is None or pending.sort_ready(s.sort))
    ):  # a sort's link without a query opens the query it lists first (as the Report's A-vs-B links do)
        s = replace(s, query_id=listing["ids"][0])
    names = list(s.retrievers) if s.retrievers else service.retriever_names[:MAX_COLUMNS]
    out["retrievers"] = gr.update(choices=service.retriever_names, value=names)
    out["k"] = s.k
    out["top_n"] = gr.update(value=s.top_n, interactive=s.rerank and service.reranker_name is not None)
    controls = explore.rerank_controls(service, s.rerank)
    out["rerank"] = controls["rerank"]
    out["rerank_note"] = controls["note"]
    # what of the link could not be honoured: at the top of the page, where a visitor looks first
    out["link_note"] = (
        f"**This link could not be opened exactly:**\n{notes_markdown(parsed.notes)}" if parsed.notes else ""
    )
    if s.query_id:
        query_id = s.query_id
        if s.paraphrase is not None:
            query_id = service.benchmark.paraphrases(s.query_id)[s.paraphrase].query_id
        view = explore.show_view(service, query_id, names, s.k, s.rerank, s.top_n, sort=s.sort)
        out.update({f"view:{k}": v for k, v in view.items()})
    else:
        out["view:message"] = "This benchmark has no queries."
    out["about"] = explore.about_update(service)
    out["filter_box"] = explore.filters_update(service)
    out["upload:note"] = upload.upload_note(service)
    models = [n for n in service.retriever_names if n not in service.file_runs()]  # a results file answers no upload
    out["upload:retrievers"] = gr.update(choices=models, value=models[:MAX_COLUMNS])
    out["upload:rerank"] = explore.rerank_controls(service)["rerank"]
    out["sort"] = explore.sort_update(service, pending, s.sort if s.sort != "order" else None)  # a linked sort
    out["compare"] = explore.compare_update(service, s.sort)
    if pending is not None:  # what the page now shows of the background run: the poll goes on from here
        out["run:seen_ready"], out["run:seen_key"] = pending.ready, run_status_key(pending)
        out["run:timer"] = gr.Timer(active=not pending.ready)
    if with_report:
        out.update({f"report:{k}": v for k, v in report.show_report(service, None, pending).items()})
    return out


def status_markdown(service: ExplorerService | None, status, pending=None) -> str:
    """The status line every visitor sees (no server path in it: `hide_paths`)."""
    if service is None:
        return f"⏳ {md_escape(hide_paths(status.text()))}"
    lines = [f"**{md_escape(hide_paths(service.summary()))}**"]
    lines += [f"⚠ {md_escape(hide_paths(w))}" for w in service.warnings]
    if pending is not None and pending.text():
        lines.append(("⏳ " if not pending.ready else "") + md_escape(hide_paths(pending.text())))
    return "  \n".join(lines)


def telemetry_opted_in() -> bool:
    """Gradio's telemetry and version check only when the operator asks (GRADIO_ANALYTICS_ENABLED=True):
    gradio's default sends them from every start, which costs a first start two TLS set-ups on
    threads that hold the GIL while the page loads, and offline (the embedded world) reaches for
    a network that is not there."""
    return os.environ.get("GRADIO_ANALYTICS_ENABLED") == "True"


# ------------------------------------------------------------------ the app
def create_app(
    source: ServiceLoader | ExplorerService | ServiceConfig, precompute=None, parent_origin: str = HUB_ORIGIN
) -> gr.Blocks:
    """The Blocks of the explorer (not launched). `source`: a loader (loading in the
    background), a ready service, or a config to load. `precompute`: the background run
    (`PrecomputeJob`) whose progress the page shows; None: failure sorts compute on demand.
    `parent_origin`: the framing page that gets each view's query string (a Space's page)."""
    loader = as_loader(source)

    def get_pending():
        return precompute.status() if precompute is not None else None

    def get_service() -> ExplorerService:
        return loader.wait(CALL_TIMEOUT_S)

    with gr.Blocks(title=TITLE, fill_width=True, analytics_enabled=telemetry_opted_in()) as demo:
        gr.Markdown(INTRO, elem_id="cir-intro")
        status = gr.Markdown("⏳ starting…", elem_id="cir-status")
        link_note = gr.Markdown(elem_id="cir-link-note")
        with gr.Tabs() as tabs:
            with gr.Tab("Explore", id="explore", elem_id="cir-tab-explore"):
                ex = explore.create_ui()
            with gr.Tab("Try your own", id="upload", elem_id="cir-tab-upload"):
                up = upload.create_ui()
            with gr.Tab("Report", id="report", elem_id="cir-tab-report") as report_tab:
                rp = report.create_ui()
        explore.wire(ex, get_service, get_pending, parent_origin)
        upload.wire(up, get_service)
        report.wire(rp, get_service, get_pending, report_tab)

        by_name: dict[str, Any] = {f"filter:{k}": c for k, c in ex.filters.items()}
        by_name.update(
            {
                "list": ex.query_list,
                "ids": ex.query_ids,
                "list_info": ex.list_info,
                "retrievers": ex.retrievers,
                "k": ex.k,
                "top_n": ex.top_n,
                "rerank": ex.rerank,
                "rerank_note": ex.rerank_note,
                "view:header": ex.header,
                "view:paraphrase": ex.paraphrase,
                "view:results": ex.results,
                "view:table": ex.table,
                "view:prompt": ex.prompt,
                "view:share": ex.share,
                "view:message": ex.message,
                "upload:note": up.note,
                "upload:retrievers": up.retrievers,
                "upload:rerank": up.rerank,
                "report:run": rp.run,
                "report:info": rp.info,
                "report:metrics": rp.metrics,
                "report:plots": rp.plots,
                "report:files": rp.files,
                "report:columns": rp.columns,
                "sort": ex.sort,
                "link_note": link_note,
                "report:own_info": rp.own_info,
                "report:own_metrics": rp.own_metrics,
                "report:paired": rp.paired,
                "report:pair": rp.pair,
                "report:open_pair": rp.open_pair,
                "about": ex.about,
                "filter_box": ex.filter_box,
                "compare": ex.compare,
            }
        )
        pair_targets = {
            "tab": tabs,
            "search": ex.search,
            "sort": ex.sort,
            "compare": ex.compare,
            "retrievers": ex.retrievers,
            "list": ex.query_list,
            "ids": ex.query_ids,
            "list_info": ex.list_info,
            **{f"filter:{k}": c for k, c in ex.filters.items()},
            **{f"view:{n}": c for n, c in zip(VIEW_KEYS, ex.view_outputs())},
        }
        report.wire_pair(rp, pair_targets, get_service, get_pending, [ex.k, ex.rerank, ex.top_n])
        report.wire_upload(rp, ex.retrievers, get_service)
        if precompute is not None:  # following the background run; the page load sets where it starts
            follow = {
                "run:timer": gr.Timer(PRECOMPUTE_POLL_S),
                "run:seen_ready": gr.State(False),
                "run:seen_key": gr.State(""),
            }
            by_name.update(follow)
        outputs = [status, ex.loading, ex.body, *by_name.values()]

        # set once a page view has been prepared: `main` starts the background work after it (or a timeout)
        demo.cir_first_view = threading.Event()
        _wire_page_load(demo, loader, precompute, status, ex, by_name, outputs, get_service, get_pending)
        if precompute is not None:
            _wire_background_run(loader, status, ex, rp, get_service, get_pending, *follow.values())
        demo.load(None, None, None, js=CONTROLS_JS)
        api.hide_page_events(demo)  # the page's wiring is no API: only the endpoints below are listed
        api.add_endpoints(demo, get_service)
    demo.cir_loader = loader  # for launch helpers and tests
    return bound_session_copies(demo)


FIRST_VIEW_WAIT_S = 15.0  # how long a cold start holds the background work back for a first visitor's view


def start_after_first_view(demo: gr.Blocks, precompute, service: ExplorerService, wait_s: float = FIRST_VIEW_WAIT_S):
    """Start the background run (`precompute.start_for`: at low priority, or the shipped outputs installed)
    once a page view has been prepared (`demo.cir_first_view`), or after `wait_s` when none was asked for."""
    demo.cir_first_view.wait(wait_s)
    precompute.start_for(service)


def _wire_page_load(
    demo: gr.Blocks,
    loader: ServiceLoader,
    precompute,
    status,
    ex,
    by_name: dict,
    outputs: list,
    get_service,
    get_pending,
) -> None:
    """The page load: the loading panel while the explorer loads, then the view the URL names."""

    # Two steps: every visitor sees the load status (a cheap async poll, outside the work
    # limit, so it never waits behind other visitors' queries), then the linked view is
    # prepared in the shared work group like every other callback.
    @guarded("Loading the explorer")
    async def on_load():
        loop, loaded = asyncio.get_running_loop(), asyncio.Event()
        when_done = getattr(loader, "when_done", None)  # a loader-like without it (tests' doubles) is polled only
        if when_done is not None:
            when_done(lambda: loop.call_soon_threadsafe(loaded.set))
        while not loader.ready:
            st = loader.status()
            if st.error:
                yield {
                    status: f"❌ {md_escape(hide_paths(st.text()))}",
                    ex.loading: loading_html(st.stage, st.detail, st.elapsed, hide_paths(st.error)),
                }
                return
            yield {status: status_markdown(None, st), ex.loading: loading_html(st.stage, st.detail, st.elapsed)}
            try:  # the status again after LOAD_POLL_S, the view as soon as the explorer is loaded
                await asyncio.wait_for(loaded.wait(), LOAD_POLL_S)
            except asyncio.TimeoutError:
                pass
        yield {
            status: "⏳ loaded; preparing your view…",
            ex.loading: loading_html("loaded; preparing your view", "", loader.status().elapsed),
        }

    @guarded("Opening the linked view")
    def on_ready(request: gr.Request):
        if not loader.ready:  # loading failed: on_load shows why; one line per view here (not an empty update)
            log.warning("page view: the explorer is not loaded (%s)", loader.status().error or "still loading")
            return {status: gr.skip()}
        service = get_service()
        if precompute is not None and precompute.status().state == "failed":
            precompute.start_for(service)  # a reload retries a failed background run
        params = dict(request.query_params) if request is not None else {}
        started = time.perf_counter()
        # the Report's outputs (its run's table, plots and downloads: a third of a page view's work, most of
        # it on gradio's event loop) come when its tab is opened, which most visits never do
        values = initial_outputs(service, params, get_pending(), with_report=False)
        log.info("page view prepared in %.2f s", time.perf_counter() - started)
        demo.cir_first_view.set()
        # the tables as gradio's dicts, built here: off gradio's event loop, which every visitor shares
        update = frames_as_tables({by_name[k]: v for k, v in values.items() if k in by_name})
        update[status] = status_markdown(service, loader.status(), get_pending())
        update[ex.loading] = gr.update(visible=False)
        update[ex.body] = gr.update(visible=True)
        return update

    demo.load(
        on_load, None, [status, ex.loading], show_progress="hidden", concurrency_limit=None, concurrency_id=STATUS_GROUP
    ).then(on_ready, None, outputs, show_progress="hidden")


def _wire_background_run(
    loader: ServiceLoader,
    status,
    ex,
    rp,
    get_service,
    get_pending,
    timer: gr.Timer,
    seen_ready: gr.State,
    seen_key: gr.State,
) -> None:
    """Follow the background run (failure sorts and the Report) on the page."""
    # Follow the background run: progress in the status line and the sort labels; when it
    # is done, the Report shows its run and a failure sort picked meanwhile is applied.
    # The poll only reads a status, so it runs outside the work limit (STATUS_GROUP).
    # A poll's inputs are read when it is sent, and its reply may come after a sort the visitor
    # picked meanwhile: so only the poll that finds the run done sets the sort's value (its label
    # loses the "computing" mark, which gradio redraws only with a value), never one before.
    report_outputs = rp.outputs()
    list_outputs = [ex.query_list, ex.query_ids, ex.list_info]

    @guarded("Following the background run")
    def on_tick(was_ready, shown, label, text, sort, metric, *filter_values):
        skip_all = (gr.skip(),) * (5 + len(report_outputs) + len(list_outputs))
        if not loader.ready:
            return skip_all
        pending = get_pending()
        key = run_status_key(pending)
        if key == shown and (was_ready or not pending.ready):
            return skip_all  # unchanged: an open sort list is not redrawn under the visitor's pointer
        service = get_service()
        now_ready = pending.ready and not was_ready
        head = (
            status_markdown(service, loader.status(), pending),
            explore.sort_update(service, pending, (sort or "order") if now_ready else None, metric),
            pending.ready,
            gr.Timer(active=not pending.ready),
            key,
        )
        if not now_ready:
            # a failure sort picked meanwhile: its info line counts on with the status line
            info = (
                explore.list_queries(service, text, dict(zip(ex.filters, filter_values)), sort, pending)["info"]
                if sort and sort != "order" and not pending.ready
                else gr.skip()
            )
            return (*head, *(gr.skip(),) * (len(report_outputs) + len(list_outputs) - 1), info)
        rep = report.show_report(service, label, pending)
        listed = ex.on_list(text, sort, *filter_values) if sort and sort != "order" else (gr.skip(),) * 3
        return (*head, *(rep[k] for k in report.OUTPUTS), *listed)

    timer.tick(
        on_tick,
        [seen_ready, seen_key, rp.run, ex.search, ex.sort, ex.compare, *ex.filters.values()],
        [status, ex.sort, seen_ready, timer, seen_key, *report_outputs, *list_outputs],
        show_progress="hidden",
        concurrency_limit=None,
        concurrency_id=STATUS_GROUP,
    )


# ------------------------------------------------------------------ command line
def config_from_settings(settings: AppSettings) -> ServiceConfig:
    """The explorer's configuration of the app's settings; ServiceError, ValueError for a bad `--runs`."""
    from cir_demo.explorer.own_runs import parse_run_args

    runs = parse_run_args(list(settings.runs))
    return ServiceConfig(
        runs=tuple((r.name, r.path) for r in runs),
        run_folders=tuple(r.path for r in runs if os.path.isdir(r.path)),
        benchmark=settings.benchmark.name,
        benchmark_kwargs=dict(settings.benchmark.kwargs),
        retrievers=settings.retrievers,
        reranker=settings.reranker,
        reranker_kwargs={"model": settings.reranker_model} if settings.reranker_model else {},
        limit_groups=settings.benchmark.limit,
        device=settings.device,
        allow_stale=settings.allow_stale,
        index_uri=settings.index_uri,
        trust_remote_code=settings.trust_remote_code,
        warm_thumbnails=settings.thumbnail_warmer,
        threads=settings.threads,
    )


def config_from_args(args: argparse.Namespace) -> ServiceConfig:
    """`config_from_settings` of a parsed command line (`build_parser`)."""
    return config_from_settings(app_settings(args))


def served_split_kwargs(config: ServiceConfig) -> dict:
    """The loader keywords of the served view, with the split the app serves named: on a benchmark whose
    `--eval` reports several test splits by default (the world), the background run computes only the one
    shown (the first), not the others beside it."""
    from cir_demo.benchmarks.registry import declared_defaults

    kwargs = dict(config.benchmark_kwargs)
    spec = declared_defaults(config.benchmark)
    if spec is not None and spec.eval_splits and kwargs.get("split") is None:
        kwargs["split"] = spec.eval_splits[0]
    return kwargs


def _fetch_images(settings: AppSettings) -> int:
    from cir_demo.images.benchmark_fetch import fetch_for

    report = fetch_for(settings.benchmark.load(), settings.fetch)
    print(f"fetch: {report.summary()}", flush=True)
    return 0


LOG_FORMAT = "%(asctime)s %(name)s: %(message)s"


def configure_log(debug: bool = False) -> None:
    """The app's log on stderr: a known fault in one line, as `--eval` prints it (`--debug`: tracebacks)."""
    from cir_demo.errors import OneLineFormatter

    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(OneLineFormatter(LOG_FORMAT, debug=debug))
    logging.getLogger("cir_demo").setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None, started: float | None = None, startup: Startup | int | None = None) -> int:
    """`python app.py`; `started`: the process's perf_counter() at start (app.py passes it), so the
    times printed include importing gradio and torch; `startup`: what `prepare` gave before that import."""
    startup = prepare(argv) if startup is None else startup
    if isinstance(startup, int):
        return startup
    settings = startup.settings
    configure_log(settings.debug)
    t0 = time.perf_counter() if started is None else started
    try:
        config = config_from_settings(settings)
    except (KeyError, ValueError, ServiceError) as exc:
        startup.stop()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if settings.fetch_images:  # before the page: the explorer then opens the images from disk
        from cir_demo.errors import report_errors

        rc = report_errors(lambda: _fetch_images(settings))
        if rc:
            startup.stop()
            return rc
    loader = ServiceLoader(config, start=False, world_child=startup.world_child)
    from cir_demo.explorer.precompute import PrecomputeJob

    from cir_demo.benchmarks.cli_args import benchmark_flags

    # with --runs the columns' per-query numbers come from the files (cheap, computed when asked for): no
    # background eval run, which could not load the runs' columns by name anyway
    precompute = PrecomputeJob(
        benchmark_flags(config.benchmark, served_split_kwargs(config), config.limit_groups),
        enabled=settings.precompute and not settings.runs,
    )
    service = None
    # the page, the models and the explorer's tables are kept to the end: frozen once loaded (or once the
    # load failed), never walked by the collector again (utils/gc_pause.py); what the first visitors'
    # requests leave meanwhile is frozen with them, once
    with kept_for_life():
        demo = create_app(loader, precompute)
        launch_app(
            demo,
            settings.server_name,
            settings.port,
            settings.share,
            settings.queue_size,
            settings.concurrency,
            prevent_thread_lock=True,
            mcp=settings.mcp or None,
        )
        # Load after the server is up: the loader's imports would otherwise hold the GIL while the
        # page and its assets are being served.
        loader.start()
        print(
            f"page served {time.perf_counter() - t0:.1f} s after start; loading {config.benchmark!r} in the background",
            flush=True,
        )
        try:
            service = loader.wait(None)
        except ServiceError as exc:
            print(f"error: {exc}", file=sys.stderr)
    try:
        if service is not None:
            print(f"explorer ready {time.perf_counter() - t0:.1f} s after start: {service.summary()}", flush=True)
            precompute.on_done(service.forget_failures)
            # A cold start's first visitor is waiting for their view, which needs neither the shipped outputs
            # nor the run (the first query is read from the shipped manifest): installing the outputs (hashing
            # the code, decompressing, writing) would share the GIL with it, so it starts once that view is
            # prepared, or after FIRST_VIEW_WAIT_S when nobody came.
            start_after_first_view(demo, precompute, service)
            if precompute.status().text():
                print(f"{precompute.status().text()}; {time.perf_counter() - t0:.1f} s after start", flush=True)
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
    import signal

    def stop(*_):  # SIGTERM (a Space restarting, `kill`) ends the app as Ctrl+C does: the background run too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        demo.block_thread()
    except KeyboardInterrupt:
        pass
    finally:
        precompute.stop()
        if service is not None:
            service.engine.close()
    return 0
