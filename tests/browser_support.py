"""What the browser tests share: Debian's Chromium driven by Playwright (never `playwright install`),
the module-level skip when it or playwright is missing, a free port, the browser fixture and screenshots
into test-artifacts/. A test module calls `require_chromium()` before its other imports and imports
`browser` (a pytest fixture) from here."""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
# Debian's build of Chromium's headless shell (package chromium-headless-shell), the browser Playwright
# itself runs headless pages in: the same Blink and V8 as CHROMIUM without the full browser around them,
# about 40 % less CPU per page load here (docs/benchmarks.md). Used when installed, else CHROMIUM.
HEADLESS_SHELL = Path("/usr/bin/chromium-headless-shell")
CHROMIUM_BINARIES = (HEADLESS_SHELL, CHROMIUM)  # in the order the tests prefer them
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
# How long a page may take to show what a test waits for. The waits follow the page's own signals
# (a selector, a text), so this bound only ends a wait that would never end; on a loaded machine
# (CI beside other jobs) the page is slow, not broken.
TIMEOUT_MS = 180_000


def chromium_executable() -> Path | None:
    """The Chromium the browser tests launch: the headless shell when installed, else the browser."""
    return next((p for p in CHROMIUM_BINARIES if p.exists()), None)


def require_chromium():
    """Skip the calling module unless Debian's Chromium (either binary) and playwright are there; returns
    playwright's sync API."""
    if chromium_executable() is None:
        pytest.skip(
            "browser test needs Debian's Chromium at /usr/bin/chromium-headless-shell or /usr/bin/chromium"
            " (apt-get install -y chromium chromium-headless-shell)",
            allow_module_level=True,
        )
    from playwright import sync_api

    return sync_api


@contextmanager
def served(service):
    """The app over `service` on a free loopback port: yields its URL; closes the app and the engine after."""
    from cir_demo.ui import app as ui_app

    demo = ui_app.create_app(service)
    port = free_port()
    ui_app.launch_app(demo, "127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()
        service.engine.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SharedContextBrowser:
    """The module's Chromium, whose pages share one browser context: from the second page load of an app
    on, its scripts and styles come from the context's HTTP cache, compiled code included, which saves
    both Chromium's and the app's CPU on every later load.
    The app keeps no state in the browser (its view is in the address), so a page sees what a first
    visit sees; `new_visitor_page` opens one in a context of its own where the test is about another
    visitor (a share link opened elsewhere)."""

    def __init__(self, browser):
        self.browser = browser
        self.context = browser.new_context()

    def new_page(self, viewport: dict):
        page = self.context.new_page()
        page.set_viewport_size(viewport)  # before any load: the page lays out at this size from the start
        return page

    def new_visitor_page(self, viewport: dict):
        return self.browser.new_page(viewport=viewport)

    def close(self) -> None:
        self.context.close()
        self.browser.close()


@pytest.fixture(scope="module")
def browser():
    sync_api = require_chromium()
    with sync_api.sync_playwright() as p:
        b = SharedContextBrowser(p.chromium.launch(executable_path=str(chromium_executable()), args=CHROMIUM_ARGS))
        yield b
        b.close()


def wait_controls(page) -> None:
    """Until the page script that applies a number on Enter and a slider on its keys (CONTROLS_JS, a
    load event of its own) is installed: tiles can be on the page before it, and an Enter pressed
    then is lost (seen on a loaded machine)."""
    page.wait_for_function("window.cirControls === true")


# Gradio marks each output of an event it sends as pending (its status tracker loses the class `hide`)
# and clears the mark when the answer is back. A page script armed before the action watches that over
# `selector`: "pending" once the mark is seen, "answered" once it is cleared again.
ARM_ANSWER_JS = """
(sel) => {
    const root = document.querySelector(sel);
    const pending = () => [...root.querySelectorAll("[data-testid=status-tracker]")].some(t => !t.classList.contains("hide"));
    const answers = window.cirAnswers = window.cirAnswers || {};
    answers[sel] = "armed";
    const watch = new MutationObserver((records) => {
        // a mark set and cleared between two callbacks is still seen: in a record's old value
        if (answers[sel] === "armed" && (pending() || records.some(r => r.oldValue !== null
                && r.target.dataset.testid === "status-tracker" && !r.oldValue.split(" ").includes("hide")))) {
            answers[sel] = "pending";
        }
        if (answers[sel] === "pending" && !pending()) {
            answers[sel] = "answered";
            watch.disconnect();
        }
    });
    watch.observe(root, {attributes: true, attributeFilter: ["class"], attributeOldValue: true, subtree: true,
                         childList: true});
}
"""


@contextmanager
def answered(page, selector: str):
    """Around an action whose answer may show what is on the page already (the same view again, a button
    left as it was): returns once that action's own answer to the output `selector` is back, so the next
    action cannot be sent while it is on its way (gradio may then have both in flight, and the earlier
    answer can land last)."""
    page.evaluate(ARM_ANSWER_JS, selector)
    yield
    page.wait_for_function("(s) => window.cirAnswers[s] === 'answered'", arg=selector)


def wait_page_while_working(page, expression: str, cpu, arg=None) -> None:
    """`page.wait_for_function(expression, arg=arg)` for a page that waits on a background run: at low
    priority beside other jobs it can take far longer than `TIMEOUT_MS`, so the wait goes on while
    `cpu()` (the run's CPU seconds: `process_cpu.cpu_seconds`) grows, and fails after a whole
    `TIMEOUT_MS` in which the run used none."""
    from playwright.sync_api import TimeoutError as PageTimeout

    from process_cpu import wait_while_working

    def done(seconds: float) -> bool:
        try:
            page.wait_for_function(expression, arg=arg, timeout=seconds * 1000)
            return True
        except PageTimeout:
            return False

    wait_while_working(done, cpu, TIMEOUT_MS / 1000)


def screenshot(page, name: str) -> None:
    """What the page shows in its viewport (each test sizes it), as test-artifacts/NAME.png; the whole
    page with CIR_DEMO_FULL_PAGE_SCREENSHOTS=1. A full-page shot has Chromium lay the page out again at
    its full height and back, several times a viewport shot's CPU, and the browser modules take many."""
    ARTIFACTS.mkdir(exist_ok=True)
    full = os.environ.get("CIR_DEMO_FULL_PAGE_SCREENSHOTS") == "1"
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full)


def run_tiny_eval(names, groups: int, shared) -> None:
    """A real `--eval` run of the tiny world's first `groups` intents with the tiny models and verifier
    (the Report tab and the failure sorts read it), copied into the runs folder; computed once per
    session, into the runs of `shared` (conftest.py's `tiny_shared`), so a later module copies it from
    there. Of the test split only, the one the app serves, as the app's own background run computes it
    (`served_split_kwargs`): the compositional split's reranking, evaluation and report
    are read by no test here."""
    import hashlib
    import shutil

    from cir_demo.paths import runs_dir

    name = f"tiny-eval-{groups}-{hashlib.sha256(','.join(names).encode()).hexdigest()[:8]}"
    computed = shared / "runs" / name
    if not (computed / "metrics.csv").is_file():
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("CIR_DEMO_RUNS", str(shared / "runs"))
            _tiny_eval(names, groups, computed)
    if not (runs_dir() / name / "metrics.csv").is_file():
        shutil.copytree(computed, runs_dir() / name)


def _tiny_eval(names, groups: int, out) -> None:
    import argparse

    from cir_demo.harness import cli as eval_cli
    from cir_demo.testing.explorer import VERIFIER

    parser = argparse.ArgumentParser()
    eval_cli.add_arguments(parser)
    args = parser.parse_args(
        [
            "--world-size",
            "tiny",
            "--limit",
            str(groups),
            "--retrievers",
            ",".join(names),
            "--rerank",
            VERIFIER,
            "--rerank-top-n",
            "10",
            "--n-boot",
            "50",
            "--split",
            "test",
            "--out",
            str(out),
        ]
    )
    assert eval_cli.run(args) == 0
