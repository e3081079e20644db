"""Send one ``Message`` to one ``Sink``: the formats of each service, ``env:NAME`` resolution,
the idempotency and signature headers. Every secret a sink resolves is added to the redactor
first, so no error text or ledger entry can hold it."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from runner.config.sinks import ENV_REF, Sink
from runner.delivery.mail import send_mail
from runner.delivery.message import Message, capped
from runner.delivery.retry import post
from runner.errors import RunnerError
from runner.safety.redact import Redactor

if TYPE_CHECKING:
    from runner.config.machine import Config

DISCORD_MAX = 2000
TELEGRAM_MAX = 4096
SLACK_MAX = 39_000
SIGNATURE_HEADER = "X-Runner-Signature"


class DeliveryError(RunnerError, RuntimeError):
    """A sink cannot send: an unset ``env:NAME``, no ``smtp:`` for an email sink, a broken template."""

    reason = "delivery"


@dataclass(frozen=True)
class Delivered:
    sink: str  # the sink's label: secrets masked
    ok: bool
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"sink": self.sink, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class SendContext:
    config: Config
    base_dir: Path  # relative file sinks and template files
    home: Path
    redactor: Redactor
    stdout: TextIO | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def resolve(self, value: str) -> str:
        """``env:NAME`` -> the variable's value (registered as a secret); anything else as is."""
        if not ENV_REF.match(value):
            return value
        name = value[4:]
        resolved = self.environ.get(name)
        if not resolved:
            raise DeliveryError(f"environment variable {name} is not set")
        self.redactor.add(resolved)
        return resolved


def send(sink: Sink, message: Message, ctx: SendContext) -> Delivered:
    """Send and report; a failure is a ``Delivered`` with ``ok=False``, never an exception."""
    try:
        ok, detail = _SENDERS[sink.kind](sink, message, ctx)
    except (RunnerError, OSError, ValueError) as exc:
        ok, detail = False, f"{type(exc).__name__}: {exc}" if not isinstance(exc, DeliveryError) else str(exc)
    return Delivered(sink.label, ok, ctx.redactor(detail))


def _http(
    url: str, body: bytes, message: Message, ctx: SendContext, headers: Mapping[str, str] = {}
) -> tuple[bool, str]:
    ctx.redactor.add(url)
    sent = {
        "Content-Type": "application/json",
        "User-Agent": "runner",
        "Idempotency-Key": message.key,
        "X-Runner-Run-Id": message.run_id,
        **headers,
    }
    posted = post(url, body=body, headers=sent, policy=ctx.config.delivery)
    return posted.ok, posted.detail


def _json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


def _webhook(sink: Sink, message: Message, ctx: SendContext) -> tuple[bool, str]:
    url = ctx.resolve(sink.target)
    headers = {name: ctx.resolve(value) for name, value in sink.headers}
    body = _json(message.payload)
    if sink.template is not None:
        body = _render(sink.template, message, ctx).encode("utf-8")
        if not _is_json(body):
            headers.setdefault("Content-Type", "text/plain; charset=utf-8")
    if sink.secret is not None:
        digest = hmac.new(ctx.resolve(sink.secret).encode("utf-8"), body, hashlib.sha256).hexdigest()
        headers[SIGNATURE_HEADER] = f"sha256={digest}"
    return _http(url, body, message, ctx, headers)


def _is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def _render(template: str, message: Message, ctx: SendContext) -> str:
    from jinja2 import StrictUndefined, TemplateError
    from jinja2.sandbox import SandboxedEnvironment

    path = ctx.base_dir / template
    source = path.read_text(encoding="utf-8") if "\n" not in template and path.is_file() else template
    env = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    try:
        return env.from_string(source).render(message.variables())
    except TemplateError as exc:
        raise DeliveryError(f"webhook template: {exc}") from None


def _slack(sink: Sink, message: Message, ctx: SendContext) -> tuple[bool, str]:
    text = capped(f"*{message.subject}*\n{message.text}", SLACK_MAX)
    return _http(ctx.resolve(sink.target), _json({"text": text}), message, ctx)


def _discord(sink: Sink, message: Message, ctx: SendContext) -> tuple[bool, str]:
    text = capped(f"**{message.subject}**\n{message.text}", DISCORD_MAX)
    return _http(ctx.resolve(sink.target), _json({"content": text}), message, ctx)


def _telegram(sink: Sink, message: Message, ctx: SendContext) -> tuple[bool, str]:
    cfg = ctx.config.telegram
    token = ctx.resolve(cfg.bot_token)
    chat_id = ctx.resolve(sink.target)
    url = f"{cfg.base_url.rstrip('/')}/bot{token}/sendMessage"
    text = capped(f"{message.subject}\n{message.text}", TELEGRAM_MAX)
    return _http(url, _json({"chat_id": chat_id, "text": text, "disable_web_page_preview": True}), message, ctx)


def _email(sink: Sink, message: Message, ctx: SendContext) -> tuple[bool, str]:
    if ctx.config.smtp is None:
        raise DeliveryError("an email sink needs smtp: {host, port, from, ...} in config.yaml")
    return send_mail(ctx.config.smtp, sink.target, message, resolve=ctx.resolve, policy=ctx.config.delivery)


def _stdout(sink: Sink, message: Message, ctx: SendContext) -> tuple[bool, str]:
    stream = ctx.stdout or sys.stdout
    text = f"{message.subject}\n{message.text}"
    stream.write(text if text.endswith("\n") else text + "\n")
    stream.flush()
    return True, ""


def _file(sink: Sink, message: Message, ctx: SendContext) -> tuple[bool, str]:
    """Alerts appended to a file (``file``: RUNNER_HOME/logs/alerts.log)."""
    path = (ctx.base_dir / sink.target).expanduser() if sink.target else ctx.home / "logs" / "alerts.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(message.payload, ensure_ascii=False) + "\n")
    return True, str(path)


_SENDERS = {
    "webhook": _webhook,
    "slack": _slack,
    "discord": _discord,
    "telegram": _telegram,
    "email": _email,
    "stdout": _stdout,
    "file": _file,
}
