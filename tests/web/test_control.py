"""The dashboard's control buttons in a real Chromium: run now, cancel, approve / deny a parked
approval, kanban retry. Each goes through ``runner.store.control`` (the store); the tests check the row
the button wrote and that the run reacts: a real serve starts it, it ends ``interrupted``, or it
continues after the answer. The run-side tests skip, naming the module, on a build without it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="runner web needs the web extra: pip install -e '.[web]'")
pytest.importorskip("playwright.sync_api", reason="browser tests need playwright (the test extra)")

from runner.statuses import ApprovalState, Trigger  # noqa: E402
from runner.store import Store  # noqa: E402
from runner.testing import call, final  # noqa: E402
from tests.web.webhelp import CHROMIUM, Site, WebServer, park_one  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no {CHROMIUM} (apt-get install chromium)"),
]
RUN_SIDE = {
    "cancel": "runner.run.cancel",  # a running run's cancel watch
    "parked": "runner.run.parked",  # a run parked on an approval
}


def needs(module: str) -> Any:
    missing = importlib.util.find_spec(module) is None
    return pytest.mark.skipif(missing, reason=f"{module} is not in this build (the run side of branch i-control)")


def _store(site: Site) -> Store:
    return site.open_store()


def test_run_now_runs_the_job_through_serve(site: Site, web: WebServer, page: Any) -> None:
    for task in ("1", "2"):  # serve's kanban dispatcher would give the seeded tasks the model's replies
        site.cli("kanban", "move", task, "done")
    serve = subprocess.Popen(
        [sys.executable, "-m", "runner", "serve"],
        env=site.env(),
        cwd=site.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        page.goto(f"{web.url}/")
        for _ in range(100):  # serve's first heartbeat
            if page.locator("#serve .st-succeeded").count():
                break
            time.sleep(0.2)
            page.reload()
        site.fake.add(final("triggered from the web"))
        page.goto(f"{web.url}/jobs")
        page.locator("#job-hello").get_by_role("button", name="Run now").click()
        assert "asked serve to run hello now" in page.locator(".flash").inner_text()
        store = _store(site)
        try:
            request = store.one("SELECT * FROM control_requests WHERE kind = 'trigger' ORDER BY requested_at DESC")
            assert request is not None and request["job"] == "hello" and request["requested_by"] == "web:admin"
            deadline = time.time() + 30
            run = None
            while time.time() < deadline:
                run = store.one(
                    "SELECT * FROM runs WHERE job = 'hello' AND trigger = 'manual' AND created_at >= ? "
                    "ORDER BY rowid DESC",
                    (request["requested_at"],),
                )
                if run and run["status"] == "succeeded":
                    break
                time.sleep(0.2)
        finally:
            store.close()
        assert run is not None and run["status"] == "succeeded", run
        page.goto(f"{web.url}/runs/{run['id']}")
        assert "triggered from the web" in page.locator("#output").inner_text()
    finally:
        serve.terminate()
        serve.communicate(timeout=30)


def test_cancel_writes_a_cancel_request(site: Site, web: WebServer, page: Any) -> None:
    from runner.store import ledger
    from runner.store.control import cancel_requested

    store = _store(site)
    try:
        run_id = ledger.open_run(store, job="hello", trigger=Trigger.MANUAL)
        page.goto(f"{web.url}/runs/{run_id}")
        page.get_by_role("button", name="Cancel run").click()
        assert "asked run" in page.locator(".flash").inner_text()
        assert cancel_requested(store, run_id) == "web:admin"
        page.goto("about:blank")  # off the live page: it reloads itself when the run ends, racing a goto
        ledger.finish(store, run_id, "interrupted", reason="cancelled")
        page.goto(f"{web.url}/runs/{run_id}")
        assert page.get_by_role("button", name="Cancel run").count() == 0
    finally:
        store.close()


@pytest.mark.parametrize("answer", ["Approve", "Deny"])
def test_answer_a_parked_approval(site: Site, web: WebServer, page: Any, answer: str) -> None:
    from runner.store import ledger
    from runner.store.control import get_request

    store = _store(site)
    try:
        run_id, request = park_one(store)
        page.goto(f"{web.url}/approvals")
        row = page.locator(f"#approval-{request.id}")
        assert "rm -rf build" in row.inner_text()
        if answer == "Deny":
            row.get_by_label("reason").fill("not today")
        row.get_by_role("button", name=answer).click()
        assert page.locator(f"#approval-{request.id}").count() == 0
        decided = get_request(store, request.id)
        assert decided.status == (ApprovalState.GRANTED if answer == "Approve" else ApprovalState.DENIED)
        assert decided.decided_by == "web:admin"
        ledger.finish(store, run_id, "succeeded")
    finally:
        store.close()


def test_retry_a_failed_task(site: Site, web: WebServer, page: Any) -> None:
    task_id = site.cli("kanban", "add", "will fail", "--job", "hello").stdout.strip()
    site.cli("kanban", "move", task_id, "failed")
    page.goto(f"{web.url}/board")
    page.locator(f"#task-{task_id}").get_by_role("button", name="Retry").click()
    page.locator(f"#col-ready #task-{task_id}").wait_for()


@needs(RUN_SIDE["cancel"])
def test_cancel_a_running_run(site: Site, web: WebServer, page: Any) -> None:
    from tests.web.test_browser import _wait_for_run

    proc = site.start_job("slow", call("terminal", {"command": "sleep 8"}))  # cancelled: asks no more
    run_id = _wait_for_run(site, "slow")
    page.goto(f"{web.url}/runs/{run_id}")
    page.get_by_role("button", name="Cancel run").click()
    page.locator("#run-status[data-status='interrupted']").wait_for(timeout=30_000)
    proc.wait(timeout=30)


@needs(RUN_SIDE["parked"])
@pytest.mark.parametrize(("answer", "seen"), [("Approve", "removed-it"), ("Deny", "denied by web:admin: not today")])
def test_a_parked_run_continues_after_the_answer(site: Site, web: WebServer, page: Any, answer: str, seen: str) -> None:
    from tests.web.test_browser import _wait_for_run

    jobs = site.root / "jobs.yaml"
    if "careful:" not in jobs.read_text():
        jobs.write_text(
            jobs.read_text() + "  careful:\n    prompt: Clean up.\n    toolsets: [terminal]\n    approvals: manual\n"
        )
    (site.root / "build").mkdir(exist_ok=True)
    proc = site.start_job(
        "careful", call("terminal", {"command": "rm -rf build && echo removed-it"}), final("cleaned up")
    )
    run_id = _wait_for_run(site, "careful")
    row = page.locator("#pending tr", has_text=run_id)
    for _ in range(60):  # the run parks once it reaches the command
        page.goto(f"{web.url}/approvals")
        if row.count():
            break
        time.sleep(0.5)
    if answer == "Deny":
        row.get_by_label("reason").fill("not today")
    row.get_by_role("button", name=answer).click()
    page.goto(f"{web.url}/runs/{run_id}")
    page.locator("#run-status[data-status='succeeded']").wait_for(timeout=30_000)
    assert seen in page.locator("#timeline").inner_text()
    assert proc.wait(timeout=30) == 0


@needs(RUN_SIDE["cancel"])
def test_a_message_from_the_run_page_reaches_the_model(site: Site, web: WebServer, page: Any) -> None:
    """Steering from the dashboard: the run page's box, then the live timeline shows the message
    given to the model, which gets it after its tool call's result."""
    from tests.web.test_browser import _wait_for_run

    gate = site.root / "steer-gate"
    command = f"while [ ! -e {gate.name} ]; do sleep 0.05; done; echo passed"
    before = len(site.fake.requests)
    proc = site.start_job("slow", call("terminal", {"command": command}), final("done"))
    run_id = _wait_for_run(site, "slow")
    page.goto(f"{web.url}/runs/{run_id}")
    page.locator("#timeline", has_text="-> terminal").wait_for(timeout=30_000)
    page.get_by_label("Message to the run").fill("Only the last hour matters.")
    page.get_by_role("button", name="Send").click()
    assert "message queued" in page.locator(".flash").inner_text()
    time.sleep(1.0)  # the run's watch sees it
    gate.touch()
    page.locator("#timeline", has_text="given to the model").wait_for(timeout=30_000)
    page.locator("#run-status[data-status='succeeded']").wait_for(timeout=30_000)
    assert proc.wait(timeout=30) == 0
    messages = site.fake.requests[before + 1]["body"]["messages"]
    assert messages[-1]["role"] == "user" and "Only the last hour matters." in messages[-1]["content"]
    assert "web:admin" in messages[-1]["content"]


@needs(RUN_SIDE["parked"])
def test_a_waiting_run_is_seen_everywhere_and_approved_from_its_page(site: Site, web: WebServer, page: Any) -> None:
    """A real run parked on a manual approval is ``waiting``: the CLI, /metrics, the overview, the
    navigation's badge and the run page's banner say so; Approve on the banner lets the command run
    (its marker file appears), and the run goes back to running, then succeeds."""
    import httpx

    from tests.web.test_browser import _wait_for_run

    jobs = site.root / "jobs.yaml"
    if "waits:" not in jobs.read_text():
        jobs.write_text(
            jobs.read_text()
            + "  waits:\n    prompt: Tidy up.\n    toolsets: [terminal]\n    approvals: manual\n    workdir: wd\n"
        )
    workdir = site.root / "wd"
    (workdir / "build").mkdir(parents=True, exist_ok=True)
    marker = workdir / "approved-marker"
    proc = site.start_job(
        "waits",
        call("terminal", {"command": f"rm -rf build && sleep 1.5 && touch {marker.name}"}),
        final("tidied"),
    )
    run_id = _wait_for_run(site, "waits")
    store = _store(site)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and store.one("SELECT status FROM runs WHERE id=?", (run_id,))["status"] != "waiting":
            time.sleep(0.1)
        assert store.one("SELECT status FROM runs WHERE id=?", (run_id,))["status"] == "waiting"
        [request] = store.query("SELECT * FROM approval_requests WHERE run_id=? AND status='pending'", (run_id,))

        listed = json.loads(site.cli("runs", "list", "--json", "--status", "waiting").stdout)
        assert [r["id"] for r in listed] == [run_id] and listed[0]["waiting_for"]["approval_id"] == request["id"]
        shown = site.cli("runs", "show", run_id).stdout
        assert "status   waiting" in shown and f"runner approvals grant {request['id']}" in shown
        metrics = httpx.get(f"{web.url}/metrics", timeout=10).text
        assert "runner_runs_waiting 1.0" in metrics
        assert 'runner_runs{job="waits",status="waiting"} 1.0' in metrics

        page.goto(f"{web.url}/")
        assert run_id in page.locator("#waiting").inner_text()
        assert "rm -rf build" in page.locator("#waiting").inner_text()
        assert page.locator("#waiting-badge").inner_text() == "1"
        page.goto(f"{web.url}/runs/{run_id}")
        assert page.locator("#run-status").get_attribute("data-status") == "waiting"
        banner = page.locator("#waiting-banner")
        assert request["id"] in banner.inner_text() and "rm -rf build" in banner.inner_text()
        banner.get_by_role("button", name="Approve").click()
        assert f"approval {request['id']}: granted" in page.locator(".flash").inner_text()
        deadline = time.time() + 10  # the command sleeps 1.5 s: the run is running again meanwhile
        seen = set()
        while time.time() < deadline and "succeeded" not in seen:
            seen.add(store.one("SELECT status FROM runs WHERE id=?", (run_id,))["status"])
            if "running" in seen:
                break
            time.sleep(0.05)
        assert "running" in seen, seen
        page.locator("#run-status[data-status='succeeded']").wait_for(timeout=30_000)
        assert page.locator("#waiting-banner").count() == 0 and page.locator("#waiting-badge").count() == 0
        assert marker.exists()
        assert proc.wait(timeout=30) == 0
        decided = store.one("SELECT status, decided_by FROM approval_requests WHERE id=?", (request["id"],))
        assert (decided["status"], decided["decided_by"]) == ("granted", "web:admin")
    finally:
        store.close()
