"""Cross-site requests against the dashboard (issue 29): a page served on another loopback port
plants the CSRF cookie (cookies do not keep ports apart) and posts to the dashboard, directly or
through a 307 redirect (after which Chromium sends ``Origin: null``). In a real Chromium the
parked approval stays pending; the dashboard's own button still grants it. Plain HTTP: what a
state-changing request must carry (Origin the dashboard's own, or the token)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="runner web needs the web extra: pip install -e '.[web]'")
httpx = pytest.importorskip("httpx")

from runner.statuses import ApprovalState  # noqa: E402
from tests.web.webhelp import CHROMIUM, Site, WebServer, csrf_of, free_port, park_one, start_web  # noqa: E402

PLANTED = "planted-csrf-value-0123456789"


@dataclass(frozen=True)
class Evil:
    """Pages on other loopback ports: ``/direct`` posts to the dashboard; ``/redirect`` posts to a
    second port, which answers 307 to the dashboard (the browser re-posts the body there; the hop
    through a third origin is what makes Chromium send ``Origin: null``)."""

    url: str
    seen: list[str]


def _evil_handler(target: str, bounce: list[str], seen: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(f"GET {self.path}")
            action = target if self.path == "/direct" else f"{bounce[0]}/bounce"
            page = (
                "<!doctype html><html><body>"
                f"<form id=f method=post action='{action}'>"
                f"<input name=csrf value='{PLANTED}'><input name=back value='/approvals'></form>"
                "<script>document.getElementById('f').submit();</script></body></html>"
            ).encode()
            self.send_response(200)
            # cookies do not keep ports apart: this replaces the dashboard's (HttpOnly) CSRF cookie
            self.send_header("Set-Cookie", f"runner_csrf={PLANTED}; Path=/; HttpOnly; SameSite=Strict")
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def do_POST(self) -> None:
            seen.append(f"POST {self.path}")
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(307)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@contextmanager
def evil_site(web: WebServer, approval_id: str) -> Iterator[Evil]:
    seen: list[str] = []
    bounce: list[str] = []
    handler = _evil_handler(f"{web.url}/approvals/{approval_id}/grant", bounce, seen)
    servers = [ThreadingHTTPServer(("127.0.0.1", free_port()), handler) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    page, second = (f"http://127.0.0.1:{server.server_address[1]}" for server in servers)
    bounce.append(second)
    try:
        yield Evil(url=page, seen=seen)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def parked(site: Site) -> Iterator[Any]:
    from runner.store import ledger

    store = site.open_store()
    run_id, request = park_one(store)
    yield request
    ledger.finish(store, run_id, "succeeded")
    store.close()


def _state(site: Site, approval_id: str) -> ApprovalState:
    from runner.store.control import get_request

    store = site.open_store()
    try:
        return get_request(store, approval_id).status
    finally:
        store.close()


browser_only = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no {CHROMIUM} (apt-get install chromium)")


@pytest.mark.slow
@browser_only
@pytest.mark.parametrize("route", ["redirect", "direct"])
def test_a_page_on_another_loopback_port_cannot_grant_a_parked_approval(
    site: Site, web: WebServer, page: Any, parked: Any, route: str
) -> None:
    page.goto(f"{web.url}/approvals")  # the operator has the dashboard open: its CSRF cookie is set
    assert page.locator(f"#approval-{parked.id}").count() == 1
    responses: list[Any] = []
    page.on("response", lambda r: responses.append(r) if "/grant" in r.url else None)
    with evil_site(web, parked.id) as evil:
        page.goto(f"{evil.url}/{route}")
        page.wait_for_load_state("networkidle")
        hits = [r for r in responses if r.url.endswith(f"/approvals/{parked.id}/grant")]
        assert hits, (evil.seen, [r.url for r in responses])  # the browser did post to the dashboard
        assert hits[-1].status == 403
        if route == "redirect":
            assert "POST /bounce" in evil.seen
            assert hits[-1].request.all_headers().get("origin") == "null"  # what Chromium sends after the 307
    assert _state(site, parked.id) == ApprovalState.PENDING
    page.goto(f"{web.url}/approvals")  # and the operator's own button still works
    page.locator(f"#approval-{parked.id}").get_by_role("button", name="Approve").click()
    assert page.locator(f"#approval-{parked.id}").count() == 0
    assert _state(site, parked.id) == ApprovalState.GRANTED


def test_a_post_without_origin_or_with_origin_null_needs_the_token(site: Site, web: WebServer, parked: Any) -> None:
    with httpx.Client(base_url=web.url) as client:
        token = csrf_of(client.get("/approvals").text)
        grant = f"/approvals/{parked.id}/grant"
        for headers in ({}, {"Origin": "null"}, {"Origin": "http://127.0.0.1:1"}, {"Origin": "file://"}):
            res = client.post(grant, data={"csrf": token}, headers=headers)
            assert res.status_code == 403, (headers, res.text)
        assert _state(site, parked.id) == ApprovalState.PENDING
        res = client.post(grant, data={"csrf": token}, headers={"Origin": web.url})
        assert res.status_code == 303, res.text
    assert _state(site, parked.id) == ApprovalState.GRANTED


def test_the_refusal_names_what_to_send(web: WebServer) -> None:
    with httpx.Client(base_url=web.url) as client:
        res = client.post("/jobs/nightly/pause", data={"csrf": csrf_of(client.get("/jobs").text)})
    assert res.status_code == 403
    assert "Origin" in res.text and "Authorization: Bearer" in res.text


def test_with_a_token_the_bearer_header_stands_in_for_the_origin(site: Site, parked: Any) -> None:
    admin = site.cli("web", "token").stdout.strip()
    server = start_web(site, bind=f"127.0.0.1:{free_port()}")
    try:
        login = f"http://127.0.0.1:{server.port}"
        grant = f"/approvals/{parked.id}/grant"
        with httpx.Client(base_url=login) as client:  # a browser session (cookie), no Origin: refused
            token = csrf_of(client.get("/login").text)
            client.post("/login", data={"csrf": token, "token": admin}, headers={"Origin": login})
            assert client.post(grant, data={"csrf": token}).status_code == 403
            assert client.post(grant, data={"csrf": token}, headers={"Origin": "null"}).status_code == 403
        assert _state(site, parked.id) == ApprovalState.PENDING
        bearer = {"Authorization": f"Bearer {admin}"}
        with httpx.Client(base_url=login, headers=bearer) as client:
            token = csrf_of(client.get("/approvals").text)
            wrong = client.post(grant, data={"csrf": token}, headers={"Origin": "http://evil.example"})
            assert wrong.status_code == 403  # a present Origin must be the dashboard's, token or not
            assert client.post(grant, data={"csrf": token}).status_code == 303
        assert _state(site, parked.id) == ApprovalState.GRANTED
    finally:
        server.stop()
        (site.home / "web-token").unlink()


@pytest.mark.parametrize(
    "origin,host,scheme,same",
    [
        ("http://127.0.0.1:9119", "127.0.0.1:9119", "http", True),
        ("HTTP://LocalHost:9119", "localhost:9119", "http", True),
        ("https://dash.example.com", "dash.example.com", "http", True),  # TLS proxy in front
        ("http://127.0.0.1:9120", "127.0.0.1:9119", "http", False),  # another port
        ("http://127.0.0.1", "127.0.0.1:9119", "http", False),
        ("http://dash.example.com", "dash.example.com", "https", False),  # downgraded
        ("http://127.0.0.1:9119.evil.example", "127.0.0.1:9119", "http", False),
        ("127.0.0.1:9119", "127.0.0.1:9119", "http", False),  # no scheme
        ("ftp://127.0.0.1:9119", "127.0.0.1:9119", "http", False),
        ("http://", "", "http", False),
    ],
)
def test_same_origin(origin: str, host: str, scheme: str, same: bool) -> None:
    from runner.web.auth import same_origin

    assert same_origin(origin, host=host, scheme=scheme) is same


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS"])
def test_reads_need_no_origin(method: str) -> None:
    from runner.web.auth import cross_site_refusal

    assert cross_site_refusal(method, None, host="127.0.0.1:1", scheme="http", bearer=False) is None
    assert cross_site_refusal(method.lower(), "null", host="127.0.0.1:1", scheme="http", bearer=False) is None


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "post"])
def test_every_writing_method_needs_an_origin_or_the_bearer(method: str) -> None:
    from runner.web.auth import cross_site_refusal

    host = "127.0.0.1:1"
    assert cross_site_refusal(method, None, host=host, scheme="http", bearer=False)
    assert cross_site_refusal(method, "null", host=host, scheme="http", bearer=False)
    assert cross_site_refusal(method, None, host=host, scheme="http", bearer=True) is None
    assert cross_site_refusal(method, "http://evil.example", host=host, scheme="http", bearer=True)
    assert cross_site_refusal(method, f"http://{host}", host=host, scheme="http", bearer=False) is None
