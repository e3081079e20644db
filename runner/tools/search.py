"""``web_search`` (toolset ``web``): a query to the search API in config.yaml's ``search:``.

Providers: SearXNG's JSON API (``GET {url}/search?q=...&format=json``, self-hostable, no key),
Brave Search and Tavily (key from ``api_key: env:NAME``). Rules, as for ``web_fetch``:

- the query goes through the run's approval gate as ``web_search QUERY`` first;
- the request is made from the runner host (the key never enters a job's container); a Docker
  backend with ``network: none`` gets no search (the tool is not offered);
- the endpoint is operator configuration, not the model's choice: it is resolved once and the
  request pinned to that address, and a private or loopback address is allowed (a self-hosted
  SearXNG), the job's ``web:`` lists do not apply to it, and redirects are not followed;
- the result URLs are only text for the model; fetching one is a ``web_fetch`` under the job's
  ``web:`` policy. Results are truncated like any tool result and redacted by the loop.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from runner.backends.base import truncate_text
from runner.config.refs import resolve_key
from runner.host.tls import ca_context
from runner.safety.ssrf import Blocked, WebPolicy, check_url
from runner.tools import Registry, ToolError, ToolResult
from runner.tools.context import ToolContext
from runner.tools.web import USER_AGENT, Response, _pinned, backend_network, refuse

if TYPE_CHECKING:
    from runner.config.machine import SearchConfig

DEFAULT_LIMIT = 5
MAX_LIMIT = 20
MAX_QUERY_CHARS = 400
SNIPPET_CHARS = 400
OPERATOR = WebPolicy(allow_private=True)  # the endpoint is the operator's, a private address is fine


@dataclass(frozen=True)
class Hit:
    title: str
    url: str
    snippet: str


@dataclass(frozen=True)
class Request:
    """One HTTP request to a provider: method, URL (with query string), headers, JSON body."""

    method: str
    url: str
    headers: dict[str, str]
    body: dict[str, Any] | None = None


def searxng(cfg: SearchConfig, query: str, limit: int, key: str | None) -> Request:
    return Request("GET", f"{cfg.endpoint}?{urlencode({'q': query, 'format': 'json'})}", {})


def brave(cfg: SearchConfig, query: str, limit: int, key: str | None) -> Request:
    headers = {"Accept": "application/json", "X-Subscription-Token": key or ""}
    return Request("GET", f"{cfg.endpoint}?{urlencode({'q': query, 'count': limit})}", headers)


def tavily(cfg: SearchConfig, query: str, limit: int, key: str | None) -> Request:
    body = {"query": query, "max_results": limit}
    return Request("POST", cfg.endpoint, {"Authorization": f"Bearer {key or ''}"}, body)


def parse(provider: str, data: Any) -> list[Hit]:
    """The hits in a provider's JSON answer (SearXNG and Tavily: ``results``; Brave: ``web.results``)."""
    if not isinstance(data, dict):
        raise ToolError("the search API answered with something other than a JSON object")
    items = (data.get("web") or {}).get("results") if provider == "brave" else data.get("results")
    hits = []
    for item in items or []:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        snippet = item.get("content") if provider != "brave" else item.get("description")
        hits.append(Hit(str(item.get("title") or ""), item["url"], " ".join(str(snippet or "").split())))
    return hits


BUILD: dict[str, Callable[[SearchConfig, str, int, str | None], Request]] = {
    "searxng": searxng,
    "brave": brave,
    "tavily": tavily,
}


def offered(ctx: ToolContext) -> bool | str:
    if backend_network(ctx) == "none":
        return "the job's Docker backend has network: none, so nothing can be searched"
    if ctx.settings is None or ctx.settings.config.search is None:
        return "no search API is configured (config.yaml search:)"
    return True


def web_search(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
        raise ToolError(f"'query' must be a non-empty text of at most {MAX_QUERY_CHARS} characters")
    limit = args.get("limit", DEFAULT_LIMIT)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise ToolError(f"'limit' must be a whole number from 1 to {MAX_LIMIT}")
    reason = offered(ctx)
    if reason is not True:
        raise ToolError(str(reason))
    assert ctx.settings is not None and ctx.settings.config.search is not None
    cfg = ctx.settings.config.search
    approval = ctx.approve(f"web_search {shlex.quote(query)}")
    if not approval.allowed:
        return ToolResult(approval.message, failed=True)
    key = _key(cfg)
    request = BUILD[cfg.provider](cfg, query.strip(), limit, key)
    try:
        data = send(request, cfg.timeout)
    except Blocked as exc:
        return refuse(ctx, cfg.endpoint, str(exc))
    except ToolError as exc:
        raise ToolError(_masked(str(exc), key)) from None
    hits = parse(cfg.provider, data)[:limit]
    return ToolResult(truncate_text(render(query, hits), ctx.output_chars))


def _key(cfg: SearchConfig) -> str | None:
    if cfg.api_key is None:
        return None

    label, value = resolve_key(cfg.api_key)
    if value is None:
        raise ToolError(f"the search API key is not set (config.yaml search.api_key: environment variable {label})")
    return value


def _masked(text: str, key: str | None) -> str:
    return text.replace(key, "***") if key else text


def send(request: Request, timeout: float) -> Any:
    """Make ``request`` to the address its host resolved to (checked once, then pinned); no redirects."""
    import httpx

    target = check_url(request.url, OPERATOR)
    url, host_header = _pinned(target)
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    headers = {"Host": host_header, "User-Agent": USER_AGENT, "Accept": "application/json", **request.headers}
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False, verify=ca_context()) as client:
            answer = client.request(request.method, url, headers=headers, json=request.body, extensions=extensions)
    except httpx.HTTPError as exc:
        raise ToolError(f"search failed: {type(exc).__name__}: {exc}") from None
    response = Response(answer.status_code, {}, answer.content[:4000], request.url)
    if answer.status_code != 200:
        raise ToolError(f"search failed: HTTP {response.status}: {response.body.decode('utf-8', 'replace')[:300]}")
    try:
        return answer.json()
    except ValueError:
        raise ToolError("search failed: the answer is not JSON (SearXNG needs format json enabled)") from None


def render(query: str, hits: list[Hit]) -> str:
    if not hits:
        return f"no results for {query!r}"
    lines = [f"{len(hits)} results for {query!r}:"]
    for i, hit in enumerate(hits, 1):
        snippet = hit.snippet if len(hit.snippet) <= SNIPPET_CHARS else hit.snippet[: SNIPPET_CHARS - 3] + "..."
        lines.append(f"\n{i}. {hit.title or '(no title)'}\n   {hit.url}" + (f"\n   {snippet}" if snippet else ""))
    return "\n".join(lines)


def register(registry: Registry) -> None:
    registry.tool(
        "web_search",
        "web",
        "Search the web; returns titles, URLs and snippets (read a page with web_fetch).",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {
                    "type": "integer",
                    "description": f"results wanted, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        check_fn=offered,
        read_only=True,
    )(web_search)
