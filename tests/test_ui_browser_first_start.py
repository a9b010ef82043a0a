"""A first visit with no terminal step: a fresh app (no eval run on disk) computes the failure
sorts and the Report in its background run while the explorer is usable; a browser (Playwright
driving Debian's Chromium) watches the sorts say "being computed", the chosen sort apply by
itself when the run is done, then uses every sort and the Report tab with its downloads.
The tiny world served with the world's own small models (two world-CLIP columns, the world judge reranking),
as the Space app serves it; screenshots go to test-artifacts/.
"""

from __future__ import annotations

import pytest

from browser_support import TIMEOUT_MS, browser, free_port, require_chromium, screenshot, wait_page_while_working  # noqa: F401  (browser: a fixture)

require_chromium()

from cir_demo.benchmarks.failure_views import SORT_LABELS  # noqa: E402
from conftest import private_seed_copy  # noqa: E402
from process_cpu import cpu_seconds  # noqa: E402

GROUPS = 6
APP_ARGS = [
    "--world-size",
    "tiny",
    "--limit",
    str(GROUPS),
    "--retrievers",
    "world-clip-fusion,world-clip-image",
    "--no-thumbnail-warmer",
]
SORTS = {k: v.format(primary="AP@10") for k, v in SORT_LABELS.items()}  # the world's family: PinPoint's
# what the list says under each sort: its label (cir_demo/benchmarks/failure_views.py)
SORT_NOTES = {
    k: SORTS[k] for k in ("worst", "negatives", "spread", "two_image", "rerank_helped", "rerank_hurt", "shortcut")
}


@pytest.fixture(scope="module")
def fresh_app(tiny_world_seed, tmp_path_factory):
    """The app as `python app.py --world-size tiny --limit 6 --retrievers world-clip-fusion,world-clip-image`
    starts it on a first start (its service, its background run's command line), except that the test
    starts the background run, after the page has shown the sorts waiting. No eval run and no index on
    disk; the cache holds the tiny world and its corpus features (a copy of `tiny_world_seed`), as the
    default world's first start finds its corpus embeddings shipped: the run still retrieves, reranks
    with the world judge, evaluates and writes the report, in a child process at low priority."""
    from cir_demo.benchmarks.cli_args import benchmark_flags
    from cir_demo.explorer import build_service
    from cir_demo.explorer.precompute import PrecomputeJob
    from cir_demo.ui import app as ui_app

    folder = tmp_path_factory.mktemp("first_start")
    mp = pytest.MonkeyPatch()
    private_seed_copy(tiny_world_seed, folder / "cache", mp)
    mp.setenv("CIR_DEMO_INDEXES", str(folder / "indexes"))
    runs = folder / "runs"
    mp.setenv("CIR_DEMO_RUNS", str(runs))  # no eval run on disk: a first start
    config = ui_app.config_from_args(ui_app.build_parser().parse_args(APP_ARGS))
    service = build_service(config)
    job = PrecomputeJob(
        benchmark_flags(config.benchmark, ui_app.served_split_kwargs(config), config.limit_groups), runs_root=runs
    )
    job.on_done(service.forget_failures)
    demo = ui_app.create_app(service, job)
    port = free_port()
    ui_app.launch_app(demo, "127.0.0.1", port, prevent_thread_lock=True, quiet=True)

    def start_job():
        job.start_for(service)
        return job

    yield f"http://127.0.0.1:{port}/", service, start_job, runs
    job.stop()
    demo.close()
    service.engine.close()
    mp.undo()


def shot(page, name: str) -> None:
    screenshot(page, f"first-start-{name}")


def pick_sort(page, key: str) -> None:
    page.locator("#cir-sort input").click()
    page.get_by_role("option", name=SORTS[key]).click()
    page.wait_for_function("(t) => document.querySelector('#cir-sort input').value.startsWith(t)", arg=SORTS[key])


HAS_TEXT = "([s, t]) => (document.querySelector(s)?.innerText || '').includes(t)"


def wait_text(page, selector: str, text: str) -> None:
    page.wait_for_function(HAS_TEXT, arg=[selector, text])


def wait_run(page, job, expression: str, arg=None) -> None:
    """A page state the background run brings: as long as the run takes while it works (a child process
    at nice 19 importing torch and evaluating: beside other jobs at nice 0, far longer than any fixed bound)."""

    def run_cpu() -> float:
        proc = job._proc  # set once the job's thread has started the child
        return cpu_seconds(proc.pid) if proc is not None else 0.0

    wait_page_while_working(page, expression, run_cpu, arg)


def test_first_visit_background_run_every_sort_and_report(fresh_app, browser):
    url, service, start_job, runs = fresh_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.wait_for_selector("#cir-results li.cir-tile")  # the explorer is usable before the run
    wait_text(page, "#cir-status", "failure sorts and report: starting after")

    # ---- before the run: every failure sort says it is being computed; choosing one keeps order
    page.locator("#cir-sort input").click()
    options = page.get_by_role("option").all_inner_texts()
    failure_options = [o for o in options if SORTS["order"] not in o]
    assert len(failure_options) == sum(c.available for c in service.sorts()) - 1
    assert all(o.endswith("(computing…)") for o in failure_options), options  # short, and the same while it counts
    page.get_by_role("option", name=SORTS["rerank_helped"]).click()  # the list is open
    wait_text(page, "#cir-list-info", "is being computed in the background")
    assert "re-sorts by itself" in page.locator("#cir-list-info").inner_text()
    assert not page.locator("#cir-report-metrics").is_visible()  # no empty table with "1 2 3" headers
    shot(page, "01-sorts-waiting")

    # ---- the run: progress, then the chosen sort applies by itself
    job = start_job()
    wait_run(page, job, HAS_TEXT, ["#cir-status", "being computed in the background ("])  # n/N
    # the picked sort's line counts on with the status line (it stayed at "(0/9)" before); a tiny run
    # can finish between two polls of the page, so its end also ends the wait (the count is then moot)
    wait_run(
        page,
        job,
        """() => {
        const m = (document.querySelector('#cir-list-info')?.innerText || '').match(/background \\((\\d+)\\/(\\d+)\\)/);
        const ready = (document.querySelector('#cir-status')?.innerText || '').includes('failure sorts and report: ready');
        return (m && Number(m[1]) >= 1) || ready;
    }""",
    )
    wait_run(page, job, HAS_TEXT, ["#cir-status", "failure sorts and report: ready"])
    assert job.status().state == "done", job.status()
    assert [d.name for d in runs.iterdir() if not d.name.startswith(".")] == [job._out.name]  # a normal run folder
    # the note also names the sort while it waits: wait for the list the done run sorted
    page.wait_for_function(
        "([s, t]) => { const x = document.querySelector(s)?.innerText || '';"
        " return x.includes(t) && !x.includes('being computed'); }",
        arg=["#cir-list-info", SORT_NOTES["rerank_helped"]],
    )
    assert page.locator("#cir-sort input").input_value() == SORTS["rerank_helped"]  # the label is redrawn
    shot(page, "02-sort-applied")

    # ---- every sort offered works now, each with its own note and no "being computed"; those without
    # data here are not offered, and the line under the menu says why
    offered = {c.name for c in service.sorts() if c.available}
    for c in service.sorts():
        if not c.available:
            wait_text(page, "#cir-sort", c.reason)
    for key, note in SORT_NOTES.items():
        if key not in offered:
            continue
        pick_sort(page, key)
        wait_text(page, "#cir-list-info", note)
        info = page.locator("#cir-list-info").inner_text()
        assert "being computed" not in info and "matching queries" in info, (key, info)
        assert page.locator(".toast-body").count() == 0, key  # no error toast
    page.locator("#cir-sort input").click()
    assert not any("being computed" in o for o in page.get_by_role("option").all_inner_texts())
    page.keyboard.press("Escape")
    shot(page, "03-every-sort")

    # ---- the Report tab shows the background run, with downloads instead of server paths
    page.get_by_role("tab", name="Report").click()
    page.wait_for_selector("#cir-report-metrics table")
    metrics_text = page.locator("#cir-report-metrics").inner_text()
    assert f"{service.retriever_names[0]}+rerank" in metrics_text
    assert page.locator("#cir-report-plots img").count() >= 3
    info = page.locator("#cir-report-info").inner_text()
    assert job._out.name in info and str(runs) not in info
    files_text = page.locator("#cir-report-files").inner_text().replace("\n", "")
    assert "report.md" in files_text and "metrics.csv" in files_text and ".html" not in files_text, files_text
    assert "×" not in files_text  # read-only downloads: no "Remove this file" buttons
    hrefs = [a.get_attribute("href") or "" for a in page.locator("#cir-report-files a").all()]
    assert hrefs and all("/file=" in h and str(runs) not in h for h in hrefs), hrefs  # gradio's copies, not runs/
    md = next(h for h in hrefs if h.endswith("report.md"))
    got = page.request.get(md if md.startswith("http") else url.rstrip("/") + md)
    assert got.ok and "# " in got.text()  # the report downloads as text
    shot(page, "04-report")

    body = page.locator("body").inner_text()
    assert "python app.py" not in body and "terminal" not in body.lower()
    page.close()


def test_a_second_visitor_starts_no_second_run(fresh_app, browser):
    url, service, start_job, runs = fresh_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.wait_for_selector("#cir-results li.cir-tile")
    wait_text(page, "#cir-status", "failure sorts and report: ready")
    start_job()  # what a second visitor's page load may do: the run on disk is complete, so nothing starts
    assert start_job().status().state == "done"
    page.close()
    runs_now = [d for d in runs.iterdir() if not d.name.startswith(".")]
    assert len(runs_now) == 1
