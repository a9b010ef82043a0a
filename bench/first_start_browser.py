"""What a first visitor's Chromium sees on a first start, timed from the app's start:
`bench/bench_first_start.sh` runs it beside the app (BROWSER=1).

    python bench/first_start_browser.py URL APP_START_EPOCH OUT_DIR

Opens the page as soon as it answers, and prints (and appends to OUT_DIR/events.txt) the seconds since
the app started at which the first tiles showed, and at which the status line said "failure sorts and
report: ready"; then picks the "reranker helped most" sort, opens the Report tab and saves a screenshot
of each (OUT_DIR/first-start-*.png). Debian's Chromium (/usr/bin/chromium) through Playwright.

Each of the first two moments is noted twice: `browser_tiles_painted_s` is stamped by the page itself (a
DOM observer in the page notes the first animation frame after the tiles are in the document, on the same
clock as the app's start), `browser_tiles_s` is when this script hears of it from Playwright: later by
Playwright's polling and the hop between the browser and this process (longer on a busy machine:
docs/benchmarks.md).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
READY = "failure sorts and report: ready"
# Stamped in the page: the first animation frame after the tiles (and the ready status line) are in the
# document, the frame that shows them
PAINT_MARKS = """
window.__cirPainted = {};
(() => {
  const want = {
    tiles: () => document.querySelector('#cir-results li.cir-tile'),
    sorts_and_report_ready: () => (document.querySelector('#cir-status')?.innerText || '').includes(%s),
  };
  const check = () => {
    for (const [name, seen] of Object.entries(want)) {
      if (!(name in window.__cirPainted) && seen()) {
        window.__cirPainted[name] = null;
        requestAnimationFrame(() => { window.__cirPainted[name] = Date.now(); });
      }
    }
  };
  new MutationObserver(check).observe(document, {subtree: true, childList: true, characterData: true});
})();
""" % repr(READY)


def note(out: Path, t0: float, what: str, at: float | None = None) -> float:
    """`at`: the moment (epoch seconds) when it happened; now when not given."""
    seconds = (time.time() if at is None else at) - t0
    line = f"browser_{what}_s {seconds:.1f}"
    print(line, flush=True)
    with open(out / "events.txt", "a") as f:
        f.write(line + "\n")
    return seconds


def main(url: str, t0: float, out: Path, timeout_s: float = 900) -> int:
    import re

    from playwright.sync_api import sync_playwright

    from cir_demo.benchmarks.failure_views import SORT_LABELS

    # the label names the benchmark's primary metric after its first words
    rerank_helped = re.compile("^" + re.escape(SORT_LABELS["rerank_helped"].split(" (")[0]))
    helped_label = SORT_LABELS["rerank_helped"].format(primary="AP@10")  # the world's family: PinPoint's

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(timeout_s * 1000)
        page.add_init_script(PAINT_MARKS)
        while True:  # the page is served a few seconds after start
            try:
                page.goto(url, timeout=5000)
                break
            except Exception:
                if time.time() - t0 > timeout_s:
                    raise
                time.sleep(0.2)
        page.wait_for_selector("#cir-results li.cir-tile")
        note(out, t0, "tiles")
        page.wait_for_function("(t) => (document.querySelector('#cir-status')?.innerText || '').includes(t)", arg=READY)
        note(out, t0, "sorts_and_report_ready")
        for name in ("tiles", "sorts_and_report_ready"):
            page.wait_for_function("(n) => window.__cirPainted[n]", arg=name)
            note(out, t0, f"{name}_painted", page.evaluate("(n) => window.__cirPainted[n]", name) / 1000)
        page.screenshot(path=str(out / "first-start-ready.png"), full_page=True)
        page.locator("#cir-sort input").click()
        page.get_by_role("option", name=rerank_helped).click()
        # the list's info line names the sort once the list is sorted by it (not while it is being computed)
        page.wait_for_function(
            "(t) => { const x = document.querySelector('#cir-list-info')?.innerText || '';"
            " return x.includes(t) && !x.includes('being computed'); }",
            arg=helped_label,
        )
        note(out, t0, "rerank_helped_sorted")
        page.screenshot(path=str(out / "first-start-sort.png"), full_page=True)
        page.get_by_role("tab", name="Report").click()
        page.wait_for_selector("#cir-report-metrics table")
        page.wait_for_selector("#cir-report-plots img")
        note(out, t0, "report_shown")
        page.screenshot(path=str(out / "first-start-report.png"), full_page=True)
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])))
