"""Cloud metadata stays out of reach of ``web_fetch`` even with ``web: {allow_private: true}``
(issue 29): on the first hop and on every redirect hop, by address (169.254.169.254 and the rest
of 169.254/16, the other clouds' addresses, inside IPv6 forms) and by name. Real HTTP servers on
127.0.0.1 redirect; where a metadata name must be reachable for the test to mean anything, an
injected resolver sends it to a local "metadata" server holding a marker, which must never be read."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.backends.base import BackendContext
from runner.backends.local import LocalBackend
from runner.safety.result import ApprovalResult
from runner.safety.ssrf import METADATA_ADDRESSES, METADATA_HOSTS, Blocked, Target, WebPolicy, check_url
from runner.tools.context import ToolContext
from runner.tools.web import Response, fetch, host_get, web_fetch
from tests.pages import Server, pages

MARKER = b"aws-secret-access-key-MARKER-5e1f"
OPEN = WebPolicy(allow_private=True)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Two real servers: [0] redirects wherever a test says, [1] is "metadata" (serves the marker)."""
    with pages() as hop, pages() as metadata:
        metadata.routes["/latest/meta-data/iam"] = (200, {}, MARKER)
        yield [hop, metadata]


@dataclass
class Recorder:
    """A getter that really fetches (``host_get``) and records every address it was sent to."""

    addresses: list[str] = field(default_factory=list)

    def __call__(self, target: Target) -> Response:
        self.addresses.append(target.address)
        return host_get(target)


def _resolver(metadata: Server) -> Any:
    """Public-looking DNS for the test: metadata names reach the local metadata server."""

    def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"] if host in METADATA_HOSTS or host == "localhost" else ["93.184.215.14"]

    return resolve


@pytest.mark.parametrize("name", sorted(METADATA_HOSTS))
def test_a_redirect_to_a_metadata_name_is_not_followed_with_allow_private(servers, name):
    hop, metadata = servers
    hop.routes["/go"] = (302, {"Location": f"http://{name}:{metadata.port}/latest/meta-data/iam"}, b"")
    get = Recorder()
    with pytest.raises(Blocked, match=f"{name} is a cloud metadata host"):
        fetch(hop.url("/go"), OPEN, get, _resolver(metadata))
    assert hop.paths == ["/go"]  # the first hop was fetched...
    assert metadata.paths == [] and get.addresses == ["127.0.0.1"]  # ...the metadata hop never was


@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://169.254.170.2/v2/credentials/x",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",  # NAT64 of 169.254.169.254
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
        "http://169.254.1.2/",
        "http://2852039166/latest/meta-data/",  # 169.254.169.254 as one number: the resolver says so
    ],
)
def test_a_redirect_to_a_metadata_address_is_not_followed_with_allow_private(servers, location):
    hop = servers[0]
    hop.routes["/go"] = (307, {"Location": location}, b"")
    get = Recorder()
    started = time.monotonic()
    with pytest.raises(
        Blocked, match=r"(cloud metadata|where cloud metadata lives).*refused even with web\.allow_private"
    ):
        fetch(hop.url("/go"), OPEN, get, lambda host, port: ["169.254.169.254"])
    assert get.addresses == ["127.0.0.1"]  # no connection was tried past the redirect
    assert time.monotonic() - started < 5


def test_the_first_hop_is_refused_too(servers):
    get = Recorder()
    for url in ("http://169.254.169.254/latest/meta-data/", f"http://metadata.google.internal:{servers[1].port}/"):
        with pytest.raises(Blocked, match="refused even with web.allow_private"):
            fetch(url, OPEN, get, _resolver(servers[1]))
    with pytest.raises(Blocked, match="169.254.169.254, a cloud metadata address"):
        fetch("http://imds.attacker.example/", OPEN, get, lambda h, p: ["169.254.169.254"])
    assert get.addresses == [] and servers[1].paths == []


def test_allow_private_still_opens_loopback_and_private_networks(servers):
    hop, other = servers
    hop.routes["/go"] = (302, {"Location": other.url("/latest/meta-data/iam")}, b"")
    assert fetch(hop.url("/go"), OPEN, host_get).body == MARKER  # loopback -> loopback: the job's choice
    for address in ("10.1.2.3", "192.168.1.1", "172.16.0.1", "fd12::1", "127.0.0.1", "fe80::1"):
        assert check_url("http://internal.example/", OPEN, lambda h, p, a=address: [a]).address == address


def test_a_run_with_allow_private_is_told_no_and_the_marker_never_reaches_the_model(project, fake, servers):
    """End to end: a scripted model in a job with ``web: {allow_private: true}`` fetches a local
    page that redirects to 169.254.169.254; the model hears the refusal and the approvals audit
    has it."""
    from runner.testing import call, final

    hop = servers[0]
    hop.routes["/go"] = (302, {"Location": "http://169.254.169.254/latest/meta-data/iam"}, b"")
    fake.add(call("web_fetch", {"url": hop.url("/go")}), final("done"))
    project.write_jobs("jobs:\n  w:\n    prompt: go\n    toolsets: [web]\n    web: {allow_private: true}\n")
    res = project.cli("run-job", "w")
    assert res.exit_code == 0, res.output
    [tool_msg] = [m for m in fake.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert tool_msg["content"].startswith(
        "blocked: 169.254.169.254 resolves to 169.254.169.254, a cloud metadata address (refused even with"
    )
    assert hop.paths == ["/go"]
    with project.db() as db:
        rows = db.execute("SELECT command, level, policy, decision FROM approvals").fetchall()
    assert [tuple(r) for r in rows] == [(f"web_fetch {hop.url('/go')}", "blocked", "web", "denied")]


def test_the_tool_on_a_local_backend_refuses_a_redirect_to_metadata(tmp_path: Path, servers):
    hop = servers[0]
    hop.routes["/go"] = (301, {"Location": "http://169.254.169.254/"}, b"")
    work = tmp_path / "work"
    work.mkdir()
    backend = LocalBackend(BackendContext(workdir=work, home=tmp_path))
    try:
        asked: list[str] = []
        ctx = ToolContext(backend=backend, web=OPEN, approve=lambda c: asked.append(c) or ApprovalResult(True, ""))
        result = web_fetch({"url": hop.url("/go")}, ctx)
    finally:
        backend.close()
    assert asked == [f"web_fetch {hop.url('/go')}"]  # the gate let the fetch go...
    assert result.failed and "a cloud metadata address" in result.text  # ...the policy stopped the hop
    assert hop.paths == ["/go"]


METADATA_V4 = st.one_of(
    st.ip_addresses(network="169.254.0.0/16"),
    st.sampled_from(sorted(a for a in METADATA_ADDRESSES if a.version == 4)),
)


@given(METADATA_V4, st.sampled_from(["{}", "::ffff:{}", "nat64", "6to4"]))
def test_property_no_form_of_a_metadata_address_passes_allow_private(address, form):
    import ipaddress

    v4 = int(address)
    text = {
        "{}": str(address),
        "::ffff:{}": f"::ffff:{address}",
        "nat64": str(ipaddress.IPv6Address((0x64FF9B << 96) | v4)),
        "6to4": str(ipaddress.IPv6Address((0x2002 << 112) | (v4 << 80) | 1)),
    }[form]
    with pytest.raises(Blocked, match="refused even with web.allow_private"):
        check_url("http://h.example/", OPEN, lambda h, p: ["10.0.0.1", text])
