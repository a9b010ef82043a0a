"""Nothing a visitor or a file name writes is rendered: the payloads of a phishing share link, an
outside image and a hostile run folder name go through every place the page echoes text
(URL parameters, run folders, results/run_info values, upload file names, error messages), and
no link, image or tag survives in what the Markdown and HTML components receive."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from markdown_it import MarkdownIt

from cir_demo.ui import app as ui_app
from cir_demo.ui import components, report, upload
from cir_demo.ui.guard import error_message

PAYLOADS = [
    '<a href="http://attacker.invalid/">Your login expired, sign in here</a>',
    "![t](http://example.invalid/t.png)",
    "<img src=x>[login](http:attacker.invalid)",
    "[click](javascript:alert(1))",
    "<script>alert(1)</script>",
    "visit http://attacker.invalid/login or www.attacker.invalid",
    "x\n# heading\n- item",
]
# tags the page's own Markdown uses; anything else in the rendered output came from a payload
OWN_TAGS = {"p", "ul", "li", "strong", "em", "code", "br"}
AUTOLINK = re.compile(r"(?i)(https?|ftp|javascript|mailto):/*[a-z0-9]|www\.[a-z0-9]")


def assert_inert_markdown(md: str, where: str) -> None:
    rendered = MarkdownIt("commonmark").render(md)  # raw HTML on, as gradio's Markdown allows
    tags = set(re.findall(r"<\s*([a-zA-Z][a-zA-Z0-9]*)", rendered))
    assert tags <= OWN_TAGS, (where, tags - OWN_TAGS, md)
    assert not AUTOLINK.search(md), (where, md)  # GFM/linkify would make these links
    assert "<h1" not in rendered and "<h2" not in rendered, (where, md)


def assert_inert_html(html: str, payload: str, where: str) -> None:
    for bad in ("<a ", "<script", "<img src=x", 'attacker.invalid/">'):
        if bad in payload:
            assert bad not in html, (where, bad)
    assert "javascript:alert" not in html or "href" not in html.split("javascript:alert")[0][-20:], where


MARKDOWN_OUTPUTS = (
    "list_info",
    "rerank_note",
    "view:message",
    "upload:note",
    "report:info",
    "link_note",
    "report:columns",
)
HTML_OUTPUTS = ("view:header", "view:results")


@pytest.fixture(scope="module")
def demo(service):
    return ui_app.create_app(service)


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("params", ["every parameter", "query only"])
def test_link_parameters_are_never_rendered(service, params, payload):
    from cir_demo.ui.state import KEYS

    params = {**{k: payload for k in KEYS}, payload: "1"} if params == "every parameter" else {"query": payload}
    out = ui_app.initial_outputs(service, params)
    for key in MARKDOWN_OUTPUTS:
        if isinstance(out.get(key), str):
            assert_inert_markdown(out[key], key)
    for key in HTML_OUTPUTS:
        if isinstance(out.get(key), str):
            assert_inert_html(out[key], payload, key)
    assert out["link_note"]  # the note at the top still says what was wrong with the link (escaped)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_status_line_escapes_names_and_warnings(service, payload, monkeypatch):
    monkeypatch.setattr(service, "warnings", [f"retriever {payload} failed: {payload}"])
    assert_inert_markdown(ui_app.status_markdown(service, None), "status")

    class Failed:
        def text(self):
            return f"loading failed: {payload}"

    assert_inert_markdown(ui_app.status_markdown(None, Failed()), "status while loading")


def test_hostile_run_folder_and_results_values(service, tiny_setup):
    root, _ = tiny_setup
    runs = root / "runs"
    name = "<img src=x>[login](http:attacker.invalid)-world"
    run = runs / name
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.csv").write_text('model,mAP@10\n"<a href=""http://attacker.invalid/"">x</a>",0.5\n')
    (run / "metrics.json").write_text(json.dumps({"benchmark": "world", "n_boot": "<img src=x>"}))
    (run / "run_info.json").write_text(
        json.dumps(
            {
                "benchmark_fingerprint": service.engine.fingerprint,
                "reranker": {"backend": "![t](http://example.invalid/t.png)"},
                "rerank_top_n": "<script>x</script>",
            }
        )
    )
    (run / "plots").mkdir(exist_ok=True)
    (run / "plots" / "evil.html").write_text("<script>alert(1)</script>")
    try:
        out = report.show_report(service, name)
        assert_inert_markdown(out["info"], "report info")
        assert name in out["run"]["choices"]  # the dropdown shows it as text
        # plots go out as checked copies outside runs/, never as a path in the run folder
        assert all(runs not in Path(p[0]).parents and Path(p[0]).suffix == ".png" for p in out["plots"]["value"])
        for payload in PAYLOADS:  # gradio shows an error's text as HTML
            assert_inert_html(error_message("Loading the report", ValueError(payload)), payload, "error")
    finally:
        import shutil

        shutil.rmtree(run)


@pytest.mark.parametrize("payload", PAYLOADS[:3])
def test_upload_file_names_are_escaped(tmp_path, payload):
    safe_name = re.sub(r"[/\n]", "_", payload)
    bad = tmp_path / f"{safe_name}.png"
    bad.write_bytes(b"not an image")
    out = upload.preview([str(bad), None])
    assert_inert_markdown(out["message"], "upload message")
    assert_inert_html(out["preview"], payload, "upload preview")


def test_upload_note_escapes_benchmark_name():
    from types import SimpleNamespace

    for payload in PAYLOADS:
        stub = SimpleNamespace(upload_note="", benchmark=SimpleNamespace(name=payload, corpus_ids=["a", "b"]))
        assert_inert_markdown(upload.upload_note(stub), "upload note")


def test_md_escape_keeps_the_text_readable():
    from html import unescape

    for p in PAYLOADS:
        rendered = MarkdownIt("commonmark").render(components.md_escape(p))
        text = unescape(re.sub(r"<[^>]+>", "", rendered)).strip()
        assert text == " ".join(p.split())


def test_no_run_file_is_served_by_path_and_one_limit_for_all(demo):
    """launch_app serves no data folder (an .html file under runs/ never reaches a visitor) and puts
    every computing callback in one concurrency group."""
    seen = {}

    class Stub:
        fns = demo.fns

        def queue(self, **kw):  # as gradio's: the queue object the launch then paces
            seen["queue"] = kw
            self._queue = SimpleNamespace()

        def launch(self, **kw):
            seen["launch"] = kw

        def block_thread(self):
            seen["held"] = True

    ui_app.launch_app(Stub(), concurrency=3)
    assert seen["held"] and seen["launch"]["prevent_thread_lock"]  # held after the MCP tools are adapted
    assert not seen["launch"].get("allowed_paths")
    assert seen["queue"]["default_concurrency_limit"] == 3
    groups = {f.concurrency_id for f in demo.fns.values() if f.fn is not None}
    assert groups == {ui_app.WORK_GROUP, ui_app.STATUS_GROUP}
    [status_poll] = [f for f in demo.fns.values() if f.concurrency_id == ui_app.STATUS_GROUP]
    assert status_poll.fn.__name__ == "on_load" and status_poll.concurrency_limit is None
