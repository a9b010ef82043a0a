"""The README's pictures of the explorer, made by the app itself: rerun whenever the UI changes.

    python bench/screenshots.py [--out docs/img] [--timeout 600]

It starts `python app.py` on the default world (an empty, temporary data folder: the first start a
fresh clone makes) and takes the Explore tab on a query whose columns show judged positives and
explicit negatives (picked from the shipped `--eval` outputs' per-query metrics), then the Report tab.
It then exports the tiny world in CIRR's layout with its images, evaluates two world retrievers on it
(`python app.py --eval --benchmark cirr ... --rerank none`), starts the app on that export with the two
results files as `--runs`, and takes the A-vs-B view the Report's pair control opens. Chromium is
Debian's (`/usr/bin/chromium`, driven by Playwright; never `playwright install`). Every wait ends on a
page signal (the selectors tests/test_ui_browser*.py use); each PNG is quantised to stay under 300 KB.
Writes explore.png, report.png and compare.png into --out.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import argparse
import contextlib
import io
import lzma
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHIPPED_PER_QUERY = ROOT / "indexes" / "prebuilt" / "world-default-s0" / "eval" / "per_query.csv.xz"
VIEWPORT = {"width": 1400, "height": 1000}
MAX_BYTES = 300_000
MAX_HEIGHT = 2400  # pixels of page height in one picture
# the explorer pictures end below each result column's first tile (the page above them included)
FIRST_TILES = "#cir-results section.cir-col li.cir-tile:first-of-type"
LOWEST_BOTTOM_JS = """(sels) => {
  for (const s of sels) {
    const els = Array.from(document.querySelectorAll(s));
    if (els.length) return Math.max(...els.map((e) => e.getBoundingClientRect().bottom)) + window.scrollY;
  }
  return document.body.scrollHeight;
}"""
COMPARE_RUNS = ("world-cir", "world-clip-text")  # two retrievers that differ visibly on the same queries


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def showcase_query(per_query_xz: Path, columns: list[str]) -> str:
    """The query whose first-stage top 10 holds both a judged positive and an explicit negative in the most
    app columns (ties: the most positives), so the picture shows both badges."""
    import pandas as pd

    rows = pd.read_csv(io.BytesIO(lzma.decompress(per_query_xz.read_bytes())))
    rows = rows[rows["run"].isin(columns)]
    both = (rows["precision@10"] > 0) & (rows["NegRecall@10"] > 0)
    score = rows.assign(both=both.astype(int)).groupby("query_id")[["both", "precision@10"]].sum()
    return str(score.sort_values(["both", "precision@10"], ascending=False).index[0])


@contextlib.contextmanager
def app(args: list[str], env: dict, log: Path, timeout: float):
    """`python app.py ARGS` on a free port until the block ends; yields its URL once it answers."""
    port = free_port()
    cmd = [sys.executable, str(ROOT / "app.py"), *args, "--server-name", "127.0.0.1", "--port", str(port)]
    with open(log, "w") as out:
        # its own process group, so that its background run and image warmer end with it
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}/"
            wait_http(url, proc, timeout, log)
            yield url
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def wait_http(url: str, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"the app exited with {proc.returncode}; its log: {log}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the app did not answer at {url} within {timeout:.0f} s; its log: {log}")


def save_png(page, path: Path, bottom: tuple[str, ...]) -> None:
    """The page from its top to the lowest bottom edge of the elements the first selector of `bottom`
    that matches any finds (at most MAX_HEIGHT pixels), as a PNG under MAX_BYTES: quantised to a palette
    (the UI's flat colours survive it), then scaled down only if that is not enough."""
    from PIL import Image

    end = page.evaluate(LOWEST_BOTTOM_JS, list(bottom))
    clip = {"x": 0, "y": 0, "width": VIEWPORT["width"], "height": min(int(end) + 16, MAX_HEIGHT)}
    image = Image.open(io.BytesIO(page.screenshot(full_page=True, clip=clip))).convert("RGB")
    for scale in (1.0, 0.85, 0.7, 0.55):
        size = (int(image.width * scale), int(image.height * scale))
        sized = image if scale == 1.0 else image.resize(size, Image.LANCZOS)
        data = io.BytesIO()
        sized.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(data, "PNG", optimize=True)
        if data.tell() <= MAX_BYTES:
            path.write_bytes(data.getvalue())
            print(f"wrote {path} ({data.tell() // 1024} KB, {sized.width}x{sized.height})", flush=True)
            return
    raise SystemExit(f"{path.name}: over {MAX_BYTES} bytes even at {sized.width}x{sized.height}")


def world_pictures(browser, env: dict, out: Path, work: Path, timeout: float) -> None:
    from cir_demo.benchmarks.registry import BENCHMARKS

    query = showcase_query(SHIPPED_PER_QUERY, list(BENCHMARKS["world"].app_columns))
    with app([], env, work / "app-world.log", timeout) as url:
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(timeout * 1000)
        page.goto(f"{url}?query={query}")
        page.wait_for_function("(q) => document.querySelector('#cir-query-header')?.innerText.includes(q)", arg=query)
        page.wait_for_selector("#cir-results li.cir-neg")
        page.wait_for_selector("#cir-results li.cir-pos")
        settle(page)
        save_png(page, out / "explore.png", bottom=(FIRST_TILES, "#cir-results"))
        page.get_by_role("tab", name="Report").click()
        page.wait_for_selector("#cir-report-metrics table")
        page.wait_for_selector("#cir-report-plots img")
        settle(page)
        save_png(page, out / "report.png", bottom=("#cir-report-plots",))
        page.close()


def cirr_with_two_runs(env: dict, work: Path) -> tuple[Path, list[str]]:
    """The tiny world exported in CIRR's layout with its images, and two world retrievers' results files on it."""
    cirr, ev = work / "cirr", work / "cirr-eval"
    # a run may not take a registered retriever's name: each is named for the model that wrote it
    runs = [f"{name}-run={ev / 'results' / (name + '.json')}" for name in COMPARE_RUNS]
    if (ev / "run_manifest.json").is_file():  # a --work folder from an earlier call: reused as it is
        return cirr, runs
    run(
        [
            sys.executable,
            "-m",
            "cir_demo",
            "world",
            "export",
            "--format",
            "cirr",
            "--size",
            "tiny",
            "--images",
            "render",
            "--out",
            str(cirr),
        ],
        env,
    )
    run(
        [
            sys.executable,
            str(ROOT / "app.py"),
            "--eval",
            "--benchmark",
            "cirr",
            "--root",
            str(cirr),
            "--retrievers",
            ",".join(COMPARE_RUNS),
            "--rerank",
            "none",
            "--no-plots",
            "--out",
            str(ev),
        ],
        env,
    )
    return cirr, runs


def compare_picture(browser, env: dict, out: Path, work: Path, timeout: float) -> None:
    cirr, runs = cirr_with_two_runs(env, work)
    args = ["--benchmark", "cirr", "--root", str(cirr), "--runs", *runs, "--reranker", "none"]
    with app(args, env, work / "app-cirr.log", timeout) as url:
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(timeout * 1000)
        page.goto(url)
        page.wait_for_selector("#cir-results section.cir-col")
        page.get_by_role("tab", name="Report").click()
        page.locator("#cir-report-open-pair").click()
        page.locator("#cir-tab-explore").wait_for(state="visible")
        page.wait_for_function("document.querySelector('#cir-list-info')?.innerText.includes(' vs ')")
        page.wait_for_function("location.search.includes('retrievers=')")
        page.wait_for_selector("#cir-results li.cir-tile img")
        settle(page)
        save_png(page, out / "compare.png", bottom=(FIRST_TILES, "#cir-results"))
        page.close()


def settle(page) -> None:
    """Every image on the page decoded (lazy ones below the fold too: the picture is taken of the whole
    page), and the pending page updates painted (two animation frames)."""
    page.evaluate("() => document.querySelectorAll('img[loading=lazy]').forEach((i) => { i.loading = 'eager'; })")
    page.wait_for_function("Array.from(document.images).every((i) => i.complete)")
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def run(cmd: list[str], env: dict) -> None:
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stderr[-2000:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder for the PNGs (default docs/img)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds any one wait may take (default 600)")
    ap.add_argument("--only", choices=("world", "compare"), help="take only the world's or only the A-vs-B picture")
    ap.add_argument(
        "--work",
        type=Path,
        help="keep the data folder, the CIRR export and its runs here (reused when "
        "present) instead of a temporary folder",
    )
    args = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} is missing: apt-get install -y chromium", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cir-screenshots-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "CIR_DEMO_DATA": str(work / "data"), "GRADIO_ANALYTICS_ENABLED": "False"}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            if args.only in (None, "world"):
                world_pictures(browser, env, args.out, work, args.timeout)
            if args.only in (None, "compare"):
                compare_picture(browser, env, args.out, work, args.timeout)
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
