"""The run page as a trace (issue 35): the waterfall of a run's steps (model turns, tool calls,
waits), one row per step the store counts (``queries.step_count``: the run's events of
``runner.events.STEP_KINDS``), each with its duration, tokens and cost; payloads collapsed with a
preview and pretty-printed; live while the run goes. Over HTTP against a real `runner web`, and in
Debian's Chromium at 1366x900 and 390x844 (no horizontal page scroll, no console error, the row
count, a running run's tokens updating by themselves); screenshots go to
pytest's temp folder, /tmp/pytest-of-USER/pytest-N/run-page-screenshots (printed)."""

from __future__ import annotations

import html
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="runner web needs the web extra: pip install -e '.[web]'")

from runner.events import STEP_KINDS, Event  # noqa: E402
from runner.store import queries  # noqa: E402
from runner.testing import call, final  # noqa: E402
from runner.testing.fakeopenai import Reply  # noqa: E402
from runner.web.trace import Diff  # noqa: E402
from tests.web.webhelp import CHROMIUM, Site, WebServer  # noqa: E402

JSON_OUT = '{"rows": [1, 2], "ok": true}'
WIDE = 600  # characters of one unbroken line of output


def traced_run(site: Site) -> str:
    """A run with a JSON result, a very wide one, and an answer: 3 model turns, 2 calls."""
    return site.run_job(
        "hello",
        call("terminal", {"command": f"echo '{JSON_OUT}'"}),
        call("terminal", {"command": f"head -c {WIDE} /dev/zero | tr '\\0' w; echo; echo second-line"}),
        final("# Done\n\nall good", usage=(300, 40)),
    )


@pytest.fixture(scope="module")
def traced(site: Site) -> str:
    return traced_run(site)


def ledger_steps(site: Site, run_id: str) -> tuple[int, dict[str, Any]]:
    store = site.open_store()
    try:
        from runner.store.runs import get_run

        return queries.step_count(store, run_id), get_run(store, run_id) or {}
    finally:
        store.close()


def rows_of(page_html: str) -> list[str]:
    body = page_html.split('id="timeline"', 1)[1].split("</ol>", 1)[0]
    return re.findall(r'<li class="tl-row .*?</li>', body, flags=re.S)


def test_one_row_per_step_the_store_counts(site: Site, web: WebServer, traced: str) -> None:
    """The definition (events of STEP_KINDS) against a count made from the store by hand, and
    against the ledger's turn counter; each model turn's row carries its tokens and cost."""
    count, run = ledger_steps(site, traced)
    db = site.db()
    try:
        kinds = [r[0] for r in db.execute("SELECT kind FROM run_events WHERE run_id = ?", (traced,)).fetchall()]
    finally:
        db.close()
    assert count == sum(1 for k in kinds if k in {str(s) for s in STEP_KINDS})
    assert kinds.count(str(Event.REQUEST)) == run["iterations"] == 3 and kinds.count(str(Event.TOOL_CALL)) == 2
    page = httpx.get(f"{web.url}/runs/{traced}").text
    rows = rows_of(page)
    assert len(rows) == count and f'<span id="tl-count">{count}</span> steps' in page
    models = [r for r in rows if "tl-model" in r.split(">", 1)[0]]
    assert len(models) == run["iterations"]
    assert "100 + 20 tok" in models[0] and "300 + 40 tok" in models[2] and "$" in models[2]
    assert "model turn 1: calls terminal" in models[0] and "model turn 3: answers" in models[2]
    span = float(re.search(r'data-span="([\d.]+)"', page).group(1))  # type: ignore[union-attr]
    for row in rows:  # every bar inside the run's span, and a duration on every row
        x, width = (float(v) for v in re.search(r'<rect class="tl-bar" x="([\d.]+)" y="1" width="([\d.]+)"', row).groups())  # type: ignore[union-attr]
        assert x >= 0 and x + width <= span * 1.01 + 0.01, row
        assert re.search(r'class="tl-dur">\d+(\.\d)? (ms|s)<', row), row


def test_payloads_collapsed_with_a_preview_and_pretty(site: Site, web: WebServer, traced: str) -> None:
    page = httpx.get(f"{web.url}/runs/{traced}").text
    tools = [r for r in rows_of(page) if "tl-tool" in r.split(">", 1)[0]]
    assert len(tools) == 2 and all("-&gt; terminal" in r for r in tools)
    first = html.unescape(tools[0])
    assert '<details class="tl-part tl-part-result">' in first and "<details open" not in first  # collapsed
    preview = re.search(r'tl-part-result"><summary><b>result</b> <span class="tl-preview">(.*?)</span>', first, re.S)
    assert preview is not None and preview.group(1) == f"exit code 0 ↵ {JSON_OUT}"  # on one line
    assert 'exit code 0\n{\n  "rows": [\n    1,\n    2\n  ],\n  "ok": true\n}' in first  # the JSON pretty-printed
    assert '"command": "echo' in first  # the arguments too
    wide = html.unescape(tools[1])
    preview = re.search(r'tl-part-result"><summary><b>result</b> <span class="tl-preview">(.*?)</span>', wide, re.S)
    assert preview is not None and preview.group(1) == ("exit code 0 ↵ " + "w" * WIDE)[:160] + " …"  # cut to 160
    assert "w" * WIDE + "\nsecond-line" in wide  # whole when opened


def test_a_run_without_steps_and_the_stream_of_an_ended_run(site: Site, web: WebServer, traced: str) -> None:
    """An ended run's stream says so at once; a run with no step events shows an empty timeline."""
    with httpx.Client(base_url=web.url, timeout=10) as client:
        with client.stream("GET", f"/runs/{traced}/stream") as res:
            text = "".join(res.iter_text())
        assert "event: end" in text and "event: trace" in text  # the rows it has, then the end
        assert text.count('class="tl-row') == ledger_steps(site, traced)[0]


def test_every_kind_of_step_from_a_real_store(tmp_path: Path) -> None:
    """Waits, messages, pre_run and delivery through the run's own Recorder into a store: one step
    per event of STEP_KINDS (what ``step_count`` counts), placed and timed; a call with no result
    is open while the run is live and runs to the run's end after."""
    from datetime import timedelta

    from runner.clock import utcnow
    from runner.events import (
        ApprovalAnswered,
        ApprovalParked,
        Checkpoint,
        Delivered,
        PreRun,
        Request,
        Response,
        Steer,
        ToolCall,
        ToolResult,
    )
    from runner.safety.redact import Redactor
    from runner.statuses import Trigger
    from runner.store import Store, ledger
    from runner.store.runs import Recorder, events
    from runner.web.trace import timeline

    store = Store.open(tmp_path / "runner.db")
    try:
        run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
        rec = Recorder(store, run_id, Redactor())
        rec(Event.PRE_RUN, PreRun(0, False, "ready\n"))
        rec(Event.REQUEST, Request(1, 2, 1))
        rec(Event.RESPONSE, Response(1, None, [{"name": "terminal", "arguments": {"c": 1}}], "tool_calls", 10, 2, 0.5, 0.1))
        rec(Event.CHECKPOINT, Checkpoint("c0ffee", "/w", 1, 0.01, step=1, tool="terminal"))
        rec(Event.TOOL_CALL, ToolCall("a", "terminal", {"c": 1}))
        rec(Event.APPROVAL_PARKED, ApprovalParked("ap1", "rm -rf x", ["rm -r"], "2999-01-01T00:00:00+00:00"))
        rec(Event.APPROVAL_ANSWERED, ApprovalAnswered("ap1", "denied", "web:admin", "no"))
        rec(Event.TOOL_RESULT, ToolResult("a", "terminal", "blocked: denied by web:admin: no", 30, True, 0.2))
        rec(Event.STEERED, Steer("s1", "web:admin", "hurry"))
        rec(Event.REQUEST, Request(2, 5, 1))
        rec(Event.RESPONSE, Response(2, "ok", [], "stop", 20, 3, 0.25, 0.1))
        rec(Event.TOOL_CALL, ToolCall("b", "web_fetch", {"url": "x"}))  # never answered
        rec(Event.DELIVERED, Delivered(sinks=[{"sink": "file", "ok": False, "detail": "disk full"}]))
        evs = events(store, run_id)
        count = queries.step_count(store, run_id)
    finally:
        store.close()
    now = utcnow()
    diffs = {e.seq: Diff("c0ffee", "+new line", False) for e in evs if e.kind == Event.CHECKPOINT}
    live = timeline(evs, started_at=evs[0].ts, ended_at=None, now=now, live=True, diffs=diffs)
    assert count == len(live.steps) == 8
    kinds = [s.kind for s in live.steps]  # in the order of the events that opened them
    assert kinds == ["pre_run", "model", "tool", "approval", "steer", "model", "tool", "delivery"]
    by = {s.kind: s for s in live.steps}
    assert live.steps_by_kind == {"pre_run": 1, "model": 2, "tool": 2, "approval": 1, "steer": 1, "delivery": 1}
    model = live.steps[1]
    assert (model.prompt_tokens, model.completion_tokens, model.cost_usd) == (10, 2, 0.5)
    call_a = live.steps[2]
    assert call_a.failed and call_a.title == "-> terminal (blocked)" and call_a.diff is not None  # after the checkpoint
    assert by["approval"].title == "approval ap1: denied by web:admin" and by["approval"].failed
    assert by["steer"].seconds == 0 and by["delivery"].failed
    fetch = [s for s in live.steps if s.title == "-> web_fetch"][0]
    assert fetch.seconds is None and fetch.state == "open" and live.width(fetch) > 0
    ended = timeline(evs, started_at=evs[0].ts, ended_at=(now + timedelta(seconds=5)).isoformat(), now=now, live=False)
    fetch = [s for s in ended.steps if s.title == "-> web_fetch"][0]
    assert fetch.note == "no end recorded" and fetch.start + (fetch.seconds or 0) == pytest.approx(ended.span)
    assert all(0 <= s.start <= ended.span and s.seconds is not None for s in ended.steps)


# -- in Chromium ---------------------------------------------------------------------------------
VIEWPORTS = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no {CHROMIUM} (apt-get install chromium)")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the whole session's screenshots, xdist workers included: pytest's temp root
    (/tmp/pytest-of-USER/pytest-N/run-page-screenshots)."""
    root = tmp_path_factory.getbasetemp()
    folder = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "run-page-screenshots"
    folder.mkdir(exist_ok=True)
    print(f"\nrun page screenshots: {folder}")
    return folder


@pytest.fixture
def viewed(browser: Any, request: pytest.FixtureRequest) -> Iterator[tuple[Any, list[str]]]:
    """A page at the viewport named by the test's ``size`` parameter, and its console errors."""
    pytest.importorskip("playwright.sync_api", reason="browser tests need playwright (the test extra)")
    context = browser.new_context(viewport=VIEWPORTS[request.node.callspec.params["size"]])
    page = context.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console: {m.text} {m.location}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    yield page, errors
    context.close()


def no_page_scroll(page: Any) -> None:
    wide = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert wide[0] <= wide[1], f"the page is {wide[0]} px wide in a {wide[1]} px window"


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("size", list(VIEWPORTS))
def test_the_run_page_fits_and_counts(
    site: Site, web: WebServer, traced: str, viewed: tuple[Any, list[str]], shots: Path, size: str
) -> None:
    page, errors = viewed
    page.goto(f"{web.url}/runs/{traced}")
    count, _ = ledger_steps(site, traced)
    assert page.locator("#timeline .tl-row").count() == count
    no_page_scroll(page)
    page.screenshot(path=str(shots / f"run-{size}.png"), full_page=True)
    for summary in page.locator("#timeline .tl-part summary").all():  # every payload opened
        summary.click()
    page.locator("details.tl-events summary").click()
    no_page_scroll(page)
    page.screenshot(path=str(shots / f"run-{size}-opened.png"), full_page=True)
    for bar in page.locator("#timeline svg.tl-track").all():  # a bar is drawn in every row
        box = bar.bounding_box()
        assert box is not None and box["width"] > 40 and box["height"] > 5
    assert not errors, errors


def wait_running(site: Site, job: str, timeout: float = 20) -> str:
    from tests.web.test_browser import _wait_for_run

    return _wait_for_run(site, job, timeout)


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("size", list(VIEWPORTS))
def test_a_running_run_updates_by_itself(
    site: Site, web: WebServer, viewed: tuple[Any, list[str]], shots: Path, size: str
) -> None:
    """A real run against the fake model: the page opens while the first reply is slow (no tokens
    yet), then the reply's tokens, the tool call held open by a gate file, its result, and the
    next turn arrive without a reload; the rows always match the store's count."""
    page, errors = viewed
    gate = site.root / f"trace-gate-{size}"
    command = f"while [ ! -e {gate.name} ]; do sleep 0.05; done; echo through-the-gate"
    slow_first = Reply(tool_calls=[("terminal", {"command": command})], usage=(70, 9), hang=4.0)
    proc = site.start_job("slow", slow_first, final("all done", usage=(30, 5)))
    run_id = wait_running(site, "slow")
    page.goto(f"{web.url}/runs/{run_id}")
    page.evaluate("window.__same_page = true")
    tokens = page.locator("#run-tokens")
    assert tokens.inner_text() == "0 + 0", "the page should open during the slow first reply"
    page.locator("#timeline .tl-model.tl-open").wait_for()  # the request is out: an open turn
    tokens.filter(has_text="70 + 9").wait_for()  # the reply's tokens, live
    tool = page.locator("#timeline .tl-tool.tl-open", has_text="-> terminal")
    tool.wait_for()
    page.locator("#timeline .tl-model", has_text="70 + 9 tok").wait_for()
    assert page.evaluate("window.__same_page") is True  # no reload: over the stream
    assert page.locator("#timeline .tl-row").count() == ledger_steps(site, run_id)[0]
    no_page_scroll(page)
    time.sleep(0.6)  # the open bar grows with the clock
    page.screenshot(path=str(shots / f"live-{size}.png"), full_page=True)
    gate.touch()
    page.locator("#timeline .tl-tool:not(.tl-open) .tl-part-result", has_text="through-the-gate").wait_for()
    page.locator("#run-status[data-status='succeeded']").wait_for(timeout=30_000)  # then a reload
    page.locator("#output").get_by_text("all done").wait_for()
    assert page.locator("#run-tokens").inner_text() == "100 + 14"
    assert page.locator("#timeline .tl-row").count() == ledger_steps(site, run_id)[0]
    no_page_scroll(page)
    page.screenshot(path=str(shots / f"live-{size}-ended.png"), full_page=True)
    assert proc.wait(timeout=30) == 0
    assert not errors, errors
