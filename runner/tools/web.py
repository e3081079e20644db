"""``web_fetch`` (toolset ``web``, off unless a job lists it): GET a URL, HTML reduced to text."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from backends.base import truncate_text
from runner.tools import Registry, ToolError, ToolResult
from runner.tools.context import ToolContext

FETCH_TIMEOUT = 20.0
MAX_BYTES = 2 * 1024 * 1024
SKIP_TAGS = {"script", "style", "noscript", "svg", "head", "template"}
BLOCK_TAGS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre", "table"}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in SKIP_TAGS:
            self.skip += 1
        elif tag in BLOCK_TAGS:
            self.parts.append("\n")
        if tag == "li":
            self.parts.append("- ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in SKIP_TAGS and self.skip:
            self.skip -= 1
        elif tag in BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if not self.skip:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    text = re.sub(r"\n\s*\n\s*", "\n\n", text).strip()
    title = " ".join(parser.title.split())
    return f"# {title}\n\n{text}" if title else text


def web_fetch(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    import httpx

    url = args.get("url")
    if not isinstance(url, str) or not re.match(r"^https?://", url):
        raise ToolError("'url' must be an http:// or https:// URL")
    try:
        with httpx.stream(
            "GET", url, timeout=FETCH_TIMEOUT, follow_redirects=True, headers={"User-Agent": "runner-web-fetch/0.1"}
        ) as response:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size >= MAX_BYTES:
                    break
            body = b"".join(chunks)[:MAX_BYTES]
            status = response.status_code
            ctype = response.headers.get("content-type", "")
            encoding = response.encoding or "utf-8"
    except httpx.HTTPError as exc:
        raise ToolError(f"fetch failed: {type(exc).__name__}: {exc}") from None
    text = body.decode(encoding, errors="replace")
    if "html" in ctype or text.lstrip()[:15].lower().startswith(("<!doctype html", "<html")):
        text = html_to_text(text)
    cut = " (truncated at 2 MB)" if len(body) >= MAX_BYTES else ""
    return ToolResult(f"HTTP {status} {ctype}{cut}\n\n" + truncate_text(text, ctx.output_chars))


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
    )(web_fetch)
