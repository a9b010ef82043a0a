"""The Explore tab: find a query, compare retrievers side by side, swap paraphrases,
toggle the reranker.

`create_ui()` builds the components; `wire()` connects events. The callbacks
(`list_queries`, `show_view`, ...) take the service and plain values and return a dict
of outputs by name, so tests call them directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr
import pandas as pd

from cir_demo.explorer import MAX_COLUMNS, MODALITY_LABELS, NO_VALUE, ExplorerService, ServiceError, filter_fields
from cir_demo.explorer.failures import DIFF_PREFIX, with_compared
from cir_demo.explorer.wording import about_markdown, filters_label
from cir_demo.explorer.public_text import hide_paths
from cir_demo.ui import components
from cir_demo.ui.controls import clamp, number_slider
from cir_demo.ui.gpu import on_gpu
from cir_demo.ui.guard import guarded
from cir_demo.ui.state import HUB_ORIGIN, K_RANGE, ORDER, TOP_N_RANGE, ViewState, encode_state, url_js, with_sort

SLIDER_TOP_N = (5, TOP_N_RANGE[1])  # links may ask for fewer; the slider steps by 5

ANY = "any"
LIST_COLUMNS = ["query", "instruction", "type", "refs", "why"]
# the list fits its column (text wraps between words, never cut): each column's share of the width
LIST_WEIGHTS = {"query": 16, "instruction": 34, "type": 14, "refs": 11, "why": 25}


def list_widths(columns) -> list[str]:
    """The widths of the list's columns shown (the weights of LIST_WEIGHTS, summing to 100%)."""
    weights = [LIST_WEIGHTS.get(c, 15) for c in columns]
    return [f"{100 * w / sum(weights):.0f}%" for w in weights]


# After a query opens: bring its card to the top when it is off-screen or low on it (the list is under
# it, on a phone under the rows too). An IntersectionObserver measures against the top-level viewport, so
# this also works inside a Space's iframe, where the page's own scroll position says nothing.
SCROLL_TO_VIEW_JS = """
() => {
    const el = document.querySelector("#cir-query-header");
    if (!el || typeof IntersectionObserver === "undefined") { return; }
    const io = new IntersectionObserver((entries) => {
        io.disconnect();
        const e = entries[0], box = e.boundingClientRect, seen = e.intersectionRect;
        const low = e.rootBounds ? box.top > e.rootBounds.top + e.rootBounds.height / 2  // own page: lower half
                                 : seen.height < box.height - 1;  // in a frame: its bottom is cut off
        if (!e.isIntersecting || seen.top > box.top + 1 || low) {
            el.scrollIntoView({behavior: "smooth", block: "start"});
        }
    });
    io.observe(el);
}
"""


@dataclass
class ExploreUI:
    search: Any
    filters: dict[str, Any]
    sort: Any
    list_info: Any
    query_list: Any
    query_ids: Any  # gr.State: ids in the list, row order
    header: Any
    paraphrase: Any
    retrievers: Any
    k: Any
    rerank: Any
    top_n: Any
    rerank_note: Any
    results: Any
    message: Any
    table: Any
    prompt: Any
    share: Any
    loading: Any  # the loading panel, shown where the results will be until the explorer is ready
    body: Any  # the explorer itself (hidden while loading)
    about: Any  # "What am I looking at?": the loaded benchmark's help (`wording.about_markdown`)
    filter_box: Any  # the filters' accordion, labelled with the loaded benchmark's filters
    compare: Any = None  # what the A-vs-B sorts compare (hidden where the family offers its primary only)

    def view_inputs(self) -> list:
        return [self.paraphrase, self.retrievers, self.k, self.rerank, self.top_n]

    def view_outputs(self) -> list:
        return [
            self.header,
            self.paraphrase,
            self.results,
            self.table,
            self.prompt,
            self.share,
            self.message,
            self.k,
            self.top_n,
        ]


def create_ui() -> ExploreUI:
    """Three blocks: the query and its controls (`cir-side`), the retrievers' rows (`cir-main`) and the
    query list (`cir-find`); launch.PAGE_CSS lays them out: on a laptop the rows take the right of the
    first screen and the list goes under the query; on a phone they stack (query, rows, list)."""
    loading = gr.HTML(components.loading_html("starting", "", 0.0), elem_id="cir-loading", css_template=components.CSS)
    with gr.Row(equal_height=False, visible=False, elem_id="cir-explore-body") as body:
        with gr.Column(scale=2, min_width=300, elem_id="cir-side"):
            with gr.Accordion("What am I looking at?", open=False, elem_id="cir-about"):
                about = gr.Markdown(elem_id="cir-about-text")  # the loaded benchmark's (about_update)
            header = gr.HTML(elem_id="cir-query-header", css_template=components.CSS)
            paraphrase = gr.Radio(
                [], label="Paraphrases of this intent (one click swaps the phrasing)", elem_id="cir-paraphrases"
            )
            retrievers = gr.CheckboxGroup(
                [], label=f"Retrievers (1 to {MAX_COLUMNS}, a row each)", elem_id="cir-retrievers"
            )
            with gr.Row():
                k = number_slider(
                    *K_RANGE, value=10, step=5, label="Results per retriever", elem_id="cir-k", min_width=140
                )
                top_n = number_slider(  # usable while Rerank is on (the view's answer sets it)
                    *SLIDER_TOP_N,
                    value=20,
                    step=5,
                    label="Rerank top n",
                    elem_id="cir-top-n",
                    min_width=140,
                    interactive=False,
                )
            rerank = gr.Checkbox(False, label="Rerank", interactive=False, elem_id="cir-rerank")
            rerank_note = gr.Markdown(elem_id="cir-rerank-note")
        with gr.Column(scale=5, min_width=360, elem_id="cir-main"):
            message = gr.Markdown(elem_id="cir-message")
            results = gr.HTML(elem_id="cir-results", css_template=components.CSS)
            table = gr.Dataframe(
                interactive=False, label=paraphrase_table_label("AP@10"), elem_id="cir-paraphrase-table", wrap=True
            )  # in the hidden body until it has data
            with gr.Accordion("Reranker prompt (exactly what the reranker is asked)", open=False):
                prompt = gr.Textbox(
                    lines=14, max_lines=40, show_label=False, interactive=False, elem_id="cir-prompt", buttons=["copy"]
                )
        with gr.Column(scale=2, min_width=300, elem_id="cir-find"):
            gr.Markdown("### Find a query")
            search = gr.Textbox(
                label="Search", placeholder="words of the instruction, or a query id", elem_id="cir-search"
            )
            sort = gr.Dropdown(
                [(ORDER_LABEL, "order")],
                value="order",  # the benchmark's sorts once it is loaded
                label="Sort by failure",
                elem_id="cir-sort",
            )
            compare = gr.Dropdown(
                [], label="A vs B sorts compare", elem_id="cir-compare", visible=False, interactive=True
            )  # the loaded family's headline metrics, once it is loaded
            with gr.Accordion("Filters", open=False, elem_id="cir-filters") as filter_box:
                filters = {
                    key: gr.Dropdown([ANY], value=ANY, label=label, elem_id=f"cir-filter-{key}", visible=False)
                    for key, label in filter_fields().items()
                }  # those of every family, shown by the page view where the benchmark has values to filter by
            list_info = gr.Markdown(elem_id="cir-list-info")
            query_list = gr.Dataframe(
                headers=LIST_COLUMNS,
                interactive=False,
                max_height=480,
                wrap=True,
                label="Queries (click a row to open it)",
                elem_id="cir-query-list",
                column_widths=list_widths(LIST_COLUMNS),
            )
            query_ids = gr.State([])
    share = gr.Textbox(visible="hidden", elem_id="cir-share-query")
    return ExploreUI(
        search,
        filters,
        sort,
        list_info,
        query_list,
        query_ids,
        header,
        paraphrase,
        retrievers,
        k,
        rerank,
        top_n,
        rerank_note,
        results,
        message,
        table,
        prompt,
        share,
        loading,
        body,
        about,
        filter_box,
        compare,
    )


def paraphrase_table_label(primary: str) -> str:
    return f"Paraphrase sensitivity: {primary} of each phrasing of this intent (first stage)"


# ------------------------------------------------------------------ callbacks (plain functions)
WAITING_MARK = " (computing…)"


ORDER_LABEL = "Benchmark order"


def sort_choices(service: ExplorerService, pending=None, metric: str | None = None) -> list[tuple[str, str]]:
    """The sort dropdown: the sorts of the benchmark's family that can return something here, the A-vs-B
    ones comparing `metric` (None: the primary; the "compare by" menu picks it); while the background run
    computes their data, they say so. The label stays the same while the run counts on (the list's info
    line says n/N): a label that changes under a chosen value is not redrawn by gradio's dropdown, and a
    long one is cut under its arrow."""
    out = []
    for c in service.sorts():
        if not c.available:
            continue
        name, label = c.name, c.label
        if metric and name.startswith(DIFF_PREFIX):
            name = with_compared(name, metric, service.family.primary)
            label = service.sort_label(name)
        out.append((label if pending is None or pending.sort_ready(name) else f"{label}{WAITING_MARK}", name))
    return out


def compared_metric(service: ExplorerService, sort: str | None) -> str:
    """The metric A-vs-B sort `sort` compares (the primary for any other sort)."""
    if sort and sort.startswith(DIFF_PREFIX) and sort.count(":") > 1:
        return sort.rpartition(":")[2]
    return service.family.primary


def sort_update(service: ExplorerService, pending=None, value: str | None = None, metric: str | None = None):
    """The dropdown's choices (A vs B comparing `metric`, or the metric of an A-vs-B `value`), with the
    sorts not offered on this benchmark and why under it."""
    missing = [f"{c.label}: {c.reason}" for c in service.sorts() if not c.available]
    info = ("Not offered here: " + "; ".join(missing)) if missing else None
    kw = {} if value is None else {"value": value}
    if value and value.startswith(DIFF_PREFIX):
        metric = compared_metric(service, value)
    return gr.update(choices=sort_choices(service, pending, metric), info=info, **kw)


def compare_update(service: ExplorerService, sort: str | None = None):
    """The "compare by" menu: the metrics A-vs-B sorts compare (the family's primary first, then the
    headline ones papers lead with), shown where there is a choice and an A-vs-B sort."""
    metrics = service.compare_metrics()
    pairs = any(c.available and c.name.startswith(DIFF_PREFIX) for c in service.sorts())
    return gr.update(
        choices=[(m if m != service.family.primary else f"{m} (primary)", m) for m in metrics],
        value=compared_metric(service, sort),
        visible=pairs and len(metrics) > 1,
    )


def list_queries(
    service: ExplorerService, text: str, filters: dict[str, str], sort: str, pending=None
) -> dict[str, Any]:
    """The query list for a search text, filters and a sort. `pending`: the background run's
    status (`PrecomputeStatus`); until it is ready a failure sort lists benchmark order and says why."""
    waiting = ""
    if pending is not None and not pending.sort_ready(sort):
        label = service.sort_label(sort)
        waiting = (
            f"⏳ “{label}” is being computed in the background ({pending.progress() or 'starting'}); "
            "benchmark order until then, the list re-sorts by itself when it is ready"
        )
        sort = "order"
    found = service.find_queries(
        text or "", {k: (None if v in (None, ANY) else v) for k, v in filters.items()}, sort or "order"
    )
    shown = len(found.rows)
    info = f"**{found.total:,}** matching queries" + (f" (showing the first {shown})" if shown < found.total else "")
    if found.note:
        info += f" — {components.md_escape(found.note)}"
    if sort and sort != "order" and service.failure_source:
        info += f". Results from: {components.md_escape(service.failure_source)}"
    if waiting:
        info = f"{waiting}.  \n{info}"
    # tolist(), not list(): iterating a text column steps through pyarrow one cell at a time (~3 ms a page load)
    return {"table": shown_columns(service, found.rows), "ids": found.rows["query"].tolist(), "info": info}


def shown_columns(service: ExplorerService, rows: pd.DataFrame) -> pd.DataFrame:
    """The list's columns that say something here: no "why" in benchmark order, no "type" on a benchmark
    without intent types (CIRR, FashionIQ, ...), no "refs" where every query has one reference image."""
    empty = []
    has_types, has_two_refs = table_facts(service.table)
    if "why" in rows and not rows["why"].astype(str).str.len().any():
        empty.append("why")
    if "type" in rows and not has_types:
        empty.append("type")
    if "refs" in rows and not has_two_refs:
        empty.append("refs")
    return rows.drop(columns=empty)


_TABLE_FACTS: list[tuple] = []  # (table, *its facts) of the last few query tables seen


def table_facts(table: pd.DataFrame) -> tuple[bool, bool]:
    """(any query with an intent type, any with two reference images) of a service's query table, which is
    fixed for the service's life: read once, not over every query at each listing (each page load)."""
    for seen, *facts in _TABLE_FACTS:
        if seen is table:
            return tuple(facts)
    facts = (bool((table["intent_category"] != NO_VALUE).any()), bool(len(table) and table["n_refs"].max() > 1))
    _TABLE_FACTS[:] = [(table, *facts), *_TABLE_FACTS[:3]]
    return facts


def list_update(rows: pd.DataFrame) -> dict:
    """The query list's value with the column widths for the columns it has."""
    return gr.update(value=rows, column_widths=list_widths(rows.columns))


def about_update(service: ExplorerService) -> str:
    """ "What am I looking at?" for the loaded benchmark (`wording.about_markdown`)."""
    tags = [MODALITY_LABELS.get(m, m) for m in service.modality.values()]
    return about_markdown(service.benchmark.name, service.family, service.views, tags, service.reranker_name)


def filters_update(service: ExplorerService) -> dict:
    """The filters' accordion, labelled with the filters this benchmark has (hidden when it has none; a
    filter whose every query has the same value filters nothing, so it is not offered)."""
    choices = service.filter_choices()
    labels = [label for key, label in service.filter_fields.items() if len(choices.get(key, [])) > 1]
    return gr.update(label=filters_label(labels), visible=bool(labels))


def show_view(
    service: ExplorerService,
    query_id: str,
    retrievers: list[str] | None,
    k: int,
    rerank: bool,
    top_n: int,
    notes: list[str] | None = None,
    sort: str | None = None,
) -> dict[str, Any]:
    """Everything the page shows for one query (one paraphrase) and settings; `sort`: the list's, kept
    in the view's link."""
    if not query_id:
        raise ServiceError("pick a query first")
    view = service.query_view(query_id)
    names = service.check_retrievers(retrievers)
    messages = list(notes or [])
    rerank = bool(rerank) and service.reranker_name is not None
    k, top_n = clamp(k, *K_RANGE, default=10), clamp(top_n, *SLIDER_TOP_N, default=20)  # never refused
    if not names:
        comparison = None
        messages.append(
            "Select at least one retriever."
            if service.retriever_names
            else "No retrievers are loaded: " + "; ".join(service.warnings)
        )
        table = pd.DataFrame()
    else:
        comparison = service.compare(query_id, names, k=k, rerank=rerank, top_n=top_n)
        # the family's primary metric names the numbers (AP@10 on the world, Recall@1 on CIRR, ...)
        table = service.paraphrase_table(query_id, names, shown=True).rename(
            columns={"paraphrase": f"phrasing ({service.family.primary})"}
        )
    several = len(view.paraphrases) > 1  # one phrasing (CIRR, FashionIQ, ...): no choice and no spread to show
    state = ViewState(
        service.benchmark.name, query_id, view.paraphrase_index, tuple(names), rerank, top_n, k, sort or ORDER
    )
    prompt = service.reranker_prompt(view.query.instruction, len(view.query.reference_ids))
    return {
        "header": components.query_header_html(view),
        "paraphrase": gr.update(
            choices=[(f"{p.label}: {p.instruction}", p.query_id) for p in view.paraphrases],
            value=query_id,
            visible=several,
        ),
        "results": components.results_html(comparison, "Select a retriever to see results."),
        "table": gr.update(
            value=table,
            visible=several and not table.empty,  # the radio shows the instructions
            label=paraphrase_table_label(service.family.primary),
        ),
        "prompt": prompt,
        "share": encode_state(state),
        "message": components.notes_markdown(messages),
        "k": k,
        "top_n": gr.update(value=top_n, interactive=rerank),  # how many to rerank: asked only while reranking
    }


def rerank_controls(service: ExplorerService, on: bool = False) -> dict[str, Any]:
    """The reranker checkbox (disabled, with the reason, when there is no reranker)."""
    if service.reranker_name:
        return {
            "rerank": gr.update(value=bool(on), interactive=True, label=f"Rerank with {service.reranker_name}"),
            "note": components.md_escape(hide_paths(service.reranker_note)) if service.reranker_note else "",
        }
    return {
        "rerank": gr.update(value=False, interactive=False, label="Rerank (unavailable)"),
        "note": hide_paths(service.reranker_note),
    }


# ------------------------------------------------------------------ wiring
def wire(
    ui: ExploreUI,
    get_service: Callable[[], ExplorerService],
    get_pending: Callable[[], Any] = lambda: None,
    parent_origin: str = HUB_ORIGIN,
) -> None:
    filter_components = list(ui.filters.values())
    view_outputs = ui.view_outputs()

    def as_view_outputs(out: dict[str, Any]) -> tuple:
        return (
            out["header"],
            out["paraphrase"],
            out["results"],
            out["table"],
            out["prompt"],
            out["share"],
            out["message"],
            out["k"],
            out["top_n"],
        )

    @guarded("Listing queries")
    def on_list(text, sort, *filter_values):
        out = list_queries(get_service(), text, dict(zip(ui.filters, filter_values)), sort, get_pending())
        return list_update(out["table"]), out["ids"], out["info"]

    ui.on_list = on_list  # the app re-runs it when the background run is done

    list_inputs = [ui.search, ui.sort, *filter_components]
    list_outputs = [ui.query_list, ui.query_ids, ui.list_info]
    ui.search.submit(on_list, list_inputs, list_outputs)
    for comp in [ui.sort, *filter_components]:
        comp.input(on_list, list_inputs, list_outputs, trigger_mode="always_last")

    @guarded("Keeping the sort in the link")
    def on_sort_link(sort, share):
        return with_sort(share, sort) if share else gr.skip()

    ui.sort.input(on_sort_link, [ui.sort, ui.share], [ui.share], trigger_mode="always_last", show_progress="hidden")

    @guarded("Changing what A vs B compares")
    def on_compare(metric, sort, share, text, *filter_values):
        service, pending = get_service(), get_pending()
        picked = with_compared(sort or ORDER, metric, service.family.primary)
        if picked == (sort or ORDER):  # not an A-vs-B sort: its menu entries compare the metric from now on
            return sort_update(service, pending, None, metric), *(gr.skip(),) * 4
        out = list_queries(service, text, dict(zip(ui.filters, filter_values)), picked, pending)
        link = with_sort(share, picked) if share else gr.skip()
        return sort_update(service, pending, picked), list_update(out["table"]), out["ids"], out["info"], link

    ui.compare.input(
        on_compare,
        [ui.compare, ui.sort, ui.share, ui.search, *filter_components],
        [ui.sort, *list_outputs, ui.share],
        trigger_mode="always_last",
    )

    @guarded("Opening the query")
    @on_gpu
    def on_select(ids, retrievers, k, rerank, top_n, evt: gr.SelectData, sort=None):
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        query_id = (evt.row_value or [None])[0] if evt.row_value else (ids[row] if ids and row < len(ids) else None)
        return as_view_outputs(show_view(get_service(), query_id, retrievers, k, rerank, top_n, sort=sort))

    ui.query_list.select(
        on_select, [ui.query_ids, ui.retrievers, ui.k, ui.rerank, ui.top_n, ui.sort], view_outputs
    ).then(None, None, None, js=SCROLL_TO_VIEW_JS)

    @guarded("Updating the results")
    @on_gpu
    def on_view(query_id, retrievers, k, rerank, top_n, sort=None):
        return as_view_outputs(show_view(get_service(), query_id, retrievers, k, rerank, top_n, sort=sort))

    # "always_last": a change made while the previous one is being applied is applied after it
    # (gradio's default drops an event that fires while the last one runs: fast input was lost,
    # e.g. a second retriever unticked before the first untick's view came back)
    view_inputs = [*ui.view_inputs(), ui.sort]
    ui.paraphrase.input(on_view, view_inputs, view_outputs, trigger_mode="always_last")
    ui.retrievers.input(on_view, view_inputs, view_outputs, trigger_mode="always_last")
    ui.rerank.input(on_view, view_inputs, view_outputs, trigger_mode="always_last")
    ui.k.release(on_view, view_inputs, view_outputs, trigger_mode="always_last")
    ui.top_n.release(on_view, view_inputs, view_outputs, trigger_mode="always_last")
    ui.share.change(None, [ui.share], None, js=url_js(parent_origin))
