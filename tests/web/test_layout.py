"""Every dashboard page but the run page (issue 35.3) in a real Chromium at 1366x900 and 390x844:
no horizontal page scroll, no console error, the board's columns all inside the page, the runs
strip's cells coloured by status (a failed run red, a succeeded one green), the overview and the
runs list refreshing by themselves. A screenshot of each page at each size is saved under a temp
folder whose path the test prints (``pytest -s``)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="runner web needs the web extra: pip install -e '.[web]'")
pytest.importorskip("playwright.sync_api", reason="browser tests need playwright (the test extra)")

from runner.testing import error, final  # noqa: E402
from tests.web.webhelp import CHROMIUM, Site, WebServer  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no {CHROMIUM} (apt-get install chromium)"),
]

SIZES = [(1366, 900), (390, 844)]
PAGES = [
    "/",
    "/jobs",
    "/jobs/nightly",
    "/runs",
    "/runs?job=nightly",
    "/board",
    "/board/tasks/1",
    "/approvals",
    "/credentials",
    "/skills",
    "/charts",
    "/login",
]
GREEN, RED, GREY = "rgb(46, 158, 74)", "rgb(198, 40, 40)", "rgb(153, 153, 153)"
COLOURS = {"succeeded": GREEN, "failed": RED}


@pytest.fixture(scope="module")
def shots() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="runner-web-screens-"))
    print(f"\nscreenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def failed_run(site: Site) -> str:
    """A failed run of nightly (the model answers 400) besides its three that succeeded."""
    site.fake.add(error(400, "bad request from the test"))
    site.cli("run-job", "nightly", check=False)
    db = site.db()
    try:
        row = db.execute("SELECT id FROM runs WHERE job = 'nightly' AND status = 'failed'").fetchone()
    finally:
        db.close()
    assert row, "no failed run of nightly"
    return str(row[0])


def _width(page: Any) -> tuple[int, int]:
    return page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_page_fits_without_console_errors(
    site: Site, web: WebServer, browser: Any, failed_run: str, shots: Path, size: tuple[int, int]
) -> None:
    w, h = size
    context = browser.new_context(viewport={"width": w, "height": h})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        wide = []
        for path in PAGES:
            res = page.goto(web.url + path)
            assert res is not None and res.status == 200, path
            page.wait_for_load_state("load")
            name = path.strip("/").replace("/", "_").replace("?", "_").replace("=", "-") or "overview"
            page.screenshot(path=str(shots / f"{name}-{w}x{h}.png"), full_page=True)
            scroll, inner = _width(page)
            if scroll > inner:
                wide.append(f"{path}: {scroll} px wide in a {inner} px window")
        assert not wide, wide
        assert not errors, errors
        page.goto(web.url + "/board")  # every column inside the window (FAILED was cut at 1366)
        right = page.evaluate("Math.max(...[...document.querySelectorAll('.column')].map(c => c.getBoundingClientRect().right))")
        assert right <= w, right
        assert page.locator("#col-failed").is_visible()
    finally:
        context.close()


def test_strip_cells_are_coloured_by_status(site: Site, web: WebServer, page: Any, failed_run: str) -> None:
    for path, selector in (("/jobs", "#job-nightly .strip .cell"), ("/jobs/nightly", "#job-strip .strip .cell")):
        page.goto(web.url + path)
        cells = page.locator(selector)
        assert cells.count() == 4, path
        seen = {}
        for i in range(cells.count()):
            cell = cells.nth(i)
            status = (cell.get_attribute("class") or "").split("st-", 1)[1]
            colour = cell.evaluate("c => getComputedStyle(c).backgroundColor")
            seen[status] = colour
            assert colour == COLOURS[status], (path, status, colour)
        assert seen == {"succeeded": GREEN, "failed": RED}, seen
        failed = page.locator(f'{selector}[href="/runs/{failed_run}"]')
        assert failed.evaluate("c => getComputedStyle(c).backgroundColor") == RED


def test_overview_and_runs_refresh_themselves(site: Site, web: WebServer, page: Any) -> None:
    """A run made from the CLI while the page is open shows up without a reload (htmx polling)."""
    page.goto(web.url + "/runs")
    page.evaluate("window.__same_document = true")
    site.fake.add(final("refreshed"))
    run_id = json.loads(site.cli("run-job", "hello", "--json").stdout)["id"]
    page.locator(f'#runs-live a[href="/runs/{run_id}"]').wait_for(timeout=30_000)
    assert page.evaluate("window.__same_document") is True  # no reload: the table was swapped
    page.goto(web.url + "/")
    page.evaluate("window.__same_document = true")
    before = page.locator("#fail-h").inner_text()
    site.fake.add(error(400, "another failure"))
    site.cli("run-job", "hello", check=False)
    deadline = time.time() + 30  # (wait_for_function evaluates a string: the page's CSP forbids it)
    while page.locator("#fail-h").inner_text() == before and time.time() < deadline:
        time.sleep(0.25)
    assert page.locator("#fail-h").inner_text() != before
    assert page.evaluate("window.__same_document") is True


def test_job_page_run_with_variables_and_pause(site: Site, web: WebServer, page: Any) -> None:
    page.goto(web.url + "/jobs")
    page.locator("#job-nightly a.job").click()
    page.wait_for_url("**/jobs/nightly")
    page.get_by_label("variable 1 name").fill("audience")
    page.get_by_label("variable 1 value").fill("from the browser")
    page.get_by_role("button", name="Run with these variables").click()
    page.locator(".flash", has_text="asked serve to run nightly now with audience").wait_for()
    assert page.url.split("?", 1)[0].endswith("/jobs/nightly")
    page.locator("#job-summary").get_by_role("button", name="Pause").click()
    page.locator("#job-summary .state", has_text="paused").wait_for()
    page.locator("#job-summary").get_by_role("button", name="Resume").click()
    page.locator("#job-summary .state", has_text="active").wait_for()
