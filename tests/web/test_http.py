"""runner web over HTTP (httpx against the real server): every page, auth, CSRF, read-only,
XSS, redaction, /metrics."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="runner web needs the web extra: pip install -e '.[web]'")

from runner.testing import call, final
from tests.web.webhelp import PAGES, PLANTED_KEY, Site, WebServer, csrf_of, free_port, start_web


def test_every_page_loads_and_shows_the_runs(site: Site, web: WebServer) -> None:
    with httpx.Client(base_url=web.url) as client:
        for path in PAGES:
            res = client.get(path)
            assert res.status_code == 200, (path, res.text[:500])
        runs = client.get("/runs").text
        for run_id in site.ids.values():  # type: ignore[attr-defined]
            assert run_id in runs
        detail = client.get(f"/runs/{site.ids['hello']}").text  # type: ignore[attr-defined]
        assert "hello-from-tool" in detail  # the tool's result in the timeline
        assert "<h1>Hello</h1>" in detail  # the output as Markdown
        assert "first task" in client.get("/board").text
        assert client.get("/runs/no-such-run").status_code == 404


def test_runs_filters_and_keyset_pages(site: Site, web: WebServer) -> None:
    with httpx.Client(base_url=web.url) as client:
        page = client.get("/runs", params={"job": "nightly"}).text
        assert page.count('href="/runs/') == 3
        assert "xss" not in re.sub(r"<form.*?</form>", "", page, flags=re.S).split("<table", 1)[1]
        assert "No runs." in client.get("/runs", params={"status": "timed_out"}).text
        assert "No runs." in client.get("/runs", params={"since": "2999-01-01"}).text
        from runner.store import queries

        assert queries.PAGE_SIZE >= 3  # one page here; the paging itself is tested on the store


def test_xss_in_an_output_renders_inert(site: Site, web: WebServer) -> None:
    html = httpx.get(f"{web.url}/runs/{site.ids['xss']}").text  # type: ignore[attr-defined]
    body = html.split("<main>", 1)[1]
    assert "<script>document.title" not in body and "<img src=x" not in body
    assert "&lt;script&gt;" in body
    assert 'href="javascript:' not in body


def test_no_secret_on_any_page(site: Site, web: WebServer) -> None:
    with httpx.Client(base_url=web.url) as client:
        paths = [*PAGES, *(f"/runs/{i}" for i in site.ids.values()), "/board/tasks/1"]  # type: ignore[attr-defined]
        for path in paths:
            res = client.get(path)
            assert res.status_code == 200, path
            assert PLANTED_KEY not in res.text, path
            assert PLANTED_KEY[:20] not in res.text, path
        assert "OPENAI_API_KEY" in client.get("/credentials").text  # the key is listed, by name and fingerprint


def test_csrf_refused(site: Site, web: WebServer) -> None:
    with httpx.Client(base_url=web.url, headers={"Origin": web.url}) as client:  # as a browser posts
        page = client.get("/jobs")
        token = csrf_of(page.text)
        assert client.post("/jobs/nightly/pause", data={}).status_code == 403
        assert client.post("/jobs/nightly/pause", data={"csrf": "wrong"}).status_code == 403
        other = httpx.post(
            f"{web.url}/jobs/nightly/pause", data={"csrf": token}, headers={"Origin": web.url}
        )  # no cookie
        assert other.status_code == 403
        cross = client.post("/jobs/nightly/pause", data={"csrf": token}, headers={"Origin": "http://evil.example"})
        assert cross.status_code == 403
        assert "paused" not in client.get("/jobs").text.split('id="job-nightly"', 1)[1].split("</tr>", 1)[0]
        ok = client.post("/jobs/nightly/pause", data={"csrf": token})
        assert ok.status_code == 303
        assert client.post("/jobs/nightly/resume", data={"csrf": token}).status_code == 303


def test_without_a_token_only_loopback_host_names(web: WebServer) -> None:
    """DNS rebinding: a page of evil.example resolved to 127.0.0.1 must not read the dashboard."""
    assert httpx.get(f"{web.url}/runs", headers={"Host": "evil.example"}).status_code == 403
    assert httpx.get(f"{web.url}/runs", headers={"Host": f"localhost:{web.port}"}).status_code == 200


def test_metrics(site: Site, web: WebServer) -> None:
    text = httpx.get(f"{web.url}/metrics").text
    assert 'runner_runs{job="nightly",status="succeeded"} 3.0' in text
    assert "runner_run_duration_seconds_bucket" in text
    assert 'runner_kanban_tasks{status="ready"}' in text
    assert "runner_queue_depth 0.0" in text
    assert "runner_keys_cooling" in text and "runner_serve_up 0.0" in text
    assert 'runner_cost_usd_total{job="hello"}' in text


def test_off_loopback_needs_a_token(site: Site) -> None:
    proc = site.cli("web", "--bind", f"0.0.0.0:{free_port()}", check=False, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "needs a token" in proc.stderr and "Traceback" not in proc.stderr
    proc = site.cli("serve", "--web", f"0.0.0.0:{free_port()}", check=False, timeout=30)
    assert proc.returncode == 2 and "needs a token" in proc.stderr and proc.stderr.count("\n") == 1


def test_tokens_full_and_read_only(site: Site) -> None:
    admin = site.cli("web", "token").stdout.strip()
    viewer = site.cli("web", "token", "--read-only").stdout.strip()
    assert (site.home / "web-token").stat().st_mode & 0o777 == 0o600
    assert site.cli("web", "token").stdout.strip() == admin  # kept, not rotated
    port = free_port()
    server = start_web(site, bind=f"0.0.0.0:{port}")
    try:
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/runs").status_code == 401
        assert httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        login = httpx.get(f"{url}/runs", headers={"Accept": "text/html"})
        assert login.status_code == 303 and login.headers["location"].startswith("/login")
        for token in (admin, viewer):
            assert httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {viewer}"}) as client:
            token = csrf_of(client.get("/jobs").text)
            refused = client.post("/jobs/nightly/pause", data={"csrf": token})
            assert refused.status_code == 403 and "read-only" in refused.text
            said = client.post(f"/runs/{site.ids['hello']}/say", data={"csrf": token, "message": "hi"})  # type: ignore[attr-defined]
            assert said.status_code == 403 and "read-only" in said.text
        with httpx.Client(base_url=url, headers={"Origin": url}) as client:  # the login form sets a session cookie
            token = csrf_of(client.get("/login").text)
            res = client.post("/login", data={"csrf": token, "token": admin, "next": "/jobs"})
            assert res.status_code == 303 and res.headers["location"] == "/jobs"
            assert admin not in str(client.cookies.get("runner_session"))
            assert client.post("/jobs/nightly/pause", data={"csrf": token}).status_code == 303
            assert client.post("/jobs/nightly/resume", data={"csrf": token}).status_code == 303
            assert client.post("/login", data={"csrf": token, "token": "bad"}).status_code == 401
    finally:
        server.stop()
        (site.home / "web-token").unlink()
        (site.home / "web-token-readonly").unlink()


@pytest.mark.parametrize("bind", ["nonsense", "127.0.0.1:99999"])
def test_bad_bind_is_one_line(site: Site, bind: str) -> None:
    proc = site.cli("web", "--bind", bind, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "HOST:PORT" in proc.stderr


def test_skill_buttons_and_key_reset(site: Site, web: WebServer) -> None:
    from tests.skillkit import write_skill

    write_skill(site.home / "skills", "tidy-logs")
    with httpx.Client(base_url=web.url, headers={"Origin": web.url}) as client:
        token = csrf_of(client.get("/skills").text)
        for kind, shown in (("pin", "pinned"), ("unpin", "unpinned"), ("archive", "archived"), ("restore", "restored")):
            res = client.post(f"/skills/tidy-logs/{kind}", data={"csrf": token}, follow_redirects=True)
            assert res.status_code == 200 and shown in res.text.lower(), (kind, res.text[:300])
        listed = site.cli("skills", "list", "--json").stdout
        assert '"tidy-logs"' in listed and '"state": "active"' in listed
        refused = client.post("/skills/no-such/pin", data={"csrf": token}, follow_redirects=True)
        assert 'class="flash error"' in refused.text and "no skill" in refused.text
        page = client.get("/credentials").text
        fingerprint = re.search(r"<code>([0-9a-f]{12})</code>", page)
        assert fingerprint
        reset = client.post("/credentials/reset", data={"csrf": token, "fingerprint": fingerprint.group(1)})
        assert reset.status_code == 303 and "reset+1+key" in reset.headers["location"]


def test_a_message_to_a_running_run(site: Site, web: WebServer) -> None:
    """The run page's box (CSRF as every button) calls ``request_steer``; the steered step shows
    in the timeline; a finished run or an empty message is a flash error, a subagent has no box."""
    from runner.events import Event, Steer
    from runner.safety.redact import Redactor
    from runner.statuses import RunStatus, Trigger
    from runner.store import ledger
    from runner.store.control import steers_of
    from runner.store.runs import Recorder

    store = site.open_store()
    try:
        run_id = ledger.open_run(store, job="hello", trigger=Trigger.MANUAL)
        child = ledger.open_run(store, job="hello", trigger=Trigger.DELEGATE, parent_run_id=run_id)
        with httpx.Client(base_url=web.url, headers={"Origin": web.url}) as client:
            page = client.get(f"/runs/{run_id}").text
            assert f'action="/runs/{run_id}/say"' in page and 'maxlength="4000"' in page
            assert f'action="/runs/{child}/say"' not in client.get(f"/runs/{child}").text
            token = csrf_of(page)
            assert client.post(f"/runs/{run_id}/say", data={"message": "no token"}).status_code == 403
            res = client.post(f"/runs/{run_id}/say", data={"csrf": token, "message": "use <b>staging</b>"})
            assert res.status_code == 303 and "message+queued" in res.headers["location"]
            [steer] = steers_of(store, run_id)
            assert (steer["requested_by"], steer["message"]) == ("web:admin", "use <b>staging</b>")
            empty = client.post(f"/runs/{run_id}/say", data={"csrf": token, "message": " "}, follow_redirects=True)
            assert 'class="flash error"' in empty.text and "the message is empty" in empty.text
            Recorder(store, run_id, Redactor())(Event.STEERED, Steer(steer["id"], "web:admin", steer["message"]))
            timeline = client.get(f"/runs/{run_id}").text.split('id="timeline"', 1)[1]
            assert "message from web:admin, given to the model:" in timeline
            assert "use &lt;b&gt;staging&lt;/b&gt;" in timeline and "<b>staging" not in timeline
            ledger.finish(store, child, RunStatus.SUCCEEDED)
            ledger.finish(store, run_id, RunStatus.SUCCEEDED)
            assert f'action="/runs/{run_id}/say"' not in client.get(f"/runs/{run_id}").text
            late = client.post(f"/runs/{run_id}/say", data={"csrf": token, "message": "hi"}, follow_redirects=True)
            assert 'class="flash error"' in late.text and "not running" in late.text
            assert len(steers_of(store, run_id)) == 1
    finally:
        store.close()


FOLLOWUP_NOTE = '<script>document.title="pwned"</script> recheck <b>build</b> 42'


def ask_followups(site: Site, *whens: str) -> tuple[str, list[Any]]:
    """A real run of job ``later`` calling ``schedule_followup`` once per ``when`` (the note has
    HTML in it): its run id and the job's pending follow-ups, soonest first."""
    from runner.store.followups import pending

    calls = [call("schedule_followup", {"when": when, "note": FOLLOWUP_NOTE}) for when in whens]
    run_id = site.run_job("later", *calls, final("asked"))
    store = site.open_store()
    try:
        return run_id, pending(store, "later")
    finally:
        store.close()


def test_followups_listed_escaped_and_cancelled(site: Site, web: WebServer) -> None:
    """Issue 34.3: the jobs page and the overview list each pending follow-up (due time, job, the
    note escaped, the run that asked); Cancel checks CSRF and calls the store's ``cancel``."""
    from runner.store.followups import get, pending

    run_id, found = ask_followups(site, "2h", "3h")
    assert len(found) == 2
    first, second = found
    with httpx.Client(base_url=web.url, headers={"Origin": web.url}) as client:
        for path in ("/jobs", "/"):
            main = client.get(path).text.split("<main>", 1)[1]
            row = main.split(f'id="followup-{first.id}"', 1)[1].split("</tr>", 1)[0]
            assert f'href="/runs/{run_id}"' in row and ">later<" in row and first.due_at[:16].replace("T", " ") in row
            assert f'action="/followups/{first.id}/cancel"' in row
            assert "&lt;script&gt;document.title=" in row and "&lt;b&gt;build&lt;/b&gt;" in row
            assert "<script>document.title" not in main and "<b>build" not in main
            assert f'id="followup-{second.id}"' in main
        token = csrf_of(client.get("/jobs").text)
        assert client.post(f"/followups/{first.id}/cancel", data={}).status_code == 403
        assert client.post(f"/followups/{first.id}/cancel", data={"csrf": "wrong"}).status_code == 403
        store = site.open_store()
        try:
            assert [f.id for f in pending(store, "later")] == [first.id, second.id]  # refused: nothing changed
            res = client.post(f"/followups/{first.id}/cancel", data={"csrf": token, "back": "/jobs"})
            assert res.status_code == 303 and res.headers["location"].startswith("/jobs?msg=cancelled+follow-up")
            assert [f.id for f in pending(store, "later")] == [second.id]
            gone = get(store, first.id)
            assert (str(gone.status), gone.cancelled_by) == ("cancelled", "web:admin")
            page = client.get("/jobs").text
            assert f'id="followup-{first.id}"' not in page and f'id="followup-{second.id}"' in page
            again = client.post(f"/followups/{first.id}/cancel", data={"csrf": token}, follow_redirects=True)
            assert 'class="flash error"' in again.text and "already cancelled" in again.text
            unknown = client.post("/followups/fnope/cancel", data={"csrf": token}, follow_redirects=True)
            assert 'class="flash error"' in unknown.text and "no follow-up fnope" in unknown.text
            cli = site.cli("jobs", "followups", "list", "--json").stdout
            assert first.id not in cli and second.id in cli  # the CLI sees the same rows
            assert client.post(f"/followups/{second.id}/cancel", data={"csrf": token}).status_code == 303
            assert "No pending follow-ups." in client.get("/").text
        finally:
            store.close()


def test_read_only_token_cannot_cancel_a_followup(site: Site) -> None:
    from runner.store.followups import pending

    _, [waiting] = ask_followups(site, "5h")
    admin = site.cli("web", "token").stdout.strip()
    viewer = site.cli("web", "token", "--read-only").stdout.strip()
    port = free_port()
    server = start_web(site, bind=f"0.0.0.0:{port}")
    store = site.open_store()
    try:
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {viewer}"}) as client:
            page = client.get("/jobs").text
            assert f'id="followup-{waiting.id}"' in page  # a viewer sees it, with the button disabled
            refused = client.post(f"/followups/{waiting.id}/cancel", data={"csrf": csrf_of(page)})
            assert refused.status_code == 403 and "read-only" in refused.text
        assert [f.id for f in pending(store, "later")] == [waiting.id]
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}) as client:
            token = csrf_of(client.get("/jobs").text)
            assert client.post(f"/followups/{waiting.id}/cancel", data={"csrf": token}).status_code == 303
        assert pending(store, "later") == []
    finally:
        store.close()
        server.stop()
        (site.home / "web-token").unlink()
        (site.home / "web-token-readonly").unlink()


def test_the_run_page_gives_the_cached_share_of_input_tokens(site: Site, web: WebServer) -> None:
    from runner.testing import Reply

    run_id = site.run_job("hello", Reply(content="cached", usage=(1000, 10), cached=410))
    page = httpx.get(f"{web.url}/runs/{run_id}").text
    cost = re.search(r'<dd id="run-cost">(.*?)</dd>', page)
    assert cost is not None and cost.group(1).endswith("(41% of input tokens cached)")
