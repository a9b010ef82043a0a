"""A real browser on the app started as `python app.py --benchmark cirr --root DIR --runs A.json B.json`
over the tiny world exported to CIRR (no images): the Report's pair control opens Explore sorted A vs B,
with A and B side by side on the list's first query, the reference deleted by the protocol said in the
column that ranked it, and every tile's label its official rank. Waits follow page state, never fixed sleeps.

Skips without Debian's Chromium (`apt-get install -y chromium chromium-headless-shell`; never
`playwright install`).
"""

from __future__ import annotations

import pytest
from browser_support import browser, require_chromium, screenshot, served  # noqa: F401  (browser: a fixture)

require_chromium()

TIMEOUT_MS = 60_000  # generous: a loaded 2-core machine; every wait ends on a page signal
PAIR = "diff:A,B"


@pytest.fixture(scope="module")
def own_runs_app(tmp_path_factory):
    from cir_demo.explorer import build_service
    from cir_demo.ui import app as ui_app
    from own_runs_support import cirr_world_with_runs

    root = tmp_path_factory.mktemp("browser_own_runs")
    mp = pytest.MonkeyPatch()
    _, pa, pb = cirr_world_with_runs(root, mp)
    args = ui_app.build_parser().parse_args(
        [
            "--benchmark",
            "cirr",
            "--root",
            str(root / "cirr"),
            "--runs",
            str(pa),
            str(pb),
            "--reranker",
            "none",
            "--no-thumbnail-warmer",
        ]
    )
    service = build_service(ui_app.config_from_args(args))  # the command line's config: columns A and B
    with served(service) as url:
        yield url, service
    mp.undo()


def test_report_pair_opens_explore_sorted_a_vs_b_with_both_columns(own_runs_app, browser):
    url, service = own_runs_app
    assert service.retriever_names == ["A", "B"]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.wait_for_selector("#cir-results section.cir-col")  # the explorer is ready (first query open)
    assert "tiles show image ids" in page.locator("#cir-status").inner_text()

    page.get_by_role("tab", name="Report").click()
    page.wait_for_selector("#cir-report-own-metrics [role=columnheader]")
    paired = page.locator("#cir-report-paired").inner_text()
    assert "Recall@1" in paired and "Recall_subset@1" in paired and "paired bootstrap" in paired
    page.locator("#cir-report-open-pair").click()
    # what only this click's answer shows: the Explore tab again and the list sorted A vs B (the query and
    # columns below may be those the page opened with, the first query with A and B)
    page.locator("#cir-tab-explore").wait_for(state="visible")
    page.wait_for_function("(t) => document.querySelector('#cir-list-info').innerText.includes(t)", arg="A vs B")

    top = service.find_queries(sort=PAIR).rows["query"].iloc[0]
    query = service.benchmark.query(top)
    page.wait_for_function(
        "(t) => document.querySelector('#cir-query-header').innerText.includes(t)", arg=query.instruction
    )
    page.wait_for_function("location.search.includes('retrievers=A,B')")
    page.wait_for_function("location.search.includes('sort=diff:A,B')")  # a link to this view keeps the sort
    assert page.locator("#cir-tab-explore").is_visible()
    columns = [c.get_attribute("aria-label") for c in page.locator("#cir-results section.cir-col").all()]
    assert columns == ["Results of A", "Results of B"]
    first_row = page.locator("#cir-query-list [data-testid='cell-0-0']").inner_text().strip()
    assert first_row == top
    # no images here: each tile shows its id in the placeholder
    tile = page.locator("#cir-results li.cir-tile").first
    assert tile.locator(".cir-missing code").inner_text() == tile.get_attribute("data-image-id")
    # the protocol's scope: B ranked the reference first; CIRR deletes it, so it is no tile of either column,
    # B's column says where B had ranked it, and the tiles' labels are the official ranks (1, 2, ...)
    reference = query.reference_ids[0]
    col_b = page.locator("#cir-results section.cir-col[aria-label='Results of B']")
    note = col_b.locator(".cir-note").inner_text()
    assert "reference image (ranked 1 by the run) is left out" in note
    assert page.locator(f"#cir-results li.cir-tile[data-image-id='{reference}']").count() == 0
    for name, col in zip(("A", "B"), service.compare(top, ["A", "B"], k=10).columns):
        labels = page.locator(
            f"#cir-results section.cir-col[aria-label='Results of {name}'] .cir-rank"
        ).all_inner_texts()
        assert labels == [f"#{t.rank}" for t in col.tiles] == [f"#{r}" for r in range(1, len(labels) + 1)]
        assert [t.image_id for t in col.tiles] == [x for x in col.ranking if x != reference][: len(labels)]
    screenshot(page, "browser-own-runs-a-vs-b")
    # A vs B by another of CIRR's headline metrics: the "compare by" menu beside the sort re-sorts the list
    page.locator("#cir-compare input").click()
    page.get_by_role("option", name="Recall@5", exact=True).click()
    page.wait_for_function("location.search.includes('sort=diff:A,B:Recall')")
    page.wait_for_function("(t) => document.querySelector('#cir-list-info').innerText.includes(t)", arg="Recall@5")
    by_r5 = service.find_queries(sort="diff:A,B:Recall@5").rows["query"].iloc[0]
    page.wait_for_function(
        "(t) => document.querySelector(\"#cir-query-list [data-testid='cell-0-0']\").innerText.trim() === t",
        arg=by_r5,
    )
    assert "Recall@5 gain" in page.locator("#cir-sort input").input_value()


def test_first_screen_shows_both_runs_first_tiles(own_runs_app, browser):
    """At 1400 x 900 the rows of A and B start in the first screen, unscrolled; the query opened is one
    the runs disagree on (test_explorer_own_runs checks which), named in the address."""
    url, service = own_runs_app
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.wait_for_selector("#cir-results li.cir-tile")
    assert page.evaluate("window.scrollY") == 0
    first = page.eval_on_selector_all(
        "#cir-results section.cir-col",
        """els => els.map(c => {
        const r = c.querySelector('li.cir-tile').getBoundingClientRect(); return [r.top, r.bottom, r.right]; })""",
    )
    assert len(first) == 2 and all(0 <= top and bottom <= 900 and right <= 1400 for top, bottom, right in first), first
    page.wait_for_function("location.search.includes('query=')")
    metrics = page.locator("#cir-results .cir-metrics").all_inner_texts()
    assert len(set(metrics)) == 2, metrics  # A and B score the opened query differently
    text = page.locator("#cir-tab-explore").inner_text()
    assert "NegRecall" not in text and "explicit negative" not in text.lower() and "skin tone" not in text.lower()
    # a sort picked in the list is kept in the address (what a visitor copies)
    page.locator("#cir-sort input").click()
    page.get_by_role("option", name="Target ranked lowest", exact=False).first.click()
    page.wait_for_function("location.search.includes('sort=target_rank')")
    screenshot(page, "browser-own-runs-first-screen")
    page.close()
