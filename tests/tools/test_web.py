"""web_fetch: the approval gate, the SSRF guard on every redirect hop, address pinning, the
job's ``web:`` key, and the fetch inside a Docker container. Real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.backends.base import BackendContext
from runner.backends.local import LocalBackend
from runner.config.jobs import load_jobs
from runner.errors import ConfigError
from runner.events import encode
from runner.safety.result import ApprovalResult
from runner.safety.ssrf import Blocked, Target, WebPolicy, address_problem, check_url
from runner.tools import ToolError, discover
from runner.tools.context import ToolContext
from runner.tools.web import MAX_REDIRECTS, fetch, host_get, web_fetch
from tests.pages import Server, pages

DOCKER_IMAGE = os.environ.get("RUNNER_TEST_DOCKER_IMAGE", "runner-test:busybox")
@pytest.fixture
def serve() -> Iterator[Callable[[], Server]]:
    """``serve()`` starts a page server (tests/pages.py), stopped after the test."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(pages())

@dataclass
class Gate:
    """Records what the tool asked the approval gate (a ToolContext.approve callable)."""

    allow: bool = True
    asked: list[str] = field(default_factory=list)

    def __call__(self, command: str) -> ApprovalResult:
        self.asked.append(command)
        return ApprovalResult(self.allow, "" if self.allow else "blocked: not approved; find another way")


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalBackend]:
    work = tmp_path / "work"
    work.mkdir()
    backend = LocalBackend(BackendContext(workdir=work, home=tmp_path))
    yield backend
    backend.close()


def make_ctx(backend: Any, *, web: WebPolicy = WebPolicy(), gate: Gate | None = None) -> tuple[ToolContext, list]:
    events: list[tuple[str, dict[str, Any]]] = []
    ctx = ToolContext(
        backend=backend, approve=gate or Gate(), web=web, emit=lambda kind, data: events.append((kind, encode(data)))
    )
    return ctx, events


# -- the guard on a local backend -----------------------------------------------------------
def test_loopback_is_refused_by_default_and_nothing_is_sent(local, serve):
    srv = serve()
    ctx, events = make_ctx(local)
    result = web_fetch({"url": srv.url()}, ctx)
    assert result.failed
    assert result.text.startswith("blocked: 127.0.0.1 resolves to 127.0.0.1, a loopback address")
    assert result.text.endswith("; find another way")
    assert srv.requests == []
    assert [(k, d["level"], d["decision"]) for k, d in events] == [("approval", "blocked", "denied")]


def test_localhost_name_is_refused_on_its_resolved_address(local, serve):
    srv = serve()
    ctx, _ = make_ctx(local)
    result = web_fetch({"url": srv.url(host="localhost")}, ctx)
    assert result.failed and "localhost resolves to" in result.text and "loopback" in result.text
    assert srv.requests == []


def test_allow_private_lets_the_job_fetch_loopback_through_the_gate(local, serve):
    srv = serve()
    gate = Gate()
    ctx, _ = make_ctx(local, web=WebPolicy(allow_private=True), gate=gate)
    result = web_fetch({"url": srv.url("/page?a=1")}, ctx)
    assert not result.failed
    assert result.text.startswith("HTTP 200") and "hello from the server" in result.text
    assert gate.asked == [f"web_fetch '{srv.url('/page?a=1')}'"]
    assert srv.requests[0]["path"] == "/page?a=1"


def test_the_approval_gate_can_refuse_the_fetch(local, serve):
    srv = serve()
    ctx, _ = make_ctx(local, web=WebPolicy(allow_private=True), gate=Gate(allow=False))
    result = web_fetch({"url": srv.url()}, ctx)
    assert result.failed and result.text == "blocked: not approved; find another way"
    assert srv.requests == []


def test_every_redirect_hop_is_checked_again(local, serve):
    """A -> B where B is a host on the deny list: A answers, B never sees a request."""
    a, b = serve(), serve()
    a.routes["/go"] = (302, {"Location": b.url("/secret", host="localhost")}, b"")
    ctx, events = make_ctx(local, web=WebPolicy(allow_private=True, deny_domains=("localhost",)))
    result = web_fetch({"url": a.url("/go")}, ctx)
    assert result.failed and result.text.startswith("blocked: localhost is on the job's web.deny_domains list")
    assert [r["path"] for r in a.requests] == ["/go"] and b.requests == []
    assert events[-1][1]["level"] == "blocked"


def test_a_public_first_hop_redirecting_to_loopback_is_refused(serve):
    """The first hop's name resolves (through an injected resolver standing in for public DNS) to
    a public address; the getter really connects to the local server for that one name. The
    server's real redirect to 127.0.0.1 must then be refused before any request is sent."""
    first, inner = serve(), serve()
    first.routes["/"] = (301, {"Location": inner.url("/admin")}, b"")

    def resolver(host: str, port: int) -> list[str]:
        assert host == "public.example"
        return ["93.184.215.14"]

    def get(target: Target) -> Any:
        assert target.host == "public.example" and target.address == "93.184.215.14"
        local_target = Target(first.url(), "http", "127.0.0.1", first.port, "127.0.0.1")
        return host_get(local_target)

    with pytest.raises(Blocked, match=r"127\.0\.0\.1 resolves to 127\.0\.0\.1, a loopback address"):
        fetch(f"http://public.example:{first.port}/", WebPolicy(), get, resolver)
    assert len(first.requests) == 1 and inner.requests == []


def test_the_request_goes_to_the_address_that_was_checked(serve):
    """DNS answers differently the second time (rebinding): the hop was checked and pinned on the
    first answer, and the Host header still names the host."""
    srv = serve()
    answers = iter([["127.0.0.1"], ["10.255.255.1"]])
    calls: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers)

    response = fetch(f"http://rebind.test:{srv.port}/x", WebPolicy(allow_private=True), host_get, resolver)
    assert response.status == 200 and calls == ["rebind.test"]
    assert srv.requests == [{"path": "/x", "host": f"rebind.test:{srv.port}", "version": "HTTP/1.1"}]


def test_redirects_are_capped(local, serve):
    srv = serve()
    srv.routes["/loop"] = (302, {"Location": "/loop"}, b"")
    ctx, _ = make_ctx(local, web=WebPolicy(allow_private=True))
    with pytest.raises(ToolError, match=f"more than {MAX_REDIRECTS} redirects"):
        web_fetch({"url": srv.url("/loop")}, ctx)
    assert len(srv.requests) == MAX_REDIRECTS + 1


def test_domain_lists_match_by_suffix():
    policy = WebPolicy(allow_private=True, allow_domains=("example.com",), deny_domains=("bad.example.com",))
    resolve = lambda host, port: ["127.0.0.1"]  # noqa: E731
    assert check_url("http://api.example.com/", policy, resolve).address == "127.0.0.1"
    assert check_url("http://example.com./", policy, resolve).host == "example.com"
    for url, why in [
        ("http://x.bad.example.com/", "deny_domains"),
        ("http://notexample.com/", "allow_domains"),
        ("http://example.com.evil.net/", "allow_domains"),
    ]:
        with pytest.raises(Blocked, match=why):
            check_url(url, policy, resolve)


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        ("169.254.169.254", "cloud metadata"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "private"),
        ("fe80::1", "link-local"),
        ("169.254.1.1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "reserved"),
        ("64:ff9b::a00:1", "private address \\(embedded"),
        ("2002:a00:1::1", "private address \\(embedded"),
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "private"),
    ],
)
def test_non_public_answers_are_refused(answer, what):
    with pytest.raises(Blocked, match=what):
        check_url("https://innocent.example/", WebPolicy(), lambda host, port: ["93.184.215.14", answer])
    if answer.startswith("169.254."):  # cloud metadata: refused even with allow_private (tests/safety)
        with pytest.raises(Blocked, match="refused even with web.allow_private"):
            check_url("https://x.example/", WebPolicy(allow_private=True), lambda h, p: [answer])
        return
    allowed = check_url("https://x.example/", WebPolicy(allow_private=True), lambda h, p: [answer])
    assert ipaddress.ip_address(allowed.address) == ipaddress.ip_address(answer)


def test_metadata_names_and_bad_urls_are_refused():
    public = lambda host, port: ["93.184.215.14"]  # noqa: E731
    for url, why in [
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata host"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata address"),
        ("ftp://example.com/", "only http"),
        ("http://exa mple.com/", "whitespace"),
        ("http://example.com/\r\nX: y", "control characters"),
        ("http://[::1/", "invalid URL"),
    ]:
        with pytest.raises(Blocked, match=why):
            check_url(url, WebPolicy(), public)


NON_PUBLIC = ["10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "fe80::/10"]


@given(st.one_of(*(st.ip_addresses(network=net) for net in NON_PUBLIC)))
def test_private_loopback_and_link_local_ranges_never_pass(address):
    with pytest.raises(Blocked):
        check_url("http://h.example/", WebPolicy(), lambda h, p: [str(address)])
    mapped = f"::ffff:{address}" if address.version == 4 else str(address)
    with pytest.raises(Blocked):
        check_url("http://h.example/", WebPolicy(), lambda h, p: ["8.8.8.8", mapped])


@given(st.ip_addresses())
def test_whatever_passes_is_globally_routable(address):
    try:
        check_url("http://h.example/", WebPolicy(), lambda h, p: [str(address)])
    except Blocked:
        return
    embedded = address.ipv4_mapped if address.version == 6 else None
    assert address.is_global or (embedded is not None and embedded.is_global)


@given(st.ip_addresses(v=4))
def test_ipv4_mapped_v6_is_judged_as_its_v4_address(address):
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    assert (address_problem(mapped) is None) == (address_problem(address) is None)


# -- jobs.yaml ------------------------------------------------------------------------------
def test_jobs_yaml_web_key(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "defaults: {web: {deny_domains: [bad.example]}}\n"
        "jobs:\n"
        "  a: {prompt: hi, toolsets: [web], web: {allow_private: true, allow_domains: [example.com]}}\n"
        "  b: {prompt: hi}\n"
    )
    jobs = load_jobs(path).jobs
    assert jobs["a"].spec.web.policy() == WebPolicy(True, ("example.com",), ("bad.example",))
    assert jobs["b"].spec.web.policy() == WebPolicy(False, (), ("bad.example",))
    path.write_text("jobs:\n  a: {prompt: hi, web: {allow_privat: true, deny_domains: ['http://x/']}}\n")
    with pytest.raises(ConfigError) as info:
        load_jobs(path)
    text = str(info.value)
    assert "job a: web.allow_privat: unknown key" in text
    assert "job a: web.deny_domains: 'http://x/' is not a domain name" in text


# -- docker: the fetch happens inside the container ----------------------------------------
@pytest.fixture
def docker_backend(tmp_path: Path) -> Iterator[Callable[[str], Any]]:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        client.images.get(DOCKER_IMAGE)
        client.close()
    except Exception as exc:  # noqa: BLE001 - no daemon or no image: skip with the reason
        pytest.skip(f"docker not usable ({exc.__class__.__name__}); run .ci/services.sh")
    from runner.backends import resolve

    made: list[Any] = []

    def make(network: str) -> Any:
        work = tmp_path / f"work-{network}"
        work.mkdir()
        spec = {"type": "docker", "image": DOCKER_IMAGE, "network": network, "pull": "never"}
        backend = resolve(spec, ctx=BackendContext(workdir=work, home=tmp_path, job="web"))
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def test_docker_network_none_means_no_web_fetch(docker_backend, serve):
    srv = serve()
    ctx, _ = make_ctx(docker_backend("none"), web=WebPolicy(allow_private=True))
    registry = discover()
    assert [t.name for t in registry.select(["web", "files"], ctx) if t.toolset == "web"] == []
    assert registry.unavailable(["web"], ctx) == {
        "web_fetch": "the job's Docker backend has network: none, so nothing can be fetched",
        "web_search": "the job's Docker backend has network: none, so nothing can be searched",
    }
    result = web_fetch({"url": srv.url()}, ctx)
    assert result.failed and "network: none" in result.text and srv.requests == []


def test_docker_fetch_runs_inside_the_container(docker_backend, serve):
    """The busybox image has no curl: the request is a raw HTTP/1.0 GET from nc in the container
    (the runner host itself would speak HTTP/1.1), and the gate is not asked (the container is the sandbox)."""
    srv = serve()
    srv.routes["/r"] = (302, {"Location": "/final"}, b"")
    backend = docker_backend("host")
    gate = Gate(allow=False)
    ctx, _ = make_ctx(backend, web=WebPolicy(allow_private=True), gate=gate)
    result = web_fetch({"url": srv.url("/r")}, ctx)
    assert not result.failed, result.text
    assert "hello from the server" in result.text and gate.asked == []
    assert [(r["path"], r["version"]) for r in srv.requests] == [("/r", "HTTP/1.0"), ("/final", "HTTP/1.0")]
    ctx, _ = make_ctx(backend)
    blocked = web_fetch({"url": srv.url("/again")}, ctx)
    assert blocked.failed and "loopback" in blocked.text and len(srv.requests) == 2


def test_a_docker_run_with_no_network_is_told_why_web_fetch_is_missing(docker_backend, project, fake):
    import json

    from runner.testing import final

    fake.add(final("done"))
    project.write_jobs(
        "jobs:\n  w:\n    prompt: go\n    toolsets: [web, files]\n"
        f"    backend: {{type: docker, image: '{DOCKER_IMAGE}', pull: never}}\n"
    )
    res = project.cli("run-job", "w")
    assert res.exit_code == 0, res.output
    db = project.db()
    [payload] = [json.loads(p) for (p,) in db.execute("SELECT payload FROM run_events WHERE kind = 'prompt'")]
    assert "web_fetch" not in payload["tools"] and "read_file" in payload["tools"]
    assert payload["unavailable"] == {
        "web_fetch": "the job's Docker backend has network: none, so nothing can be fetched",
        "web_search": "the job's Docker backend has network: none, so nothing can be searched",
    }
    offered = [t["function"]["name"] for t in fake.requests[0]["body"]["tools"]]
    assert "web_fetch" not in offered


def test_https_goes_to_the_pinned_address_with_the_host_in_sni_and_certificate_check(tmp_path):
    """A real TLS server on 127.0.0.1 with a certificate for pinned.test only (made with openssl):
    the fetch connects to the checked address, and succeeds only because SNI and the certificate
    check use the host name, not the address."""
    import functools
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=pinned.test",
         "-addext", "subjectAltName=DNS:pinned.test", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    seen_sni: list[str | None] = []
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    server_ctx.sni_callback = lambda sock, name, ctx: seen_sni.append(name)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"host={self.headers.get('Host')}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.socket = server_ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        get = functools.partial(host_get, verify=trust)
        url = f"https://pinned.test:{srv.server_address[1]}/"
        response = fetch(url, WebPolicy(allow_private=True), get, lambda host, port: ["127.0.0.1"])
        assert response.status == 200 and response.body == f"host=pinned.test:{srv.server_address[1]}".encode()
        assert seen_sni == ["pinned.test"]
        with pytest.raises(ToolError, match="fetch failed"):  # a name the certificate does not hold
            fetch(
                url.replace("pinned.test", "other.test"), WebPolicy(allow_private=True), get, lambda h, p: ["127.0.0.1"]
            )
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_curl_getter_pins_the_address_and_leaves_redirects_to_the_checker(local, serve):
    """The command the Docker path runs when the image has curl, run here through the local
    backend (same shell command): --resolve sends it to the checked address, and curl does not
    follow the redirect itself (each hop is a separate, checked request)."""
    import shutil

    from runner.tools.web import container_get

    if shutil.which("curl") is None:
        pytest.skip("curl not installed")
    srv = serve()
    srv.routes["/r"] = (302, {"Location": "/final"}, b"")
    ctx, _ = make_ctx(local)
    url = f"http://pinned.test:{srv.port}/r"
    response = fetch(url, WebPolicy(allow_private=True), container_get(ctx, "curl"), lambda h, p: ["127.0.0.1"])
    assert response.status == 200 and b"hello from the server" in response.body
    assert [(r["path"], r["host"]) for r in srv.requests] == [
        ("/r", f"pinned.test:{srv.port}"),
        ("/final", f"pinned.test:{srv.port}"),
    ]
    with pytest.raises(Blocked, match="deny_domains"):
        fetch(url, WebPolicy(allow_private=True, deny_domains=("pinned.test",)), container_get(ctx, "curl"))


def test_a_run_refusing_a_fetch_tells_the_model_and_writes_an_approvals_row(project, fake, serve):
    import json

    from runner.testing import call, final

    srv = serve()
    fake.add(call("web_fetch", {"url": srv.url("/private")}), final("done"))
    project.write_jobs("jobs:\n  w:\n    prompt: go\n    toolsets: [web]\n")
    res = project.cli("run-job", "w")
    assert res.exit_code == 0, res.output
    [tool_msg] = [m for m in fake.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert tool_msg["content"].startswith("blocked: 127.0.0.1 resolves to 127.0.0.1, a loopback address")
    assert srv.requests == []
    db = project.db()
    rows = db.execute("SELECT command, level, reasons, policy, decision, decided_by FROM approvals").fetchall()
    assert [(r[0], r[1], r[3], r[4], r[5]) for r in rows] == [
        (f"web_fetch {srv.url('/private')}", "blocked", "web", "denied", "web policy")
    ]
    assert "loopback" in json.loads(rows[0][2])[0]
