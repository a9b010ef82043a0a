"""Serving the explorer's Blocks: one bounded queue and one concurrency limit for every callback that
computes (the page's and the API's), gradio's queue analytics kept cheap, the page-wide CSS, then launch
(`launch_app`; `python app.py` calls it from cir_demo/ui/app.py)."""

from __future__ import annotations

import logging
import os

import gradio as gr

from cir_demo.explorer.public_text import hide_paths
from cir_demo.ui.session_copies import lean_sessions

log = logging.getLogger("cir_demo.ui")

WORK_GROUP = "cir-work"  # every callback that computes shares one concurrency limit (share_one_limit)
STATUS_GROUP = "cir-status"  # the load-status poll: unlimited, it only reads a status


def share_one_limit(demo: gr.Blocks) -> None:
    """Put every Python callback except the load-status poll into one concurrency group, so
    `--concurrency` bounds the callbacks running at once across the whole app (gradio applies
    a limit per event listener otherwise: six listeners x 2)."""
    for fn in demo.fns.values():
        if fn.fn is not None and fn.concurrency_id != STATUS_GROUP:
            fn.concurrency_id = WORK_GROUP
            fn.concurrency_limit = "default"


# Gradio's queue rebuilds a pandas summary of its last 10,000 events after every event, for a
# monitoring page this app does not enable: a cost per request that grows with the number served
# (docs/benchmarks.md, "Load test and memory"). Summarise once per million events and
# keep the last thousand (bounded memory); read when the queue is created.
QUEUE_ANALYTICS_ENV = {"GRADIO_ANALYTICS_CACHE_FREQUENCY": "1000000", "GRADIO_ANALYTICS_MAX_EVENTS": "1000"}


def quiet_queue_analytics() -> None:
    """Set `QUEUE_ANALYTICS_ENV` unless the operator set those variables."""
    for name, value in QUEUE_ANALYTICS_ENV.items():
        os.environ.setdefault(name, value)


# Page-wide rules for gradio's own components (the app's HTML is styled by components.CSS):
# a compact header, so that the retrievers' rows start high on the first screen; the Explore tab's three
# blocks in a grid: the query and its controls at the left, the rows at the right of the first screen,
# the query list under the query; on a phone one column: the query card, the rows, then the query's
# controls (the side column's box gives way, so its blocks are placed one by one) and the list, so that
# the first screen shows results;
# the Report's downloads are read-only, so gradio's "Remove this file" buttons are not offered;
# the query list reads in the page's font (its monospace made the table twice its column's width);
# table cells break between words, never inside one ("coverage" went down letter by letter);
# the Report's plots are shown whole with their captions below them (gradio's gallery cell cropped
# the first plot and laid its caption over the axis label).
PAGE_CSS = """
#cir-intro h1 { font-size: 1.4rem; margin: 0 12px 0 0; display: inline; }
#cir-intro p { font-size: 0.9rem; margin: 0; display: inline; }
#cir-status { font-size: 0.82rem; }
#cir-status p { margin: 0; }
#cir-explore-body:not(.hide) { display: grid !important; grid-template-columns: minmax(300px, 2fr) minmax(0, 5fr);
                               grid-template-rows: auto minmax(0, 1fr); align-items: start; }
#cir-side { grid-column: 1; grid-row: 1; }
#cir-main { grid-column: 2; grid-row: 1 / span 2; }
#cir-find { grid-column: 1; grid-row: 2; }
@media (max-width: 900px) {
  #cir-explore-body:not(.hide) { grid-template-columns: minmax(0, 1fr); grid-template-rows: none; }
  #cir-side, #cir-main, #cir-find { grid-column: 1; grid-row: auto; }
  #cir-side { display: contents; }
  #cir-side > * { grid-column: 1; order: 2; }
  #cir-side > #cir-about, #cir-side > #cir-query-header { order: 0; }
  #cir-main { order: 1; }
  #cir-find { order: 3; }
}
#cir-report-files .label-clear-button { display: none; }
#cir-query-list [role=gridcell] *, #cir-query-list [role=columnheader] *,
#cir-report-metrics [role=gridcell] *, #cir-report-metrics [role=columnheader] * { font-family: var(--font); }
#cir-report-plots .grid-wrap { height: auto !important; max-height: none !important; }
#cir-report-plots .thumbnail-item { height: auto !important; aspect-ratio: auto !important; display: flex;
                                    flex-direction: column; }
#cir-report-plots .grid-container { margin-top: 12px; }
#cir-report-plots .thumbnail-item img { height: auto !important; width: auto !important; max-width: 100%;
                                        max-height: 720px; margin: 0 auto; }
#cir-report-plots .thumbnail-item .caption-label { position: static !important; transform: none !important;
                                                   max-width: 100%; white-space: normal; }
#cir-report-metrics [role=gridcell] *, #cir-report-metrics [role=columnheader] *,
#cir-query-list [role=gridcell] *, #cir-query-list [role=columnheader] * { word-break: normal; overflow-wrap: normal; }
"""


# How often a queued visitor is told its place in the queue. gradio's default ("auto") tells every waiting
# event each time one starts: with 20 visitors waiting, twenty messages per request, each written to its
# stream on the event loop every visitor shares (a quarter of its work under load, docs/benchmarks.md).
STATUS_UPDATE_S = 1.0

# How often gradio's queue looks for a waiting event while none waits (gradio: every millisecond) and for
# progress to send (gradio: every 10 ms). At gradio's pace an app with no visitor woke its event loop a
# thousand times a second, about 8 % of a core (docs/benchmarks.md); at this one an event waits at most
# 10 ms more to start, and a progress bar moves ten times a second.
QUEUE_IDLE_POLL_S = 0.01
PROGRESS_POLL_S = 0.1


def pace_idle_queue(demo: gr.Blocks) -> None:
    """Set `QUEUE_IDLE_POLL_S` and `PROGRESS_POLL_S` on `demo`'s queue (after `demo.queue()`)."""
    queue = demo._queue
    queue.sleep_when_free = QUEUE_IDLE_POLL_S
    queue.progress_update_sleep_when_free = PROGRESS_POLL_S


MAX_FILE_SIZE = "25mb"  # an upload, from the page or an API client


def launch_app(
    demo: gr.Blocks,
    server_name: str | None = None,
    port: int | None = None,
    share: bool = False,
    queue_size: int = 32,
    concurrency: int = 2,
    prevent_thread_lock: bool = False,
    quiet: bool = False,
    mcp: bool | None = None,
):
    """Queue (bounded, so many visitors cannot exhaust memory) and launch. No data folder is
    served by path (report plots are sent as images), so nothing under runs/ reaches a visitor.
    The API endpoints share the page's queue, concurrency group and upload limit. `mcp`: serve them as
    MCP tools too (None: as gradio's GRADIO_MCP_SERVER says, off when unset)."""
    share_one_limit(demo)
    quiet_queue_analytics()
    demo.queue(max_size=queue_size, default_concurrency_limit=concurrency, status_update_rate=STATUS_UPDATE_S)
    pace_idle_queue(demo)
    # `_frontend=False` skips gradio's one check that its new server answers a HEAD request on localhost
    # within 3 s (for notebooks that need a share link; gradio 6.31 gates only that check on it): on a
    # machine busy with other jobs the server can be slower than that, and the app would end with "When
    # localhost is not accessible, a shareable link must be created" although it serves.
    launched = demo.launch(
        server_name=server_name,
        server_port=port,
        share=share,
        show_error=True,
        prevent_thread_lock=True,  # the MCP tools are adapted below, then the thread is held as asked
        quiet=quiet,
        css=PAGE_CSS,
        max_file_size=MAX_FILE_SIZE,
        footer_links=["api", "settings"],
        mcp_server=mcp or None,
        _frontend=False,
    )
    lean_sessions(demo)  # no per-session config copies for deep links (session_copies.LeanSession)
    if getattr(demo, "mcp_error", None):  # gradio serves on without its MCP server, saying nothing
        log.warning("MCP tools not served: %s", hide_paths(demo.mcp_error))
    from cir_demo.ui.mcp_tools import serve_tools_as_json

    serve_tools_as_json(demo)  # JSON answers, files as a path, a URL or base64 (cir_demo/ui/mcp_tools.py)
    if not prevent_thread_lock:
        demo.block_thread()
    return launched
