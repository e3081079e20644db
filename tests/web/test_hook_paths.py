"""The auth middleware's one opening, ``POST /hooks/JOB``, and nothing next to it: over raw HTTP
(http.client sends a target as written: ``..``, ``%2F``, a trailing slash), against a real
``runner web`` with a token and one without. Every other method on ``/hooks/JOB`` and every other
path under or near ``/hooks/`` gets the dashboard's usual 401/403/405 and reaches no page or action."""

from __future__ import annotations

import http.client
import json
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote

import httpx
import pytest

pytest.importorskip("starlette", reason="runner web needs the web extra: pip install -e '.[web]'")

from runner.config.jobfile import JOB_NAME  # noqa: E402
from runner.safety.signature import hub_signature  # noqa: E402
from runner.testing import FakeOpenAI  # noqa: E402
from runner.web.app import is_open  # noqa: E402
from runner.web.auth import HOOK_PATH, is_hook_request  # noqa: E402
from tests.web.webhelp import JOBS, Site, WebServer, free_port, make_site, start_web  # noqa: E402

SECRET = "hook-paths-secret-Vb81qLx2"
HOOK_JOB = """
  deploy:
    prompt: "Deploy. {{ trigger.payload }}"
    toolsets: []
    overlap: allow
    triggers:
      - webhook: {secret: env:HOOK_PATHS_SECRET}
"""
BODY = b'{"ref": "main"}'
TOKEN_REQUIRED = "a token is required"
CROSS_SITE = "cross-site request refused"

# targets that must not count as ``POST /hooks/JOB``; several would land on an action if a server
# or proxy in front normalised them (``/jobs/deploy/pause``, ``/jobs/deploy/trigger``)
SNEAKY = [
    "/hooks/../jobs/deploy/pause",
    "/hooks/deploy/../../jobs/deploy/pause",
    "/hooks%2F..%2Fjobs%2Fdeploy%2Fpause",
    "/hooks/%2E%2E/jobs/deploy/trigger",
    "/hooks/..%2Fjobs%2Fdeploy%2Fpause",
    "/hooks/..",
    "/hooks/./deploy",
    "/hooks%2Fdeploy",
    "/hooks/%64eploy",
    "/hooks/deploy/",
    "/hooks/deploy/extra",
    "/hooks/",
    "/hooks",
    "/hooksX",
    "/hooksX/deploy",
    "//hooks/deploy",
    "/HOOKS/deploy",
    "/hooks/Deploy",
]
OTHER_METHODS = ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"]


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    text: str


def raw(port: int, method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"") -> Answer:
    """One request with ``target`` sent byte for byte (httpx would normalise ``..``)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        conn.request(method, target, body=body or None, headers=headers or {})
        res = conn.getresponse()
        return Answer(res.status, res.headers, res.read().decode("utf-8", "replace"))
    finally:
        conn.close()


def signed(body: bytes = BODY) -> dict[str, str]:
    """Headers of a correctly signed delivery to ``deploy``, which such a target must not use."""
    return {
        "Content-Type": "application/json",
        "X-Hub-Signature-256": hub_signature(SECRET.encode(), body),
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-GitHub-Event": "push",
    }


@dataclass(frozen=True)
class Servers:
    site: Site
    guarded: WebServer  # with a token (0.0.0.0)
    admin: str
    open: WebServer  # loopback, no token


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    fake = FakeOpenAI().start()
    site = make_site(tmp_path_factory.mktemp("hookpaths"), fake)
    (site.root / "jobs.yaml").write_text(textwrap.dedent(JOBS) + HOOK_JOB)
    env = {"HOOK_PATHS_SECRET": SECRET}
    started: list[WebServer] = []
    try:
        # the open server has a RUNNER_HOME of its own with no token (a running dashboard re-reads
        # its home's token files, so sharing the guarded one's would guard it too) and the same store
        open_home = site.home.parent / "open-home"
        open_home.mkdir(mode=0o700)
        store_env = {} if site.database_url else {"RUNNER_DATABASE_URL": f"sqlite:///{site.home / 'runner.db'}"}
        site.cli("jobs", "list")  # the store exists before the open server opens it by URL
        open_ = start_web(site, env={**env, **store_env, "RUNNER_HOME": str(open_home)})
        started.append(open_)
        admin = site.cli("web", "token").stdout.strip()
        guarded = start_web(site, bind=f"0.0.0.0:{free_port()}", env=env)
        started.append(guarded)
        yield Servers(site, guarded, admin, open_)
    finally:
        for server in started:
            server.stop()
        site.close()
        fake.stop()


def deploy_runs(site: Site) -> int:
    db = site.db()
    try:
        return int(db.execute("SELECT COUNT(*) FROM runs WHERE job = ?", ("deploy",)).fetchone()[0])
    finally:
        db.close()


def deploy_state(servers: Servers) -> str:
    page = httpx.get(f"{servers.guarded.url}/jobs", headers={"Authorization": f"Bearer {servers.admin}"})
    assert page.status_code == 200
    return page.text.split('id="job-deploy"', 1)[1].split("</tr>", 1)[0]


def test_the_hook_path_is_exactly_post_hooks_job() -> None:
    assert HOOK_PATH.pattern == "/hooks/" + JOB_NAME.pattern.strip("^$")  # the names jobs.yaml allows
    assert is_hook_request("POST", "/hooks/deploy", b"/hooks/deploy")
    assert is_hook_request("POST", "/hooks/deploy", None)
    for target in SNEAKY:
        assert not is_hook_request("POST", unquote(target), target.encode()), target
    for method in [*OTHER_METHODS, "post", "CONNECT"]:
        assert not is_hook_request(method, "/hooks/deploy", b"/hooks/deploy"), method
    assert not is_hook_request("POST", "/hooks/deploy", b"/hooks/deploy", root_path="/dash")
    assert not is_hook_request("POST", "/hooks/deploy\n", None)


def test_a_signed_post_needs_no_token_and_gets_no_cookie(servers: Servers) -> None:
    before = deploy_runs(servers.site)
    for server in (servers.guarded, servers.open):
        res = raw(server.port, "POST", "/hooks/deploy", signed(), BODY)
        assert res.status == 202, res.text
        assert json.loads(res.text)["id"]
        assert res.headers.get("Set-Cookie") is None
        unsigned = raw(server.port, "POST", "/hooks/deploy", {"Content-Type": "application/json"}, BODY)
        assert unsigned.status == 401 and "signature" in unsigned.text  # the hook's own answer
    assert deploy_runs(servers.site) == before + 2


@pytest.mark.parametrize("method", OTHER_METHODS)
def test_other_methods_on_a_hook_path_are_not_opened(servers: Servers, method: str) -> None:
    before = deploy_runs(servers.site)
    port = servers.guarded.port
    own = {"Origin": servers.guarded.url, **signed()}  # as the dashboard's own page would send it
    refused = raw(port, method, "/hooks/deploy", own, BODY)
    assert refused.status == 401, (method, refused.status, refused.text)
    if method != "HEAD":
        assert TOKEN_REQUIRED in refused.text
    assert raw(port, method, "/hooks/deploy", signed(), BODY).status in (401, 403)  # no Origin
    if method == "GET":
        login = raw(port, "GET", "/hooks/deploy", {"Accept": "text/html"})
        assert login.status == 303 and login.headers["Location"].startswith("/login")
    bearer = {"Authorization": f"Bearer {servers.admin}", **signed()}
    assert raw(port, method, "/hooks/deploy", bearer, BODY).status == 405  # past the token: POST only
    # no token configured (loopback): everyone is admin, and still only POST is routed
    assert raw(servers.open.port, method, "/hooks/deploy", signed(), BODY).status in (403, 405)
    assert deploy_runs(servers.site) == before


@pytest.mark.parametrize("target", SNEAKY)
def test_paths_near_hooks_get_the_dashboards_answer(servers: Servers, target: str) -> None:
    before = deploy_runs(servers.site)
    port = servers.guarded.port
    res = raw(port, "POST", target, {"Origin": servers.guarded.url, **signed()}, BODY)
    assert res.status == 401 and TOKEN_REQUIRED in res.text, (target, res.status, res.text[:200])
    assert res.headers.get("X-Frame-Options") == "DENY"  # the dashboard's middleware answered
    res = raw(port, "POST", target, signed(), BODY)  # no Origin: the cross-site rule comes first
    assert res.status == 403 and CROSS_SITE in res.text, (target, res.status, res.text[:200])
    # without a token (loopback), a post with no Origin is refused as cross-site
    res = raw(servers.open.port, "POST", target, signed(), BODY)
    assert res.status == 403 and CROSS_SITE in res.text, (target, res.status, res.text[:200])
    assert deploy_runs(servers.site) == before
    assert "paused" not in deploy_state(servers)


def test_a_bearer_post_to_a_sneaky_path_reaches_no_action(servers: Servers) -> None:
    """Past the token, the router does not normalise: ``/hooks/../jobs/deploy/pause`` is no route."""
    bearer = {"Authorization": f"Bearer {servers.admin}", **signed()}
    for target in SNEAKY[:5]:
        res = raw(servers.guarded.port, "POST", target, bearer, BODY)
        assert res.status == 404, (target, res.status, res.text[:200])
    assert "paused" not in deploy_state(servers)


@pytest.mark.parametrize("target", ["/loginX", "/login/../runs", "/login/", "/login%2F..%2Fruns", "/static/../runs"])
def test_only_the_login_page_itself_is_open(servers: Servers, target: str) -> None:
    """``/login`` is open by exact path (it used to be a prefix: ``/loginX`` skipped the role check)."""
    assert is_open("/login") and is_open("/static/style.css")
    res = raw(servers.guarded.port, "GET", target, {})
    assert res.status == 401 and TOKEN_REQUIRED in res.text, (target, res.status, res.text[:200])
    assert raw(servers.guarded.port, "GET", "/login", {}).status == 200
