"""The Gradio app in-process: the factory, every wired callback (called through the Blocks'
own function table), URL state, the HTML tiles, and error handling. No server, no browser
(tests/test_ui_browser.py drives a real one)."""

from __future__ import annotations

import atexit
import html as html_lib
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gradio as gr

from PIL import Image

from cir_demo.explorer import Column, Comparison, ServiceError, Tile
from cir_demo.ui import app as ui_app
from cir_demo.ui import components, explore, report, served_files
from cir_demo.ui.guard import guarded
from cir_demo.ui.state import ViewState, decode_state, encode_state, resolve_state


@pytest.fixture(scope="module")
def demo(service):
    return ui_app.create_app(service)


def wired(demo, name):
    """The function gradio calls for an event handler named `name` (the guarded wrapper)."""
    for block_fn in demo.fns.values():
        if getattr(block_fn.fn, "__name__", None) == name:
            return block_fn
    raise AssertionError(
        f"no event handler {name!r}; have {sorted({getattr(f.fn, '__name__', '?') for f in demo.fns.values()})}"
    )


def load_page(demo, params):
    """What a page load shows, step by step: the status poll's updates, then the prepared view."""
    import asyncio

    async def poll():
        return [step async for step in wired(demo, "on_load").fn()]

    steps = asyncio.run(poll())
    return steps + [wired(demo, "on_ready").fn(gr.Request(query_params=params))]


def plain(md: str) -> str:
    """The text a Markdown value shows (echoed values are escaped: components.md_escape)."""
    return html_lib.unescape(re.sub(r"\\(.)", r"\1", md))


def count(html: str, cls: str) -> int:
    return len(re.findall(rf'class="cir-tile {cls}"', html))


# =========================================================================== factory
def test_factory_builds_blocks_without_launching(demo):
    assert isinstance(demo, gr.Blocks) and not demo.is_running
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    for needed in (
        "cir-search",
        "cir-sort",
        "cir-query-list",
        "cir-paraphrases",
        "cir-retrievers",
        "cir-rerank",
        "cir-top-n",
        "cir-results",
        "cir-paraphrase-table",
        "cir-prompt",
        "cir-upload-1",
        "cir-upload-2",
        "cir-upload-submit",
        "cir-report-metrics",
        "cir-report-plots",
        "cir-share-query",
        "cir-status",
    ):
        assert needed in ids, needed
    names = {getattr(f.fn, "__name__", None) for f in demo.fns.values()}
    assert {
        "on_load",
        "on_ready",
        "on_list",
        "on_select",
        "on_view",
        "on_files",
        "on_submit",
        "on_example",
        "on_show",
    } <= names
    for f in demo.fns.values():  # every python callback is guarded (exceptions become messages)
        if f.fn is not None:
            assert hasattr(f.fn, "__wrapped__"), f.fn


def test_help_lists_launch_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        ui_app.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for opt in (
        "--benchmark",
        "--retrievers",
        "--reranker",
        "--server-name",
        "--port",
        "--share",
        "--queue-size",
        "--concurrency",
    ):
        assert opt in out


def test_unknown_benchmark_is_refused_before_launch(capsys):
    assert ui_app.main(["--benchmark", "wrold"]) == 2
    assert "did you mean" in capsys.readouterr().err.lower()


# =========================================================================== page load and URL state
def test_page_load_opens_the_linked_view(demo, service):
    group = service.benchmark.paraphrases(service.benchmark.queries[6].query_id)
    names = service.retriever_names[1:3]
    params = {
        "benchmark": "world",
        "query": group[0].query_id,
        "paraphrase": "3",
        "retrievers": ",".join(names),
        "rerank": "1",
        "top_n": "10",
        "k": "5",
    }
    final = load_page(demo, params)[-1]
    by_id = {getattr(c, "elem_id", None): v for c, v in final.items()}
    assert by_id["cir-paraphrases"]["value"] == group[2].query_id
    assert by_id["cir-retrievers"]["value"] == names
    assert by_id["cir-rerank"]["value"] is True and by_id["cir-rerank"]["interactive"] is True
    assert by_id["cir-top-n"]["value"] == 10 and by_id["cir-top-n"]["interactive"] is True
    share = by_id["cir-share-query"]
    assert decode_state(dict(pair.split("=") for pair in share.split("&"))).state == ViewState(
        "world", group[2].query_id, 2, tuple(names), True, 10, 5
    )
    results = by_id["cir-results"]
    assert all(f">{n}<" in results for n in names) and service.retriever_names[0] + "<" not in results
    assert results.count('<li class="cir-tile') == 5 * len(names)
    assert "P(yes)" in results
    assert "world (tiny)" in plain(by_id["cir-status"])
    listed = by_id["cir-query-list"]["value"]  # as gradio's Dataframe takes it (ui/tables.py)
    assert set(listed) == {"headers", "data"} and len(listed["data"]) == len(service.table)
    assert by_id["cir-query-list"]["column_widths"] == explore.list_widths(listed["headers"])
    assert by_id["cir-loading"]["visible"] is False and by_id["cir-explore-body"]["visible"] is True
    assert by_id["cir-link-note"] == ""  # a good link: nothing to say
    choices = service.filter_choices()  # the oracle: the benchmark's values per filter
    shown = [k for k in explore.filter_fields() if len(choices.get(k, [])) > 1]
    assert shown and [k for k in explore.filter_fields() if f"cir-filter-{k}" in by_id] == shown  # the rest stay hidden
    for key in shown:
        assert by_id[f"cir-filter-{key}"]["choices"] == [explore.ANY, *choices[key]]
        assert by_id[f"cir-filter-{key}"]["visible"] is True


def test_a_sorts_link_without_a_query_opens_the_query_its_list_shows_first(demo, service):
    """`?sort=<a failure sort>` alone opens the first query of the list the page shows under that sort
    (the oracle: the page's own list, first row), in the link it writes back; with a query it opens
    that query, and a link without a sort the one a plain page opens."""
    from cir_demo.explorer.first_view import first_query

    def opened(params):
        final = load_page(demo, params)[-1]
        by_id = {getattr(c, "elem_id", None): v for c, v in final.items()}
        first_row = by_id["cir-query-list"]["value"]["data"][0]
        return by_id["cir-paraphrases"]["value"], first_row, by_id["cir-share-query"]

    sorts = [c.name for c in service.sorts() if c.available and c.name != "order"]
    assert sorts
    for sort in sorts:
        query, first_row, share = opened({"sort": sort})
        assert query == first_row[0], sort
        assert f"query={query}" in share and f"sort={sort}" in share
    chosen = service.benchmark.queries[5].query_id
    assert opened({"sort": sorts[0], "query": chosen})[0] == chosen
    assert opened({})[0] == first_query(service)


def test_page_load_with_a_bad_link_explains_and_falls_back(demo, service):
    params = {"query": "nope", "retrievers": "ghost," + service.retriever_names[0], "k": "999", "colour": "red"}
    final = load_page(demo, params)[-1]
    by_id = {getattr(c, "elem_id", None): v for c, v in final.items()}
    message = plain(by_id["cir-link-note"])  # at the top of the page, not below the controls
    assert "nope" in message and "ghost" in message and "k=999" in message and "colour" in message
    assert "could not be opened exactly" in message and "nope" not in plain(by_id["cir-message"])
    from cir_demo.explorer.first_view import first_query

    assert by_id["cir-paraphrases"]["value"] == first_query(service)  # what a link without a query opens
    assert by_id["cir-top-n"]["interactive"] is False  # no reranking: how many to rerank is not asked
    assert by_id["cir-retrievers"]["value"] == [service.retriever_names[0]]


def test_the_background_work_starts_after_the_first_view_or_its_wait(service):
    """A cold start's background work (the shipped outputs' install, else the run) waits for the first page
    view to be prepared, so it does not share the GIL with it; with no visitor it starts after the wait.
    Observed by a recorder of the calls, not by timing."""
    import threading

    d = ui_app.create_app(service)
    calls = []

    class Recorder:
        def start_for(self, svc):
            calls.append((svc is service, d.cir_first_view.is_set()))

    waiting = threading.Thread(target=ui_app.start_after_first_view, args=(d, Recorder(), service, 600.0))
    waiting.start()
    assert not d.cir_first_view.is_set() and calls == []
    load_page(d, {})
    waiting.join(120)
    assert not waiting.is_alive() and calls == [(True, True)]  # started, and only once the view was prepared
    nobody = ui_app.create_app(service)
    calls.clear()
    d = nobody
    ui_app.start_after_first_view(nobody, Recorder(), service, wait_s=0.01)
    assert calls == [(True, False)]  # nobody came: started after the wait all the same


def test_page_load_while_loading_shows_progress_then_the_view(service):
    class SlowLoader:
        def __init__(self):
            self.polls = 0

        @property
        def ready(self):
            self.polls += 1
            return self.polls > 2

        def status(self):
            from cir_demo.explorer import LoadStatus

            return LoadStatus("building index for tiny-ui-fusion", False, None, 3.0, "encode 10/396")

        def wait(self, timeout=None):
            return service

    ui_app.LOAD_POLL_S, saved = 0.0, ui_app.LOAD_POLL_S
    try:
        d = ui_app.create_app(SlowLoader())
        steps = load_page(d, {})
    finally:
        ui_app.LOAD_POLL_S = saved
    first = {getattr(c, "elem_id", None): v for c, v in steps[0].items()}
    assert "building index for tiny-ui-fusion" in plain(first["cir-status"]) and "encode 10/396" in plain(
        first["cir-status"]
    )
    panel = first["cir-loading"]  # where the results will be: what, n/N with a bar, seconds
    assert "building index for tiny-ui-fusion" in panel and "<b>10 / 396</b>" in panel
    assert '<progress max="396" value="10"' in panel and "3 s" in panel
    assert len(steps) >= 2 and any(getattr(c, "elem_id", None) == "cir-results" for c in steps[-1])


def test_state_round_trip_and_resolution():
    rng = np.random.default_rng(1)
    for _ in range(50):
        s = ViewState(
            "world",
            f"w{rng.integers(1, 999):05d}",
            int(rng.integers(0, 6)),
            tuple(rng.choice(["a", "b", "c-d"], size=int(rng.integers(1, 4)), replace=False)),
            bool(rng.integers(0, 2)),
            int(rng.integers(1, 51)),
            int(rng.choice([5, 10, 20])),
        )
        query = encode_state(s)
        params = dict(p.split("=", 1) for p in query.split("&"))
        parsed = decode_state(params)
        assert parsed.notes == []
        expected = s if s.rerank else ViewState(s.benchmark, s.query_id, s.paraphrase, s.retrievers, False, 20, s.k)
        assert parsed.state == expected
    parsed = decode_state({"query": "q1", "paraphrase": "9", "retrievers": "a,zz", "rerank": "1", "benchmark": "world"})
    out = resolve_state(parsed, "world", {"q1"}, {"q1": 6}, ["a", "b"], can_rerank=False, default_query="q0")
    assert out.state == ViewState("world", "q1", None, ("a",), False, 20, 10)
    text = " ".join(out.notes)
    assert "paraphrase 9" in text and "zz" in text and "reranker" in text
    other = resolve_state(
        decode_state({"benchmark": "pinpoint", "query": "q1"}), "world", {"q1"}, {"q1": 6}, ["a"], True, "q0"
    )
    assert other.state.query_id == "q0" and "pinpoint" in other.notes[0]


# =========================================================================== explore callbacks
def test_list_callback_filters_sorts_and_reports_counts(demo, service):
    fn = wired(demo, "on_list").fn
    filters = {k: explore.ANY for k in explore.filter_fields()}
    filters["is_single"] = "two images"
    table, ids, info = fn("", "two_image", *filters.values())
    expected = service.find_queries("", {"is_single": "two images"}, "two_image")
    assert ids == list(expected.rows["query"]) and len(ids) > 0
    assert f"**{expected.total:,}** matching" in info
    assert list(table["value"].columns) == explore.LIST_COLUMNS  # a failure sort: with its reasons
    assert table["column_widths"] == explore.list_widths(explore.LIST_COLUMNS)
    assert sum(float(w.rstrip("%")) for w in table["column_widths"]) == pytest.approx(100, abs=2)
    table, ids, info = fn("", "order", *[explore.ANY] * len(filters))
    assert list(table["value"].columns) == [c for c in explore.LIST_COLUMNS if c != "why"]  # no empty "why"
    table, ids, info = fn("no such words anywhere", "order", *[explore.ANY] * len(filters))
    assert ids == [] and "**0** matching" in info


def test_the_report_comes_when_its_tab_opens(demo, service):
    """A page view leaves the Report (its run's table, plots and downloads) to the tab's opening; opening
    it shows what `report.show_report` gives for the service (the oracle: called directly)."""
    report_ids = {b._id for b in demo.blocks.values() if (getattr(b, "elem_id", None) or "").startswith("cir-report")}
    final = load_page(demo, {})[-1]
    assert report_ids and not report_ids & {c._id for c in final}
    [tab] = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "cir-tab-report"]
    [opened] = [f for f in demo.fns.values() if (tab._id, "select") in f.targets]
    shown = dict(zip(report.OUTPUTS, opened.fn(None, [])))
    expected = report.show_report(service, None, None)
    assert shown["info"] == expected["info"] and shown["columns"] == expected["columns"]
    assert shown["run"] == expected["run"] and shown["files"] == expected["files"]


def test_background_run_poll_never_undoes_a_sort_picked_meanwhile(service):
    """A poll's reply can arrive after a sort the visitor picked since the poll was sent (seen in CI:
    the first poll set the dropdown back to benchmark order). Only the poll that finds the run done
    sets the sort's value; the page load sets where the poll starts, so an unchanged run sends nothing."""
    from cir_demo.explorer.precompute import PrecomputeStatus

    class Followed:  # the page reads only the background run's status
        def __init__(self):
            self.now = PrecomputeStatus("waiting")

        def status(self):
            return self.now

    job = Followed()
    d = ui_app.create_app(service, job)
    first = [v for v in load_page(d, {})[-1].values() if isinstance(v, (str, bool))]
    assert "waiting:0/0:" in first and False in first
    tick = wired(d, "on_tick").fn
    filters = [explore.ANY] * len(explore.filter_fields())
    skip = gr.skip()
    assert all(v == skip for v in tick(False, ui_app.run_status_key(job.now), None, "", "worst", None, *filters))

    job.now = PrecomputeStatus("running", 1, 9)
    out = tick(False, "waiting:0/0:", None, "", "order", None, *filters)  # sent before the visitor picked "worst"
    sort_update, info = out[1], out[-1]
    assert "value" not in sort_update and sort_update["choices"]  # the labels, never the pick
    assert info == skip  # benchmark order: nothing waits
    out = tick(False, "waiting:0/0:", None, "", "worst", None, *filters)
    assert "being computed in the background (1/9)" in out[-1] and "value" not in out[1]

    job.now = PrecomputeStatus("done", 9, 9, "run r")
    out = tick(False, ui_app.run_status_key(PrecomputeStatus("running", 1, 9)), None, "", "worst", None, *filters)
    assert out[1]["value"] == "worst" and out[2] is True and out[4] == "done:9/9:run r"
    assert "being computed" not in out[-1] and "matching queries" in out[-1]
    assert all(v == skip for v in tick(True, out[4], None, "", "order", None, *filters))  # done: nothing more

    final = [v for v in load_page(d, {})[-1].values() if isinstance(v, (str, bool))]  # opened after the run
    assert True in final and "done:9/9:run r" in final


def test_every_input_handler_applies_the_last_change(demo):
    """gradio's default trigger mode drops an event that fires while the previous one runs: a second
    box unticked, a filter or sort changed before the first change's reply came back was lost and the
    page showed a view of a choice the visitor had undone. Every input handler applies the last one."""
    handlers = [f for f in demo.fns.values() if f.fn is not None and any(ev == "input" for _, ev in f.targets)]
    assert len(handlers) >= 8  # retrievers, paraphrase, rerank, sort, filters, report run, upload boxes
    dropping = sorted({getattr(f.fn, "__name__", "?") for f in handlers if f.trigger_mode != "always_last"})
    assert not dropping, dropping


def test_select_and_view_callbacks(demo, service):
    names = service.retriever_names
    qid = service.benchmark.queries[3].query_id
    evt = gr.SelectData(None, {"index": [3, 1], "value": "whatever", "row_value": [qid, "text", "Swap", 1, ""]})
    out = wired(demo, "on_select").fn([], names, 10, False, 20, evt)
    header, paraphrase, results, table, prompt, share, message, k, top_n = out
    assert (k, top_n) == (10, {"__type__": "update", "value": 20, "interactive": False})  # no reranking: no n
    cmp = service.compare(qid, names, k=10)
    for col in cmp.columns:  # badges and counts on the page equal the judgments
        pos = sum(t.judgment == "positive" for t in col.tiles)
        neg = sum(t.judgment == "negative" for t in col.tiles)
        section = results.split(f">{col.retriever}<")[1].split("</section>")[0]
        assert count(section, "cir-pos") == pos and count(section, "cir-neg") == neg
        assert f'data-positives="{pos}" data-negatives="{neg}"' in section
        assert section.count("✓ positive") == pos + 1 and section.count("✗ explicit negative") == neg + 1
        assert f"AP@10 <b>{col.metrics['AP@10']:.3f}</b>" in section
    assert paraphrase["value"] == qid and len(paraphrase["choices"]) == 6
    assert "query=" + qid in share and list(table["value"].columns)[1:5] == names
    other = service.benchmark.paraphrases(qid)[0].query_id
    out2 = wired(demo, "on_view").fn(other, names[:2], 5, True, 10)
    assert out2[1]["value"] == other and "rerank=1" in out2[5] and "P(yes)" in out2[2]
    assert out2[8]["value"] == 10 and out2[8]["interactive"] is True  # reranking: how many is asked
    assert out2[2].count('<li class="cir-tile') == 10
    out3 = wired(demo, "on_view").fn(qid, names[:1], 500, True, -3)  # typed out of range: clamped, not refused
    assert out3[7] == 50 and out3[8]["value"] == 5 and out3[2].count('<li class="cir-tile') == 50
    assert "top_n=5" in out3[5]
    out4 = wired(demo, "on_view").fn(qid, names + names[:1], 10, False, 20)  # a name twice is one column
    assert out4[2].count('<section class="cir-col"') == len(names)
    with pytest.raises(gr.Error, match="unknown retriever"):
        wired(demo, "on_view").fn(qid, names[:1] + ["no-such-retriever"], 10, False, 20)
    with pytest.raises(gr.Error, match="pick a query"):
        wired(demo, "on_view").fn(None, names, 10, False, 20)


def test_view_without_retrievers_says_so(service):
    out = explore.show_view(service, service.benchmark.queries[0].query_id, [], 10, False, 20)
    assert "Select at least one retriever" in plain(out["message"]) and "cir-tile" not in out["results"]


# =========================================================================== upload callbacks
def test_upload_callbacks(demo, service, tmp_path):
    q = next(x for x in service.benchmark.queries if len(x.reference_ids) == 2)
    p1, p2 = tmp_path / "one.png", tmp_path / "two.png"
    service.engine.open_image(q.reference_ids[0]).save(p1)
    service.engine.open_image(q.reference_ids[1]).convert("RGBA").save(p2)
    preview_html, message, problem = wired(demo, "on_files").fn(str(p1), str(p2))
    assert preview_html.count("<img") == 2 and message == "" and problem == ""
    results, message, *problems = wired(demo, "on_submit").fn(
        str(p1), str(p2), q.instruction, service.retriever_names, 10, True, 10
    )
    assert results.count('<li class="cir-tile') == 10 * len(service.retriever_names)
    message = plain(message)
    assert "cir-pos" not in results and "offline world" in message and "no badges" in message
    # the same pixels as the benchmark query: the reranked top 10 is a reordering of its first-stage top 10
    expected = service.compare(q.query_id, service.retriever_names[:1], k=10).columns[0]
    first_col = results.split("</section>")[0]
    assert set(re.findall(r'data-image-id="([^"]+)"', first_col)) == {t.image_id for t in expected.tiles}

    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    preview_html, message, problem = wired(demo, "on_files").fn(str(bad), None)
    assert "⚠" in problem and "bad.jpg" in plain(problem) and preview_html == ""  # next to the file fields, at once
    submit = wired(demo, "on_submit").fn
    names = service.retriever_names
    # problems show next to the field to fix (files, instruction, retrievers) and clear stale results
    results, message, files, text, retr = submit(str(bad), None, "make it red", names, 10, False, 20)
    assert (
        "⚠" in files
        and "bad.jpg" in plain(files)
        and "cir-tile" not in results
        and (message, text, retr) == ("", "", "")
    )
    results, message, files, text, retr = submit(None, None, "make it red", names, 10, False, 20)
    assert "upload at least one" in plain(files) and "cir-tile" not in results
    results, message, files, text, retr = submit(str(p1), None, "  ", names, 10, False, 20)
    assert "type an instruction" in plain(text) and not files and "cir-tile" not in results
    assert "Fix the problem marked ⚠ above" in results  # each search's own outcome, what a waiting page reads
    results, message, files, text, retr = submit(str(p1), None, "like <img1> but <img2>", [], 10, False, 20)
    assert (
        "only one image" in plain(text) and "select at least one retriever" in plain(retr) and "cir-tile" not in results
    )
    assert "Fix the 2 problems marked ⚠ above" in results
    results, message, files, text, retr = submit(str(p1), str(p2), "make it red", names[:1], 10, False, 20)
    assert (
        "<img1> and <img2>" in plain(message) and results.count('<li class="cir-tile') == 10
    )  # a hint, still searched
    # a Search pressed (click or Enter) while the last one is on its way runs after it, never dropped
    search = wired(demo, "on_submit")
    assert search.trigger_mode == "always_last"
    elem_ids = {block_id: getattr(b, "elem_id", None) for block_id, b in demo.blocks.items()}
    assert {(elem_ids[block_id], event) for block_id, event in search.targets} == {
        ("cir-upload-submit", "click"),
        ("cir-upload-instruction", "submit"),
    }
    button, problem = wired(demo, "on_retrievers").fn([])
    assert button["interactive"] is False and "select at least one" in plain(problem)
    assert wired(demo, "on_retrievers").fn(names[:1])[0]["interactive"] is True


def test_example_callback_writes_world_references(demo, service, tmp_path, monkeypatch):
    """The example's images are written once into the process's served folder (removed at exit): a
    second click hands out the same files and leaves nothing else behind (each click used to leave a
    folder in the temporary directory)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what a click leaves in the temporary directory
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))  # the served folder lies in gradio's cache
    monkeypatch.setattr(served_files, "_FOLDER", [])
    monkeypatch.setattr(atexit, "register", lambda fn, *args: None)
    f1, f2, text = wired(demo, "on_example").fn()
    q = next(x for x in service.benchmark.queries if len(x.reference_ids) == 2)
    assert text == q.instruction
    assert np.array_equal(np.asarray(Image.open(f1)), np.asarray(service.engine.open_image(q.reference_ids[0])))
    assert Path(f2).is_file()
    assert all(served_files._FOLDER[0] in Path(f).parents for f in (f1, f2))
    left = sorted(tmp_path.rglob("*"))
    assert wired(demo, "on_example").fn() == (f1, f2, text)
    assert sorted(tmp_path.rglob("*")) == left and [p.name for p in tmp_path.iterdir()] == ["gradio"]
    assert [p.name for p in (tmp_path / "gradio").iterdir()] == [served_files._FOLDER[0].name]


def test_served_files_are_handed_out_as_they_are(tmp_path, monkeypatch):
    """A file of the served folder (the Report's downloads, a world run's ~15 MB, named by every page
    load) is handed out by gradio without reading it: no hash of its bytes, no copy. The oracle is
    gradio's own path for any other file: hashed and copied into its cache."""
    import asyncio

    from gradio import processing_utils

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    monkeypatch.setattr(served_files, "_FOLDER", [])
    monkeypatch.setattr(atexit, "register", lambda fn, *args: None)
    hashed = []
    real = processing_utils.hash_file
    monkeypatch.setattr(processing_utils, "hash_file", lambda path, *a: hashed.append(Path(path)) or real(path, *a))
    served = served_files.served_folder() / "per_query.csv"
    served.write_text("x" * 10_000)
    elsewhere = tmp_path / "elsewhere.csv"
    elsewhere.write_text("y" * 100)
    block = gr.File()

    def handed(path: Path) -> str:
        data = gr.FileData(path=str(path)).model_dump()
        return asyncio.run(processing_utils.async_move_files_to_cache(data, block, postprocess=True))["path"]

    assert handed(served) == str(served) and hashed == []
    copy = handed(elsewhere)
    assert hashed == [elsewhere] and Path(copy) != elsewhere and Path(copy).read_text() == "y" * 100


# =========================================================================== report callback
def test_report_callback(demo, service, tmp_path, monkeypatch):
    # A runs folder of this test's own: the module's (tiny_setup's) holds what its other tests wrote.
    root = tmp_path
    monkeypatch.setenv("CIR_DEMO_RUNS", str(root / "runs"))
    out = wired(demo, "on_show").fn(None)
    assert out[4]["visible"] is False and out[5] == ""
    assert "No evaluation run" in out[1] and out[3]["value"] == [] and out[3]["visible"] is False
    assert out[2]["visible"] is False  # no empty table with placeholder headers
    assert "--eval" not in out[1] and "terminal" not in out[1]
    run = root / "runs" / "20990101-000000-world"
    (run / "plots").mkdir(parents=True)
    pd.DataFrame({"model": ["tiny-ui-fusion"], "mAP@10": [0.5], "mAP@10_ci_lo": [0.4], "mAP@10_ci_hi": [0.6]}).to_csv(
        run / "metrics.csv", index=False
    )
    Image.new("RGB", (8, 8)).save(run / "plots" / "precision_vs_safety.png")
    (run / "run_info.json").write_text('{"benchmark_fingerprint": "%s"}' % service.fingerprint)
    (run / "report.md").write_text("# report\n")
    (run / "report.html").write_text("<script>alert(1)</script>")  # never shared
    secret = root / "secret.txt"
    secret.write_text("server secret")
    (run / "paired.csv").symlink_to(secret)  # a planted link: not followed
    try:
        run_update, info, metrics, plots, files, columns, *own = wired(demo, "on_show").fn(None)
        assert len(own) == 5 and own[1]["visible"] is False  # no results-file columns: no "your runs" table
        shared = {Path(f).name: Path(f) for f in files["value"]}
        assert set(shared) == {"metrics.csv", "report.md", "run.zip"} and files["visible"] is True
        import zipfile

        with zipfile.ZipFile(shared["run.zip"]) as zf:  # report.md's plot links resolve inside the zip
            assert sorted(zf.namelist()) == ["metrics.csv", "plots/precision_vs_safety.png", "report.md"]
        assert "**mAP@10**: AP@10" in columns and "**Run**" in columns
        assert shared["report.md"].read_text() == "# report\n" and run not in shared["report.md"].parents  # a copy
        assert "report.md" in plain(info)
        assert run_update["value"] == run.name and run.name in plain(info) and str(root) not in info  # no server path
        assert metrics["visible"] is True and metrics["value"].loc[0, "mAP@10"] == "0.5000 [0.4000, 0.6000]"
        assert list(metrics["value"].columns) == ["Run", "mAP@10"]
        copy, caption = plots["value"][0]  # a checked copy outside runs/, never a path in the run folder
        assert root not in Path(copy).parents and "safety" in caption
        assert Path(copy).read_bytes() == (run / "plots" / "precision_vs_safety.png").read_bytes()
    finally:
        for f in [
            run / "plots" / "precision_vs_safety.png",
            run / "metrics.csv",
            run / "run_info.json",
            run / "report.md",
            run / "report.html",
            run / "paired.csv",
            secret,
        ]:
            f.unlink()
        (run / "plots").rmdir()
        run.rmdir()


# =========================================================================== html and guards
def test_tiles_mark_judgments_with_text_and_escape_content():
    tiles = [
        Tile("img<1>", 1, 0.9, "positive", "data:x", first_stage_rank=4, p_yes=0.91, reranked=True),
        Tile("i2", 2, 0.8, "negative", None, first_stage_rank=2, p_yes=0.4, reranked=True),
        Tile("i3", 3, 0.7, None, "data:y", first_stage_rank=1, p_yes=0.2, reranked=True),
        Tile("i4", 4, 0.6, None, "data:z", first_stage_rank=17, p_yes=0.3, reranked=True),
    ]
    col = Column(
        "ret<x>",
        "image",
        tiles,
        {"AP@10": 0.5, "precision@10": 0.2, "NegRecall@10": 0.1},
        {"AP@10": 0.25, "precision@10": 0.1, "NegRecall@10": 0.2},
    )
    page = components.results_html(Comparison("<img1> red", [None], ["ref"], [col], 10, True, "q", "v", 20))
    assert "ret&lt;x&gt;" in page and "img&lt;1&gt;" in page and "<x>" not in page
    assert count(page, "cir-pos") == 1 and count(page, "cir-neg") == 1
    assert "✓ positive" in page and "✗ explicit negative" in page  # text, not colour alone
    assert "▲3" in page and "▼1" not in page and "▼2" in page and "new in top 10" in page and "= same place" in page
    assert 'alt="Rank 1: img&lt;1&gt;, positive, score 0.900, moved up 3 (was rank 4), P(yes) 0.91"' in page
    assert "P(near miss)" not in page  # the reranker gives no near-miss answer
    assert 'aria-label="Rank 2: i2, explicit negative' in page  # a missing image still has a text label
    assert "before reranking" in page and "AP@10 <b>0.250</b>" in page
    failed = components.results_html(Comparison("t", [], [], [Column("r", "composed", error="boom <b>")], 10, True))
    assert 'role="alert"' in failed and "boom &lt;b&gt;" in failed
    assert "near miss?" not in page  # a reranker without a near-miss answer


def test_near_miss_answer_is_said_on_the_tile_and_the_ranking_rule_above():
    tiles = [
        Tile("a", 1, 0.9, None, "data:x", first_stage_rank=2, p_yes=0.4, reranked=True, p_near=0.1),
        Tile("b", 2, 0.8, "negative", "data:y", first_stage_rank=1, p_yes=0.2, reranked=True, p_near=0.8),
    ]
    col = Column("r", "composed", tiles)
    page = components.results_html(
        Comparison(
            "t", [None], ["ref"], [col], 10, True, "q", "world-verifier", 20, ranking="P(yes) - 2 * P(near miss)"
        )
    )
    assert "reordered by P(yes) - 2 * P(near miss)" in page and "near miss?: the judge" in page  # legend
    assert page.count('class="cir-near"') == 1  # only the tile the judge calls a near miss
    assert "the judge calls it a near miss (P 0.80)" in page  # in the tile's alt text too


def test_probabilities_keep_the_order_they_rank_by():
    """Reranked tiles in P(yes) order never all read 0.00: two significant digits of the distance to 0 or 1
    (an independent check: the shown numbers parse back in the same strict order)."""
    values = [0.9996, 0.99, 0.5, 0.031, 0.0021, 0.00031, 0.0000452]
    shown = [components.prob(v) for v in values]
    assert shown == ["0.99960", "0.99", "0.50", "0.03", "0.0021", "0.00031", "0.000045"]
    assert all(float(a) > float(b) for a, b in zip(shown, shown[1:]))
    assert components.prob(0.0) == "0" and components.prob(1.0) == "1" and components.prob(None) == "n/a"
    tiles = [
        Tile("a", 1, 0.5, None, None, first_stage_rank=10, p_yes=0.0004, reranked=True, p_near=0.0312),
        Tile("b", 2, 0.6, None, None, first_stage_rank=1, p_yes=0.0001, reranked=True, p_near=0.2),
    ]
    page = components.results_html(
        Comparison(
            "t",
            [None],
            ["ref"],
            [Column("r", "composed", tiles)],
            10,
            True,
            reranker="v",
            top_n=20,
            ranking="P(yes) - 2 * P(near miss)",
        )
    )
    assert "P(yes) 0.00040 · P(near miss) 0.03" in page and "P(yes) 0.00010 · P(near miss) 0.20" in page


def test_help_defines_the_reports_headline(service):
    assert "**mAP@10** (the Report's headline) = AP@10 averaged over the queries" in explore.about_update(service)


def test_a_bad_upload_or_run_is_one_line_and_the_tables_keep_their_content(demo, service, tmp_path, monkeypatch):
    """The Report's upload of an unusable results file, and a run that cannot be read: one line where the
    visitor looks (beside the upload; the run's notes), every other output left as it was (no error badge
    over a table), and no exception out of the handler."""
    import warnings

    bad = tmp_path / "mine.json"
    bad.write_text('{"0": {"retrieved_items": "x"}}')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gr.Warning outside a request is a Python warning
        out = wired(demo, "on_file").fn(str(bad), [], [])
        assert len(out) == 8 and out[0].startswith("⚠️ Adding your results file: ") and "mine.json" in out[0]
        assert "\n" not in out[0] and str(tmp_path) not in out[0]
        assert all(o == {"__type__": "update"} for o in out[1:])  # the tables and choices as they were

        def unreadable(label=None):
            raise ServiceError("runs/x/metrics.csv: cannot read (damaged)")

        monkeypatch.setattr(service, "report", unreadable)
        monkeypatch.setattr(service, "runs", lambda: [object()])
        monkeypatch.setattr(report, "show_report", lambda *a, **k: unreadable())
        shown = wired(demo, "on_show").fn(None)
    assert len(shown) == len(report.OUTPUTS)
    info = shown[report.OUTPUTS.index("info")]
    assert info.startswith("⚠️ Loading the report: ") and "cannot read (damaged)" in info
    assert all(o == {"__type__": "update"} for i, o in enumerate(shown) if i != report.OUTPUTS.index("info"))


def test_report_columns_have_labels_and_definitions():
    from cir_demo.ui.report import column_label, labelled

    raw = [
        "run",
        "mAP@10",
        "precision@10",
        "NegRecall@10",
        "recall@10",
        "ling_sens_paraphrase_range",
        "total_queries",
        "coverage",
        "mAP@25",
        "Recall@3",
        "hard_negative@1",
        "Recall_subset@2",
        "mean(Recall@5,Recall_subset@1)",
        "Recall@10/dress",
        "Recall@50_pooled",
        "average_recall",
    ]
    table, defs = labelled(pd.DataFrame(columns=raw))
    assert list(table.columns) == [
        "Run",
        "mAP@10",
        "P@10",
        "NegRecall@10",
        "Recall@10",
        "Paraphrase range",
        "Queries",
        "Coverage",
        "mAP@25",
        "Recall@3",
        "Hard negative@1",
        "Recall_subset@2",
        "Avg",
        "Recall@10 dress",
        "Recall@50 pooled",
        "Average",
    ]
    for label in table.columns:
        assert f"**{components.md_escape(label)}**: " in defs, label
    assert column_label("mAP@25")[1].startswith("AP@25 (average precision of the top 25)")
    assert column_label("some_new_column") == ("some new column", "a column of the run's metrics.csv (docs/metrics.md)")


def test_guard_turns_exceptions_into_messages():
    @guarded("Doing it")
    def service_error():
        raise ServiceError("the query <x> does not exist")

    @guarded("Doing it")
    def crash(a):
        return 1 / a

    @guarded("Streaming")
    def stream():
        yield 1
        raise RuntimeError("broken")

    with pytest.raises(gr.Error) as e:
        service_error()
    assert "Doing it: the query &lt;x&gt; does not exist" in str(e.value)
    with pytest.raises(gr.Error, match="ZeroDivisionError"):
        crash(0)
    assert crash(2) == 0.5
    gen = stream()
    assert next(gen) == 1
    with pytest.raises(gr.Error, match="RuntimeError: broken"):
        next(gen)


def test_query_header_escapes_instruction(service):
    q = next(x for x in service.benchmark.queries if "<img1>" in x.instruction)
    header = components.query_header_html(service.query_view(q.query_id))
    assert html_lib.escape(q.instruction) in header and "<img1>" not in header
    assert "Reference image 1 (" in header and "Reference image 2 (" in header


def test_number_sliders_clamp_instead_of_refusing():
    from cir_demo.ui.controls import clamp, number_slider

    slider = number_slider(5, 50, value=10, step=5, label="Results per column")
    assert [slider.preprocess(v) for v in (500, -3, 0, 23, 50, None, "x")] == [50, 5, 5, 25, 50, 10, 10]
    assert slider.get_config()["label"] == "Results per column"  # still gradio's slider, settings intact
    assert clamp(7, 1, 50) == 7 and clamp(7.5, 1, 50) == 7.5 and clamp(float("nan"), 5, 50, default=20) == 20


def test_a_link_naming_a_retriever_twice_opens_one_column(service):
    name, qid = service.retriever_names[0], service.benchmark.queries[0].query_id
    out = ui_app.initial_outputs(service, {"query": qid, "retrievers": f"{name},{name}"})
    assert out["retrievers"]["value"] == [name]
    assert out["view:results"].count('<section class="cir-col"') == 1
    assert (
        list(out["view:table"]["value"].columns)[1:2] == [name]
        and name not in list(out["view:table"]["value"].columns)[2:]
    )
    assert service.check_retrievers([name, name]) == [name]  # the one place every caller goes through


def test_explore_explains_itself(service):
    texts = explore.about_update(service)  # the world's help: its own terms
    for term in (
        "offline world",
        "AP@10",
        "P@10",
        "NegRecall@10",
        "composed",
        "image only",
        "text only",
        "lower is",
        "explicit negatives",
    ):
        assert term in texts, term
    from cir_demo.benchmarks.failure_views import CIRR, PINPOINT

    html = components.legend(reranked=False, judged=True, metrics=dict(PINPOINT.legend))
    assert 'title="explicit negatives in the top 10 over min(negatives, 10): lower is better"' in html
    # another family's legend is in its own words: a target, no explicit negatives, its Recall@k
    html = components.legend(reranked=False, judged=True, metrics=dict(CIRR.legend), words=("target", ""))
    assert "✓ target = green solid frame" in html and "negative" not in html and "AP@10" not in html
    assert "once the reference is deleted" in html and "img_set = a member" in html
    assert "R@k = Recall@k, Rs@k = Recall_subset@k" in html and "R@1: 1 when the target is first" in html


def test_long_link_values_are_cut_in_notes():
    from cir_demo.ui.state import ECHO_CHARS, decode_state, resolve_state

    long_id = "w" + "9" * 5000
    parsed = decode_state({"query": long_id, "retrievers": "x" * 300, "k": "7" * 400, "z" * 200: "1"})
    out = resolve_state(parsed, "world", {"w00001"}, {"w00001": 1}, ["a"], True, "w00001")
    assert len(out.notes) == 4
    for note in out.notes:
        assert len(note) < 3 * ECHO_CHARS + 120 and "…" in note, note
    assert out.state.query_id == "w00001"


@pytest.mark.parametrize("setting, sent", [(None, False), ("False", False), ("True", True)])
def test_telemetry_only_when_the_operator_asks(service, monkeypatch, setting, sent):
    """No version check or analytics event from the app's start unless GRADIO_ANALYTICS_ENABLED=True
    (gradio's own default sends both)."""
    import threading

    import gradio.analytics

    calls, checked = [], threading.Event()
    monkeypatch.setattr(gradio.analytics, "version_check", lambda: (calls.append("version_check"), checked.set()))
    monkeypatch.setattr(gradio.analytics, "initiated_analytics", lambda data: calls.append("initiated"))
    if setting is None:
        monkeypatch.delenv("GRADIO_ANALYTICS_ENABLED", raising=False)
    else:
        monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", setting)
    d = ui_app.create_app(service)
    if sent:
        assert checked.wait(60)  # the version check runs on a thread of its own
    assert d.analytics_enabled is sent
    assert sorted(calls) == (["initiated", "version_check"] if sent else []), calls


def test_queue_analytics_summary_is_not_rebuilt_per_event(monkeypatch):
    """Gradio rebuilds a pandas summary of up to 10,000 events after every event unless told not to;
    an operator's own setting is kept."""
    from cir_demo.ui.launch import QUEUE_ANALYTICS_ENV, quiet_queue_analytics

    monkeypatch.delenv("GRADIO_ANALYTICS_CACHE_FREQUENCY", raising=False)
    monkeypatch.setenv("GRADIO_ANALYTICS_MAX_EVENTS", "50")
    quiet_queue_analytics()
    import os

    assert os.environ["GRADIO_ANALYTICS_CACHE_FREQUENCY"] == QUEUE_ANALYTICS_ENV["GRADIO_ANALYTICS_CACHE_FREQUENCY"]
    assert os.environ["GRADIO_ANALYTICS_MAX_EVENTS"] == "50"
    with gr.Blocks() as blocks:
        gr.Markdown("x")
    blocks.queue()
    assert blocks._queue.ANAYLTICS_CACHE_FREQUENCY >= 1_000_000 and blocks._queue.ANALYTICS_MAX_EVENTS == 50


def test_report_plots_are_checked_copies_made_once_per_file_state(tmp_path):
    """The Report's plots go to gradio as copies outside the run folder (served as they are: no decode and
    encode per show), only of plain files that are intact PNGs; a plot changed on disk is copied again."""
    from PIL import Image

    plots = tmp_path / "runs" / "r" / "plots"
    plots.mkdir(parents=True)
    Image.new("RGB", (8, 8), (200, 10, 10)).save(plots / "good.png")
    Image.new("RGB", (8, 8)).save(plots / "jpeg.png", format="JPEG")  # not a PNG, whatever its name
    (plots / "cut.png").write_bytes((plots / "good.png").read_bytes()[:-20])  # damaged: its last chunk cut
    (plots / "page.png").write_text("<script>alert(1)</script>")
    (plots / "link.png").symlink_to(plots / "good.png")  # a planted link is not followed
    given = [(plots / n, f"caption of {n}") for n in ("good.png", "jpeg.png", "cut.png", "page.png", "link.png")]
    first = report.plot_copies(given)
    assert [c for _, c in first] == ["caption of good.png"]
    copy = Path(first[0][0])
    assert tmp_path not in copy.parents and copy.read_bytes() == (plots / "good.png").read_bytes()
    assert report.plot_copies(given) == first  # memoised: the same copy, nothing read or written again
    Image.new("RGB", (8, 8), (10, 200, 10)).save(plots / "good.png")
    again = report.plot_copies(given)
    assert again != first and Path(again[0][0]).read_bytes() == (plots / "good.png").read_bytes()


def test_report_copies_live_in_one_folder_of_the_process_removed_at_exit(tmp_path, monkeypatch):
    """Plots and downloads are copied into one temporary folder of this process, and that folder is
    removed when the process exits (each start used to leave a /tmp/cir-report-* folder behind)."""
    import atexit
    import zipfile

    from PIL import Image

    run = tmp_path / "runs" / "r"
    (run / "plots").mkdir(parents=True)
    for name in report.DOWNLOADS:
        (run / name).write_text(f"{name}\n")
    Image.new("RGB", (8, 8), (1, 2, 3)).save(run / "plots" / "a.png")
    at_exit = []
    monkeypatch.setattr(served_files, "_FOLDER", [])
    monkeypatch.setattr(report, "_COPIES", {})
    monkeypatch.setattr(report, "_PLOT_COPIES", {})
    monkeypatch.setattr(atexit, "register", lambda fn, *args: at_exit.append((fn, args)))
    downloads = report.shareable_copies(run)
    plots = report.plot_copies([(run / "plots" / "a.png", "a")])
    copies = [Path(p) for p in downloads] + [Path(p) for p, _ in plots]
    assert len(downloads) == len(report.DOWNLOADS) + 1 and len(plots) == 1
    assert zipfile.ZipFile(downloads[-1]).namelist() == [*report.DOWNLOADS, "plots/a.png"]
    folder = served_files._FOLDER[0]
    assert all(folder in c.parents and c.is_file() for c in copies), (folder, copies)
    assert len(at_exit) == 1  # one folder, one removal
    fn, args = at_exit[0]
    fn(*args)
    assert not folder.exists() and not any(c.exists() for c in copies)
    assert (run / "report.md").is_file() and (run / "plots" / "a.png").is_file()  # the run itself untouched


def test_the_app_serves_when_gradios_localhost_check_times_out(monkeypatch):
    """On a machine busy with other jobs gradio's HEAD request to its just-started server can outlast
    its 3 s timeout (`url_ok` then says False); the app serves anyway instead of ending with "a
    shareable link must be created" (the Space app fixture's start failed so beside two busy loops)."""
    import socket

    import gradio.networking
    import httpx

    monkeypatch.setattr(gradio.networking, "url_ok", lambda url: False)  # what that timeout returns
    with gr.Blocks() as demo:
        gr.Markdown("served")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui_app.launch_app(demo, "127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=60).status_code == 200
    finally:
        demo.close()


def test_legend_defines_the_marks_the_tiles_carry(service):
    """A tile marked as the query's own reference (a protocol that ranks it, as FashionIQ's gallery holds it)
    gets a legend line saying what the mark means; a page without such a tile has none. The world's filters'
    label names its own filters."""
    from cir_demo.explorer.views import REFERENCE_MARK

    def page(marks):
        tiles = [Tile("ref", 1, 0.9, None, None, marks=marks), Tile("b", 2, 0.5, "positive", None)]
        return components.results_html(
            Comparison("t", [None], ["ref"], [Column("r", "composed", tiles)], 10, True, words=("target", ""))
        )

    marked, plain_page = page((REFERENCE_MARK,)), page(())
    assert "query's reference = the query's own reference image" in html_lib.unescape(marked)
    assert "query's reference" not in html_lib.unescape(plain_page)
    assert 'data-mark="query&#x27;s reference"' in marked
    label = ui_app.initial_outputs(service, {})["filter_box"]["label"]
    assert label.startswith("Filters (intent type, edit subcategory, domain")


def test_first_query_from_the_shipped_outputs_before_any_run(service, tmp_path, monkeypatch):
    """With no eval run stored yet (a first start computing it), the query a first visit opens is chosen
    from the eval outputs the repository ships for this benchmark content (packed as `index prebuilt`
    packs them), even when other code wrote them: here the runs disagree only on the fifth query; a
    reranked run is no column. Shipped outputs of other content are not read (the first query then)."""
    from types import SimpleNamespace

    from cir_demo.explorer.first_view import first_query
    from cir_demo.index.prebuilt_run import pack_run, shipped_dir

    order, names = list(service.table["query_id"]), service.retriever_names
    rows = [
        {"run": n, "query_id": q, "AP@10": 0.5 if (q == order[4] and i == 1) else 0.0}
        for i, n in enumerate(names)
        for q in order
    ]
    rows += [{"run": f"{names[0]}+rerank", "query_id": order[0], "AP@10": 1.0}]
    run = tmp_path / "run"
    run.mkdir()
    pd.DataFrame(rows).to_csv(run / "per_query.csv", index=False)
    monkeypatch.setenv("CIR_DEMO_PREBUILT", str(tmp_path / "prebuilt"))
    monkeypatch.setattr(service, "stored_sorts", lambda: set())  # no run on disk yet (other tests here sort)
    for n, (fingerprint, expected) in enumerate(((service.fingerprint, order[4]), ("other", order[0]))):
        pack_run(
            run,
            shipped_dir(service.benchmark),
            {"benchmark_fingerprint": fingerprint, "code_sha256": "old"},
            ["eval"],
            {},
        )
        # a background run's state of its own: the choice is made again, not read from an earlier page
        assert first_query(service, SimpleNamespace(state=f"running-{n}", ready_sorts=frozenset())) == expected


def test_page_load_tables_are_what_gradio_makes_of_the_frames(service):
    """The page load hands gradio its tables as dicts built in the callback (`frames_as_tables`): what gradio
    sends of each is what it makes of the pandas frame itself (the oracle), for every table of a page
    load and a frame with text, missing values, integers, floats, booleans; an empty one; other outputs
    untouched."""
    import json

    from cir_demo.ui.tables import frames_as_tables, table_value

    def sent(value) -> str:
        return json.dumps(gr.Dataframe().postprocess(value).model_dump(), sort_keys=True)

    out = ui_app.initial_outputs(service, {})
    frames = {k: v["value"] for k, v in out.items() if isinstance(v, dict) and isinstance(v.get("value"), pd.DataFrame)}
    assert {"list", "view:table"} <= set(frames), sorted(frames)  # the Report's, once a run exists
    mixed = pd.DataFrame(
        {"id": ["a", None, "c"], "n": [1, 2, 3], "x": [0.5, float("nan"), 2.0], "ok": [True, False, True]}
    ).astype({"id": "str"})  # the app's text columns: missing is NaN
    frames.update(mixed=mixed, empty=mixed.iloc[:0], text=pd.DataFrame({"why": ["é ✓", "", "x"]}))
    for name, frame in frames.items():
        assert sent(table_value(frame)) == sent(frame), name
    table, markdown = gr.Dataframe(), gr.Markdown()
    converted = frames_as_tables({table: gr.update(value=mixed, visible=True), markdown: "text"})
    assert converted[table]["visible"] is True and sent(converted[table]["value"]) == sent(mixed)
    assert converted[markdown] == "text"
    assert frames_as_tables({markdown: mixed})[markdown] is mixed  # a frame for another component: as it is


def test_list_columns_read_facts_of_each_services_own_table(service):
    """`table_facts` (read once per query table) against the table read directly, for the service's table
    and for tables without types or without two-image queries seen after it (never another table's facts)."""
    from cir_demo.explorer import NO_VALUE

    def direct(table):
        return bool((table["intent_category"] != NO_VALUE).any()), bool(len(table) and table["n_refs"].max() > 1)

    table = service.table
    plain = table.assign(intent_category=NO_VALUE, n_refs=1)
    for t in (table, plain, table.assign(n_refs=1), table, plain):
        assert explore.table_facts(t) == direct(t)
    assert direct(table) == (True, True) and direct(plain) == (False, False)
