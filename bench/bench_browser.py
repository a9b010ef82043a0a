"""The machine's CPU per page load of the explorer, for each of Debian's Chromium binaries the browser tests
can launch (tests/browser_support.py: the headless shell when installed, else the browser).

    python bench/bench_browser.py [--loads 4] [--rounds 3]

Starts `python app.py` on the tiny world in an empty data folder of its own, opens the page once and waits
there until its background run (the failure sorts and the Report) is done, then, by turns, one binary
after the other for each round: launches it through Playwright as the tests do (their flags and their
`SharedContextBrowser`), opens the page `--loads` times until the first tiles show, and closes it. Each
figure is the whole machine's busy CPU seconds over that launch (/proc/stat: Chromium's processes,
Playwright's driver, this script and the app answering), so run it with nothing else busy. Prints each round and the median per load of each binary, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser_support import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    CHROMIUM_BINARIES,
    HEADLESS_SHELL,
    SharedContextBrowser,
    free_port,
)

from cir_demo.utils.beside import machine_busy_seconds as busy_seconds  # noqa: E402

READY = "failure sorts and report: ready"  # the page's status line once the background run is done
APP_ARGS = ["--world-size", "tiny", "--limit", "6", "--retrievers", "world-clip-fusion,world-clip-image"]


def loads(binary: Path, url: str, n: int, until_ready: bool = False) -> float:
    """Busy CPU seconds of the machine while `binary` is launched and the page loaded `n` times;
    `until_ready`: each page also waits for the app's background run to be done."""
    from playwright.sync_api import sync_playwright

    start = busy_seconds()
    with sync_playwright() as p:
        browser = SharedContextBrowser(p.chromium.launch(executable_path=str(binary), args=CHROMIUM_ARGS))
        for _ in range(n):
            page = browser.new_page({"width": 1400, "height": 1000})
            page.goto(url)
            page.wait_for_selector("#cir-results li.cir-tile", timeout=180_000)
            if until_ready:
                page.wait_for_function(
                    f"(document.querySelector('#cir-status')?.innerText || '').includes({READY!r})", timeout=600_000
                )
            page.close()
        browser.close()
    return busy_seconds() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=4, help="page loads per launch")
    parser.add_argument("--rounds", type=int, default=3, help="launches of each binary, by turns")
    args = parser.parse_args()
    binaries = [b for b in CHROMIUM_BINARIES if b.exists()]
    if not binaries:
        print(
            "neither Chromium binary is installed: apt-get install -y chromium chromium-headless-shell", file=sys.stderr
        )
        return 2
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="cir-demo-bench-browser-") as data:
        env = {**os.environ, "CIR_DEMO_DATA": data, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        log = Path(data) / "app.log"
        with open(log, "w") as out:
            app = subprocess.Popen(
                [sys.executable, "app.py", *APP_ARGS, "--port", str(port)], cwd=ROOT, env=env, stdout=out, stderr=out
            )
        try:
            deadline = time.monotonic() + 600
            while "explorer ready" not in log.read_text() and app.poll() is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the app did not get ready in 600 s: {log}")
                time.sleep(0.5)
            if app.poll() is not None:
                raise SystemExit(f"the app stopped: {log.read_text()[-2000:]}")
            url = f"http://127.0.0.1:{port}/"
            loads(binaries[0], url, 1, until_ready=True)  # the first view's background run out of the figures
            per_load: dict[Path, list[float]] = {b: [] for b in binaries}
            for r in range(args.rounds):
                for binary in binaries if r % 2 == 0 else binaries[::-1]:
                    seconds = loads(binary, url, args.loads)
                    per_load[binary].append(seconds / args.loads)
                    print(f"round {r + 1} {binary}: {seconds:.2f} busy core-s for {args.loads} loads", flush=True)
        finally:
            app.terminate()
            app.wait(30)
    medians = {b: statistics.median(v) for b, v in per_load.items()}
    for binary, median in medians.items():
        print(f"{binary}: median {median:.2f} busy core-s per load (launch included)")
    if len(medians) == 2:
        print(f"ratio {medians[HEADLESS_SHELL] / medians[CHROMIUM]:.2f} (headless shell / browser)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
