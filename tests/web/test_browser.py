"""runner web in a real headless Chromium (Playwright, Debian's /usr/bin/chromium) against a real
`runner web` subprocess and a store of real runs: every page, a run followed live over SSE, a card
moved (and the board updating by itself), a job paused and resumed, a follow-up cancelled. A screenshot of the page is
saved to /tmp/runner-web-artifacts when a test fails (the hook in conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="runner web needs the web extra: pip install -e '.[web]'")
pytest.importorskip("playwright.sync_api", reason="browser tests need playwright (the test extra)")

from runner.testing import call, final  # noqa: E402
from tests.web.webhelp import CHROMIUM, PAGES, Site, WebServer  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no {CHROMIUM} (apt-get install chromium)"),
]


def test_every_page_loads(site: Site, web: WebServer, page: Any) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    for path in [p for p in PAGES if p != "/metrics"]:
        res = page.goto(web.url + path)
        assert res is not None and res.status == 200, path
        assert page.locator("main h1").count() == 1, path
    page.goto(f"{web.url}/runs/{site.ids['xss']}")  # type: ignore[attr-defined]
    assert page.title() != "pwned" and not page.dialogs
    assert "<script>" in page.locator("#output").inner_text()  # shown as text
    assert not errors, errors


def test_follow_a_running_run_live(site: Site, web: WebServer, page: Any) -> None:
    proc = site.start_job(
        "slow",
        call("terminal", {"command": "sleep 2.5 && echo woke-up-$((40 + 2))"}),
        final("slept well"),
    )
    run_id = _wait_for_run(site, "slow")
    page.goto(f"{web.url}/runs/{run_id}")
    assert page.locator("#run-status").get_attribute("data-status") in ("queued", "running")
    timeline = page.locator("#timeline")
    page.locator("#run-turns", has_text="1").wait_for()  # live counters, over SSE
    assert page.locator("#run-tokens").inner_text() == "100 + 20"  # the 1st reply's, while the command sleeps
    timeline.locator(".tl-part-result", has_text="woke-up-42").wait_for()  # arrived over SSE, no reload
    page.locator("#run-status[data-status='succeeded']").wait_for()
    page.locator("#output").get_by_text("slept well").wait_for()
    assert page.locator("#run-turns").inner_text() == "2"
    assert proc.wait(timeout=30) == 0


def _wait_for_run(site: Site, job: str, timeout: float = 20) -> str:
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        db = site.db()
        try:
            row = db.execute(
                "SELECT id FROM runs WHERE job = ? AND status IN ('queued', 'running') ORDER BY "
                + ("created_at DESC, id DESC" if site.database_url else "rowid DESC"),
                (job,),
            ).fetchone()
        finally:
            db.close()
        if row:
            return str(row[0])
        time.sleep(0.05)
    raise AssertionError(f"no running run of {job}")


def test_move_a_card_and_the_board_updates_live(site: Site, web: WebServer, page: Any) -> None:
    page.goto(f"{web.url}/board")
    card = page.locator("#col-ready .card", has_text="first task")
    card.locator("select").select_option("done")
    card.get_by_role("button", name="Move").click()
    page.locator("#col-done .card", has_text="first task").wait_for()
    assert "first task: done" in page.locator(".flash").inner_text() or page.locator(".flash").count() == 1
    site.cli("kanban", "add", "added from the cli", "--job", "hello")
    page.locator("#col-ready .card", has_text="added from the cli").wait_for()  # SSE + htmx, no reload


def test_add_a_task_with_a_parent_and_comment(site: Site, web: WebServer, page: Any) -> None:
    page.goto(f"{web.url}/board")
    page.get_by_label("Title").fill("child of two")
    page.get_by_label("Parents (task ids)").fill("2")
    page.get_by_role("button", name="Add").click()
    card = page.locator("#col-todo .card", has_text="child of two")
    card.wait_for()
    card.get_by_role("link").click()
    page.get_by_label("Comment").fill("a note from the browser")
    page.get_by_role("button", name="Comment").click()
    page.get_by_text("a note from the browser").wait_for()
    page.get_by_label("Block, reason").fill("waiting for a person")
    page.get_by_role("button", name="Block").click()
    page.locator(".summary .st-blocked").wait_for()  # back on the task, now blocked
    page.goto(f"{web.url}/board")
    page.locator("#col-blocked .card", has_text="child of two").wait_for()


def test_pause_and_resume_a_job(site: Site, web: WebServer, page: Any) -> None:
    page.goto(f"{web.url}/jobs")
    row = page.locator("#job-nightly")
    row.get_by_role("button", name="Pause").click()
    page.locator("#job-nightly .state", has_text="paused").wait_for()
    assert "paused" in site.cli("jobs", "list").stdout.split("nightly", 1)[1].splitlines()[0]
    page.locator("#job-nightly").get_by_role("button", name="Resume").click()
    page.locator("#job-nightly .state", has_text="active").wait_for()
    assert "paused" not in site.cli("jobs", "list").stdout.split("nightly", 1)[1].splitlines()[0]


def test_cancel_a_followup(site: Site, web: WebServer, page: Any) -> None:
    """A follow-up asked by a real run shows on the jobs page with its note as text (no script
    runs); its Cancel button removes it, and the store records it cancelled by web:admin."""
    from runner.store.followups import get

    note = '<img src=x onerror="document.title=\'pwned\'"> check the deploy'
    site.fake.add(call("schedule_followup", {"when": "4h", "note": note}), final("asked"))
    site.cli("run-job", "later")
    page.goto(f"{web.url}/jobs")
    row = page.locator("tr[id^=followup-]").filter(has_text="check the deploy")
    assert note in row.locator(".note").inner_text() and page.title() != "pwned"
    followup_id = (row.get_attribute("id") or "").removeprefix("followup-")
    row.get_by_role("button", name="Cancel").click()
    page.locator(".flash", has_text=f"cancelled follow-up {followup_id}").wait_for()
    assert page.locator(f"#followup-{followup_id}").count() == 0
    store = site.open_store()
    try:
        assert get(store, followup_id).cancelled_by == "web:admin"
    finally:
        store.close()
