"""``web_fetch`` (toolset ``web``, off unless a job lists it): GET a URL, HTML reduced to text.

Where the fetch happens follows the job's backend. With Docker it runs inside the container
(``curl`` or busybox ``wget`` there), so ``network: none`` means no fetch and the tool is not
offered. On the local and SSH backends it runs on the runner host after the approval gate has
seen ``web_fetch URL``. Either way every hop (the URL and each redirect, at most
``MAX_REDIRECTS``) is checked against the job's ``web:`` policy on the address it resolves to,
and the request goes to that checked address (see runner/safety/ssrf.py).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from runner.backends.base import truncate_text
from runner.events import Approval, Event
from runner.host.tls import ca_context
from runner.safety.approval import Decision
from runner.safety.redact import Redactor
from runner.safety.ssrf import Blocked, Resolver, Target, WebPolicy, check_url, system_resolver
from runner.store.approvals import audit_recorder
from runner.tools import Registry, ToolError, ToolResult
from runner.tools.context import ToolContext

if TYPE_CHECKING:
    import ssl

FETCH_TIMEOUT = 20.0
MAX_BYTES = 2 * 1024 * 1024
MAX_REDIRECTS = 5
REDIRECTS = {301, 302, 303, 307, 308}
USER_AGENT = "runner-web-fetch/0.1"
BLOCKED = "blocked: {reason}; find another way"
SKIP_TAGS = {"script", "style", "noscript", "svg", "head", "template"}
BLOCK_TAGS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre", "table"}


def html_to_text(html: str) -> str:
    from runner.tools._html import Text  # html.parser loads with the first page, not with every run

    parser = Text(SKIP_TAGS, BLOCK_TAGS)
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    text = re.sub(r"\n\s*\n\s*", "\n\n", text).strip()
    title = " ".join(parser.title.split())
    return f"# {title}\n\n{text}" if title else text


@dataclass(frozen=True)
class Response:
    """One hop's answer: status, headers (names lower-case), body (at most MAX_BYTES)."""

    status: int
    headers: dict[str, str]
    body: bytes
    url: str


Getter = Callable[[Target], Response]


def fetch(url: str, policy: WebPolicy, get: Getter, resolver: Resolver = system_resolver) -> Response:
    """GET ``url`` through ``get``, following redirects by hand; every hop checked first (Blocked)."""
    for _ in range(MAX_REDIRECTS + 1):
        target = check_url(url, policy, resolver)
        response = get(target)
        location = response.headers.get("location")
        if response.status not in REDIRECTS or not location:
            return response
        url = urljoin(url, location.strip())
    raise ToolError(f"more than {MAX_REDIRECTS} redirects; last one to {url}")


def _pinned(target: Target) -> tuple[str, str]:
    """(URL naming the checked address instead of the host, the Host header of the original URL)."""
    parts = urlsplit(target.url)
    ip = f"[{target.address}]" if ":" in target.address else target.address
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    host_header = host if target.port == default else f"{host}:{target.port}"
    url = urlunsplit((target.scheme, f"{ip}:{target.port}", parts.path or "/", parts.query, ""))
    return url, host_header


def host_get(target: Target, *, verify: ssl.SSLContext | bool = True) -> Response:
    """One GET from this machine to the checked address (Host header and TLS SNI name the host,
    and the certificate is checked against the host; no proxy from the environment, which would
    resolve the name again). ``verify``: httpx's certificate check (a context trusting a test CA)."""
    import httpx

    url, host_header = _pinned(target)
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    headers = {"Host": host_header, "User-Agent": USER_AGENT}
    if verify is True:
        verify = ca_context()
    try:
        with (
            httpx.Client(timeout=FETCH_TIMEOUT, follow_redirects=False, trust_env=False, verify=verify) as client,
            client.stream("GET", url, headers=headers, extensions=extensions) as response,
        ):
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size >= MAX_BYTES:
                    break
            answer = {k.lower(): v for k, v in response.headers.items()}
            return Response(response.status_code, answer, b"".join(chunks)[:MAX_BYTES], target.url)
    except httpx.HTTPError as exc:
        raise ToolError(f"fetch failed: {type(exc).__name__}: {exc}") from None


def backend_network(ctx: ToolContext) -> str | None:
    """The container network of a Docker backend (``none``, ``bridge``...); None for local and SSH."""
    spec = getattr(ctx.backend, "spec", None)
    network = getattr(spec, "network", None)
    return network if isinstance(network, str) else None


def offered(ctx: ToolContext) -> bool | str:
    if backend_network(ctx) == "none":
        return "the job's Docker backend has network: none, so nothing can be fetched"
    return True


def container_get(ctx: ToolContext, client: str) -> Getter:
    """A getter that runs each GET inside the job's container, to the checked address and
    without following redirects: with ``curl`` (``--resolve`` pins the address) or, for plain
    http:// in an image without curl (busybox), a raw HTTP/1.0 request through ``nc``."""

    def get(target: Target) -> Response:
        q = shlex.quote
        if client == "curl":
            pin = f"{target.host}:{target.port}:{target.address}"
            command = (
                f"curl -sS -i --max-time {int(FETCH_TIMEOUT)} -A {q(USER_AGENT)} --resolve {q(pin)} "
                f"-- {q(target.url)} | head -c {MAX_BYTES}"
            )
        elif target.scheme == "http":
            url, host_header = _pinned(target)
            parts = urlsplit(url)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            request = f"GET {path} HTTP/1.0\r\nHost: {host_header}\r\nUser-Agent: {USER_AGENT}\r\n\r\n"
            command = (
                f"printf %s {q(request)} | nc -w {int(FETCH_TIMEOUT)} {q(target.address)} {target.port} "
                f"| head -c {MAX_BYTES}"
            )
        else:
            raise ToolError("https inside the job's container needs curl in the image (it has only wget/nc)")
        result = ctx.backend.run(command, timeout=ctx.time_left(FETCH_TIMEOUT + 10))
        if not result.output.startswith("HTTP/"):
            raise ToolError(f"fetch failed inside the container: {result.output.strip()[:500] or 'no answer'}")
        return _parse_raw(result.output, target.url)

    return get


def container_client(ctx: ToolContext) -> str:
    """``curl`` when the container has it, else ``nc`` (busybox); ToolError when it has neither."""
    probe = "command -v curl >/dev/null 2>&1 && echo curl || { command -v nc >/dev/null 2>&1 && echo nc; }"
    found = ctx.backend.run(probe, timeout=ctx.time_left(30)).output.strip()
    if found not in ("curl", "nc"):
        raise ToolError("web_fetch needs curl (or nc for http://) inside the job's container")
    return found


def _parse_raw(raw: str, url: str) -> Response:
    """``curl -i`` output: status line, headers, blank line, body (1xx interim answers skipped)."""
    text = raw
    while True:
        head, sep, body = text.partition("\r\n\r\n")
        if not sep:
            head, sep, body = text.partition("\n\n")
        lines = head.splitlines()
        match = re.match(r"HTTP/\S+\s+(\d{3})", lines[0] if lines else "")
        if not match:
            raise ToolError(f"fetch failed inside the container: {raw.strip()[:500]}")
        status = int(match.group(1))
        if 100 <= status < 200 and body.startswith("HTTP/"):
            text = body
            continue
        headers = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if colon:
                headers[name.strip().lower()] = value.strip()
        return Response(status, headers, body.encode("utf-8"), url)


def refuse(ctx: ToolContext, url: str, reason: str) -> ToolResult:
    """The model hears ``blocked: ...``; the refusal is in the run's events and the approvals audit."""

    message = BLOCKED.format(reason=reason)
    decision = Decision(False, "blocked", (reason,), "web policy", message)
    if ctx.settings is not None and ctx.run_id:
        record = audit_recorder(ctx.settings.store, ctx.run_id, "web", ctx.emit, Redactor())
        record(f"web_fetch {url}", decision)
    else:
        ctx.emit(Event.APPROVAL, Approval(f"web_fetch {url}", "blocked", [reason], "denied"))
    return ToolResult(message, failed=True)


def web_fetch(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    url = args.get("url")
    if not isinstance(url, str) or not re.match(r"^https?://", url, re.I):
        raise ToolError("'url' must be an http:// or https:// URL")
    reason = offered(ctx)
    if reason is not True:
        return refuse(ctx, url, str(reason))
    if backend_network(ctx) is not None:
        get = container_get(ctx, container_client(ctx))
    else:
        approval = ctx.approve(f"web_fetch {shlex.quote(url)}")
        if not approval.allowed:
            return ToolResult(approval.message, failed=True)
        get = host_get
    try:
        response = fetch(url, ctx.web, get)
    except Blocked as exc:
        return refuse(ctx, url, str(exc))
    return ToolResult(_render(response, ctx.output_chars))


def _render(response: Response, output_chars: int) -> str:
    ctype = response.headers.get("content-type", "")
    match = re.search(r"charset=([\w.-]+)", ctype)
    encoding = match.group(1) if match else "utf-8"
    try:
        text = response.body.decode(encoding, errors="replace")
    except LookupError:
        text = response.body.decode("utf-8", errors="replace")
    if "html" in ctype or text.lstrip()[:15].lower().startswith(("<!doctype html", "<html")):
        text = html_to_text(text)
    cut = " (truncated at 2 MB)" if len(response.body) >= MAX_BYTES else ""
    return f"HTTP {response.status} {ctype}{cut}\n\n" + truncate_text(text, output_chars)


def register(registry: Registry) -> None:
    registry.tool(
        "web_fetch",
        "web",
        "Fetch a web page or file over HTTP(S) (GET). HTML is reduced to readable text.",
        {
            "type": "object",
            "properties": {"url": {"type": "string"}},
            "required": ["url"],
            "additionalProperties": False,
        },
        check_fn=offered,
        read_only=True,
    )(web_fetch)
