"""The sink syntax of ``deliver:``, ``on_failure:`` (jobs.yaml) and ``alerts:`` (config.yaml).

A sink is a string (``file``, ``file:PATH``, ``stdout``, ``webhook:URL``, ``slack:URL``,
``discord:URL``, ``telegram:CHAT_ID``, ``email:ADDRESS``) or a mapping
``{webhook: {url, headers, secret, template}}``. Any URL, header value or secret may be
``env:NAME``, read when the sink sends. ``label`` is how a sink is shown anywhere it is written
down (ledger, ``runs show``, logs): the secret parts of URLs masked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

URL_KINDS = ("webhook", "slack", "discord")
KINDS = ("file", "stdout", *URL_KINDS, "telegram", "email")
ENV_REF = re.compile(r"^env:[A-Za-z_][A-Za-z0-9_]*$")
_URL = re.compile(r"^https?://[^\s/]+[^\s]*$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_CHAT_ID = re.compile(r"^(-?\d+|@[A-Za-z0-9_]{5,})$")
HELP = (
    "use file, file:PATH, stdout, webhook:URL, slack:URL, discord:URL, telegram:CHAT_ID, email:ADDRESS "
    "or {webhook: {url, headers, secret, template}}; a URL may be env:NAME"
)
_WEBHOOK_KEYS = {"url", "headers", "secret", "template"}


@dataclass(frozen=True)
class Sink:
    """One parsed sink; ``target`` is the URL, path, chat id or address (maybe ``env:NAME``)."""

    kind: str
    target: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=())
    secret: str | None = None
    template: str | None = None

    @property
    def label(self) -> str:
        return label(self)


def _check_target(kind: str, target: str) -> None:
    if kind in URL_KINDS and not (ENV_REF.match(target) or _URL.match(target)):
        raise ValueError(f"{kind}: {target!r} is not an http(s) URL or env:NAME")
    if kind == "telegram" and not (_CHAT_ID.match(target) or ENV_REF.match(target)):
        raise ValueError(f"telegram: {target!r} is not a chat id (a number or @channel) or env:NAME")
    if kind == "email" and not _EMAIL.match(target):
        raise ValueError(f"email: {target!r} is not an email address")
    if kind == "file" and not target:
        raise ValueError("file: needs a path (or plain 'file')")


def _from_mapping(value: dict[str, Any]) -> dict[str, Any]:
    if list(value) != ["webhook"] or not isinstance(value["webhook"], dict):
        raise ValueError(f"invalid sink {value!r} ({HELP})")
    body = value["webhook"]
    unknown = set(body) - _WEBHOOK_KEYS
    if unknown:
        raise ValueError(f"webhook: unknown key(s) {', '.join(sorted(unknown))} (takes url, headers, secret, template)")
    url = body.get("url")
    if not isinstance(url, str):
        raise ValueError("webhook: url is required")
    _check_target("webhook", url)
    headers = body.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise ValueError("webhook: headers must map names to strings")
    for key in ("secret", "template"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise ValueError(f"webhook: {key} must be a string")
    return {"webhook": {k: body[k] for k in ("url", "headers", "secret", "template") if body.get(k) is not None}}


def check_sink(value: Any) -> str | dict[str, Any]:
    """Validate one sink as written; return it normalised (pydantic BeforeValidator)."""
    if isinstance(value, dict):
        return _from_mapping(value)
    if not isinstance(value, str):
        raise ValueError(f"invalid sink {value!r} ({HELP})")
    if value in ("file", "stdout"):
        return value
    kind, sep, target = value.partition(":")
    if not sep or kind not in KINDS or kind == "stdout":
        raise ValueError(f"invalid sink {value!r} ({HELP})")
    _check_target(kind, target)
    return value


def parse_sink(value: str | dict[str, Any]) -> Sink:
    """A validated sink (``check_sink``'s output) as a ``Sink``."""
    if isinstance(value, dict):
        body = value["webhook"]
        headers = tuple(sorted((body.get("headers") or {}).items()))
        return Sink("webhook", body["url"], headers, body.get("secret"), body.get("template"))
    if value in ("file", "stdout"):
        return Sink(value)
    kind, _, target = value.partition(":")
    return Sink(kind, target)


def mask_url(url: str, *, hide_path: bool = False) -> str:
    """``url`` without ``user:pass@``, query, fragment and any path past its first segment; with
    ``hide_path`` without its path at all (Slack and Discord keep their secret there)."""
    if ENV_REF.match(url):
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    if parts.username or parts.password:
        host = "***@" + host
    path = parts.path
    if hide_path and path.strip("/"):
        path = "/***"
    elif path.count("/") > 1 and path.strip("/").count("/"):  # webhook URLs often carry a secret past the first segment
        path = "/" + path.strip("/").split("/", 1)[0] + "/***"
    tail = "?***" if parts.query else ""
    return f"{parts.scheme}://{host}{path}{tail}"


def label(sink: Sink | str | dict[str, Any]) -> str:
    """How ``sink`` is shown: Slack/Discord webhook paths (their secret), credentials and queries masked."""
    s = sink if isinstance(sink, Sink) else parse_sink(sink)
    if s.kind in URL_KINDS:
        return f"{s.kind}:{mask_url(s.target, hide_path=s.kind != 'webhook')}"
    return f"{s.kind}:{s.target}" if s.target else s.kind


def mask_sink_label(text: str) -> str:
    """A sink label as stored in the ledger, masked again (rows written before masking covered every
    URL kind still show it safely); text that is no sink comes back unchanged."""
    kind, sep, target = text.partition(":")
    if sep and kind in URL_KINDS and target:
        try:
            return f"{kind}:{mask_url(target, hide_path=kind != 'webhook')}"
        except ValueError:
            return f"{kind}:***"
    return text
