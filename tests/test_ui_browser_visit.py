"""What a visitor's Chromium found, each checked as a visitor meets it (Playwright driving Debian's
Chromium against the app in-process on the tiny world): the app inside a Space-like parent page
(share links reach the parent's address bar and open the same view), the loading panel, fast
number input, the layout at 1400 and 400 px, the Report's labels and plots, and the upload form's
warnings. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import http.server
import re
import threading
import time

import pytest
from browser_support import TIMEOUT_MS, browser, free_port, require_chromium, run_tiny_eval, screenshot, wait_controls  # noqa: F401  (browser: a fixture)

require_chromium()

from cir_demo.testing.explorer import build_tiny_service  # noqa: E402

GROUPS = 6

# The Space page as the Hub serves it, reduced to what matters here: its query string goes into the
# frame's URL on load, and a `{queryString}` message from the frame replaces its own query string.
PARENT_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Space</title></head>
<body style="margin:0"><h1 style="font:16px sans-serif;margin:4px">a Space page</h1>
<iframe id="space" style="width:100%%;height:%(height)dpx;border:0"></iframe>
<script>
window.messages = [];
window.addEventListener("message", (e) => {
    window.messages.push({origin: e.origin, data: e.data});
    if (e.origin === %(app_origin)r && e.data && typeof e.data.queryString === "string") {
        history.replaceState(null, "", location.pathname + e.data.queryString);
    }
});
document.getElementById("space").src = %(app_url)r + location.search;
</script></body></html>"""


@pytest.fixture(scope="module")
def visit_app(tiny_setup, tiny_shared):
    from cir_demo.ui import app as ui_app

    root, names = tiny_setup
    run_tiny_eval(names, GROUPS, tiny_shared)  # a real run for the Report tab
    service = build_tiny_service(names, limit_groups=GROUPS)
    app_port, parent_port = free_port(), free_port()
    app_url = f"http://127.0.0.1:{app_port}/"
    parent_origin = f"http://localhost:{parent_port}"  # another origin than the app's, as huggingface.co is
    demo = ui_app.create_app(service, parent_origin=parent_origin)
    ui_app.launch_app(demo, "127.0.0.1", app_port, prevent_thread_lock=True, quiet=True)

    class Parent(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (http.server's name)
            body = (PARENT_PAGE % {"app_url": app_url, "app_origin": app_url.rstrip("/"), "height": 940}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", parent_port), Parent)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield app_url, f"{parent_origin}/spaces/someone/cir-demo", service
    server.shutdown()
    demo.close()
    service.engine.close()


def shot(page, name: str) -> None:
    screenshot(page, f"visit-{name}")


def open_page(browser, url: str, width: int = 1400, height: int = 1000, visitor: bool = False):
    """A page of `url`; `visitor`: in another visitor's browser (a context of its own)."""
    viewport = {"width": width, "height": height}
    page = browser.new_visitor_page(viewport) if visitor else browser.new_page(viewport)
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    return page


def tile_ids(frame) -> list[str]:
    return frame.eval_on_selector_all("#cir-results li.cir-tile", "els => els.map(e => e.dataset.imageId)")


# =========================================================================== share links inside a Space
def test_share_link_reaches_the_space_page_and_opens_the_same_view(visit_app, browser):
    app_url, space_url, service = visit_app
    qid = service.benchmark.queries[7].query_id
    group = service.benchmark.paraphrases(qid)
    page = open_page(browser, f"{space_url}?query={qid}")  # the Hub hands its query string to the frame
    frame = page.frame_locator("#space")
    frame.locator("#cir-results li.cir-tile").first.wait_for()
    # the frame's first view is reported to the parent, whose address bar now holds the whole view
    page.wait_for_function(
        "(q) => location.search.includes('query=' + q) && location.search.includes('benchmark=world')", arg=qid
    )
    assert frame.locator("#cir-paraphrases input[type=radio]:checked").get_attribute("value") == qid

    frame.locator("#cir-paraphrases label").nth(2).click()
    page.wait_for_function("location.search.includes('paraphrase=3')")
    frame.locator("#cir-rerank input[type=checkbox]").check()
    page.wait_for_function("location.search.includes('rerank=1')")
    frame.locator("#cir-results .cir-before").first.wait_for()
    messages = [
        m for m in page.evaluate("window.messages") if isinstance(m["data"], dict) and "queryString" in m["data"]
    ]
    assert len(messages) >= 3 and all(m["origin"] == app_url.rstrip("/") for m in messages)  # one per view
    assert all(m["data"]["queryString"].startswith("?benchmark=world&query=") for m in messages), messages
    copied = page.url  # what a visitor copies from the address bar
    shown = tile_ids(page.frames[1])
    shot(page, "01-space-view")

    other = open_page(browser, copied, visitor=True)  # what a visitor copies, opened in another browser
    frame2 = other.frame_locator("#space")
    frame2.locator("#cir-results .cir-before").first.wait_for()
    assert frame2.locator("#cir-paraphrases input[type=radio]:checked").get_attribute("value") == group[2].query_id
    assert frame2.locator("#cir-rerank input[type=checkbox]").is_checked()
    assert tile_ids(other.frames[1]) == shown
    other.close()
    page.close()


def test_outside_a_frame_the_app_posts_nothing_and_keeps_its_own_url(visit_app, browser):
    app_url, _, service = visit_app
    page = open_page(browser, app_url)
    page.wait_for_selector("#cir-results li.cir-tile")
    # not framed, window.parent is the page itself: a spy on its postMessage sees any call
    page.evaluate("window.parentMessages = []; window.postMessage = (...args) => window.parentMessages.push(args)")
    page.locator("#cir-paraphrases label").nth(1).click()
    page.wait_for_function("location.search.includes('paraphrase=2')")
    sent = page.evaluate("window.parentMessages.filter(a => a[0] && typeof a[0] === 'object' && 'queryString' in a[0])")
    assert sent == []
    page.close()


# =========================================================================== loading
def test_loading_shows_a_panel_with_progress_then_the_explorer(visit_app, browser):
    """A loader that is loading until the test has read the panel: the page shows what is being done,
    n/N and seconds where the results will be, and no empty table with placeholder headers; then the
    explorer."""
    from cir_demo.explorer import LoadStatus
    from cir_demo.ui import app as ui_app

    _, _, service = visit_app

    class HeldLoader:  # ready when released, not after a fixed time a loaded machine could outlast
        def __init__(self):
            self.t0, self.released = time.perf_counter(), threading.Event()

        @property
        def ready(self):
            return self.released.is_set()

        def status(self):
            elapsed = time.perf_counter() - self.t0
            return LoadStatus(
                "retriever 2/4 tiny-ui-image: loading the model and building its index (first start)",
                self.ready,
                None,
                elapsed,
                f"encode world with tiny-ui-image {int(elapsed * 40)}/396",
            )

        def wait(self, timeout=None):
            return service

    loader = HeldLoader()
    demo = ui_app.create_app(loader)
    port = free_port()
    ui_app.launch_app(demo, "127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    try:
        loader.t0 = time.perf_counter()
        page = open_page(browser, f"http://127.0.0.1:{port}/")
        page.wait_for_function("(document.querySelector('#cir-loading')?.innerText || '').includes('/ 396')")
        panel = page.locator("#cir-loading")
        text = panel.inner_text()
        assert "Loading the explorer" in text and "retriever 2/4 tiny-ui-image" in text, text
        assert re.search(r"\d+ s", text) and page.locator("#cir-loading progress").count() == 1
        assert panel.bounding_box()["y"] < 1000  # in the first screen
        assert not page.locator("#cir-paraphrase-table").is_visible()  # no table headed "1 2 3"
        assert not page.locator("#cir-query-list").is_visible()
        shot(page, "02-loading")
        loader.released.set()
        page.wait_for_selector("#cir-results li.cir-tile")
        assert not panel.is_visible()
        page.close()
    finally:
        demo.close()


# =========================================================================== controls and layout
def test_fast_number_input_is_kept(visit_app, browser, monkeypatch):
    """Clicking into the box and typing 20 then Enter at once: 20 results, not the old 10. Each view
    takes 0.6 s here, as on a busy 2-core Space, so a request the click sent would still be running."""
    _, _, service = visit_app
    n = len(service.retriever_names)
    compare = service.compare

    running = []

    def slow_compare(*args, **kwargs):
        running.append(True)
        try:
            time.sleep(0.6)
            return compare(*args, **kwargs)
        finally:
            running.pop()

    page = open_page(browser, visit_app[0])
    page.wait_for_selector("#cir-results li.cir-tile")
    monkeypatch.setattr(service, "compare", slow_compare)
    wait_controls(page)
    box = page.locator("#cir-k input[type=number]")
    box.click()
    box.fill("20")
    box.press("Enter")
    page.wait_for_function(f"document.querySelectorAll('#cir-results li.cir-tile').length === {20 * n}")
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while running and time.monotonic() < deadline:  # every view asked for has been computed (however slowly)
        time.sleep(0.05)
    time.sleep(2.0)  # and a late answer for the old value would have set it back by now
    assert box.input_value() == "20"
    assert page.locator("#cir-results li.cir-tile").count() == 20 * n
    page.close()


def test_laptop_width_list_fits_and_link_notes_are_on_top(visit_app, browser):
    app_url, _, service = visit_app
    page = open_page(browser, f"{app_url}?query=nope&k=999")
    page.wait_for_selector("#cir-results li.cir-tile")
    note = page.locator("#cir-link-note")
    assert "nope" in note.inner_text() and "k=999" in note.inner_text()
    assert note.bounding_box()["y"] + note.bounding_box()["height"] < 1000  # seen without scrolling
    # the query list's table fits its column: no column (the instruction, the reason) is cut off
    fits = page.eval_on_selector(
        "#cir-query-list",
        """el => {
        const cells = [...el.querySelectorAll('[role=columnheader]')];
        const box = el.getBoundingClientRect();
        return cells.length >= 4 && cells.every(c => c.getBoundingClientRect().right <= box.right + 1);
    }""",
    )
    assert fits
    page.locator("#cir-sort input").click()
    page.get_by_role("option", name="Explicit negatives in the top 10 (most first)").click()
    page.wait_for_function(
        "document.querySelector('#cir-list-info').innerText.toLowerCase().includes('explicit negative')"
    )
    assert page.locator("#cir-query-list [role=columnheader]").all_inner_texts()[-1].strip() == "why"
    assert page.eval_on_selector(
        "#cir-query-list",
        """el => [...el.querySelectorAll('[role=columnheader]')].every(
        c => c.getBoundingClientRect().right <= el.getBoundingClientRect().right + 1)""",
    )
    shot(page, "03-laptop-list")
    page.close()


def test_phone_width_no_gap_rows_scroll_and_report_run_readable(visit_app, browser):
    app_url, _, service = visit_app
    page = open_page(browser, app_url, 400, 850)
    page.wait_for_selector("#cir-results li.cir-tile")
    controls = page.locator("#cir-top-n").bounding_box()
    results = page.locator("#cir-results").bounding_box()
    assert results["y"] - (controls["y"] + controls["height"]) < 200  # no blank gap under the rerank controls
    target = service.benchmark.queries[3]
    page.locator("#cir-query-list [data-testid='cell-3-1']").click()
    page.wait_for_function(
        "(t) => document.querySelector('#cir-query-header').innerText.includes(t)", arg=target.instruction
    )
    page.wait_for_function("""() => { const r = document.querySelector('#cir-query-header').getBoundingClientRect();
                                     return r.top >= -1 && r.top < window.innerHeight / 2; }""")  # brought into view
    shot(page, "04-phone-opened")
    page.get_by_role("tab", name="Report").click()
    page.wait_for_selector("#cir-report-metrics [role=columnheader]")
    run = page.locator("#cir-report-run input")
    assert run.bounding_box()["width"] >= 250  # the run's name is not under the dropdown arrow
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.close()


# =========================================================================== report
def test_report_columns_are_labelled_and_defined_and_plots_whole(visit_app, browser):
    from cir_demo.ui.report import column_label

    page = open_page(browser, visit_app[0])
    page.wait_for_selector("#cir-results li.cir-tile")
    page.get_by_role("tab", name="Report").click()
    page.wait_for_selector("#cir-report-metrics [role=columnheader]")
    heads = [h.strip() for h in page.locator("#cir-report-metrics [role=columnheader]").all_inner_texts()]
    definitions = page.locator("#cir-report-columns").inner_text()
    assert "mAP@10" in heads and "Queries" in heads and "Coverage" in heads, heads
    for head in heads:
        assert "_" not in head and head in definitions, head
    assert column_label("total_queries")[0] == "Queries"
    # headers break between words only: "Coverage" is one line, not a letter per line
    tall = page.eval_on_selector_all(
        "#cir-report-metrics [role=columnheader] .header-content",
        "els => els.map(e => e.getBoundingClientRect().height)",
    )
    assert max(tall) < 60, tall
    page.wait_for_selector("#cir-report-plots img")
    page.wait_for_function(
        "[...document.querySelectorAll('#cir-report-plots img')].every(i => i.complete && i.naturalWidth)"
    )
    shapes = page.eval_on_selector_all(
        "#cir-report-plots .thumbnail-item",
        """els => els.map(b => {
        const i = b.querySelector('img').getBoundingClientRect(), c = b.querySelector('.caption-label');
        const im = b.querySelector('img');
        return [i.width / i.height, im.naturalWidth / im.naturalHeight, c ? c.getBoundingClientRect().top - i.bottom : 0];
    })""",
    )
    for shown_ratio, natural_ratio, caption_gap in shapes:
        assert abs(shown_ratio - natural_ratio) < 0.03 * natural_ratio  # the whole plot, not a crop
        assert caption_gap >= -1  # the caption sits below the plot, not over its axis label
    files = page.locator("#cir-report-files").inner_text()
    assert "run.zip" in files
    shot(page, "05-report")
    page.close()


# =========================================================================== upload form
def test_upload_warnings_follow_the_files(visit_app, browser, tmp_path, monkeypatch):
    from cir_demo.ui import upload

    _, _, service = visit_app
    problem = "document.querySelector('#cir-upload-instruction-problem').innerText"
    box = "#cir-upload-instruction textarea"
    page = open_page(browser, visit_app[0])
    page.wait_for_selector("#cir-results li.cir-tile")
    page.get_by_role("tab", name="Try your own").click()
    page.locator("#cir-upload-submit").click()
    page.wait_for_function(
        "document.querySelector('#cir-upload-files-problem').innerText.includes('upload at least one')"
    )
    page.wait_for_function(f"{problem}.includes('type an instruction')")  # the same Search's answer
    image = tmp_path / "one.png"
    service.engine.open_image(service.benchmark.queries[0].reference_ids[0]).save(image)
    page.locator("#cir-upload-1 input[type=file]").set_input_files(str(image))
    page.wait_for_selector("#cir-upload-preview img")
    page.wait_for_function("document.querySelector('#cir-upload-files-problem').innerText.trim() === ''")  # not stale
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    page.locator("#cir-upload-2 input[type=file]").set_input_files(str(text))
    page.wait_for_function(
        "document.querySelector('#cir-upload-files-problem').innerText.includes('notes.txt')"
    )  # no Search
    page.locator(box).fill("make it red")  # the shown warning is checked again as the visitor types
    page.wait_for_function(f"{problem}.trim() === ''")
    page.locator(box).fill("")  # nothing shown: the re-check raises nothing before a Search ...
    page.locator("#cir-upload-submit").click()
    page.wait_for_function(f"{problem}.includes('type an instruction')")  # ... and a Search raises it

    # A Search answered after the visitor typed: its warning is for the empty box it was sent with,
    # and the text typed meanwhile takes it away again. The search is held until the typing's own
    # re-check has been answered, so the late answer lands last on every machine.
    arrived, release = threading.Event(), threading.Event()
    searched = upload.search

    def held_search(*args, **kwargs):
        arrived.set()
        release.wait(TIMEOUT_MS / 1000)
        return {**searched(*args, **kwargs), "message": "held search answered"}

    monkeypatch.setattr(upload, "search", held_search)
    try:
        page.locator("#cir-upload-submit").click()
        assert arrived.wait(TIMEOUT_MS / 1000)
        page.locator(box).fill("make it red")
        page.wait_for_function(f"{problem}.trim() === ''")
    finally:
        release.set()
    page.wait_for_function("document.querySelector('#cir-upload-message').innerText.includes('held search answered')")
    page.wait_for_function(f"{problem}.trim() === ''")
    shot(page, "06-upload-warnings")
    page.close()
