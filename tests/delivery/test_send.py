"""The sinks against real local receivers: retries, Retry-After, idempotency and signature headers,
env:NAME, templates, the Slack/Discord/Telegram formats, email through aiosmtpd, masking."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.config.machine import Config
from runner.config.sinks import check_sink, label, mask_sink_label, parse_sink
from runner.delivery.message import Message
from runner.delivery.send import SendContext, send
from runner.safety.redact import Redactor
from tests.receivers import Receiver

FAST = {"delivery": {"attempts": 3, "backoff": 0.05, "max_backoff": 3, "timeout": 5}}
MSG = Message(
    "20260101-000000-abcdef",
    "20260101-000000-abcdef",
    "[runner] j: run failed",
    "line one\nline two",
    {"job": "j", "run_id": "20260101-000000-abcdef", "status": "failed", "output": "x"},
)


def ctx(tmp_path: Path, environ: dict[str, str] | None = None, **config: object) -> SendContext:
    return SendContext(
        Config(**{**FAST, **config}),
        base_dir=tmp_path,
        home=tmp_path,
        redactor=Redactor(include_env=False),
        environ=environ or {},
    )


def test_webhook_5xx_then_success_with_idempotency_headers(tmp_path: Path, receiver: Receiver) -> None:
    receiver.script = [(500, {}), (503, {})]
    result = send(parse_sink(f"webhook:{receiver.url}/hook"), MSG, ctx(tmp_path))
    assert result.ok, result
    assert "after 3 attempts" in result.detail
    reqs = receiver.requests
    assert len(reqs) == 3 and {r.body for r in reqs} == {json.dumps(MSG.payload).encode()}
    assert all(r.headers["idempotency-key"] == MSG.key and r.headers["x-runner-run-id"] == MSG.run_id for r in reqs)


def test_429_retry_after_is_honoured(tmp_path: Path, receiver: Receiver) -> None:
    receiver.script = [(429, {"Retry-After": "1"})]
    result = send(parse_sink(f"webhook:{receiver.url}/"), MSG, ctx(tmp_path))
    assert result.ok
    first, second = receiver.requests
    assert second.at - first.at >= 0.95  # waited the server's 1 s, not the 0.05 s backoff


def test_gives_up_after_its_attempts_and_does_not_retry_a_4xx(tmp_path: Path, receiver: Receiver) -> None:
    receiver.script = [(502, {})] * 3
    result = send(parse_sink(f"webhook:{receiver.url}/"), MSG, ctx(tmp_path))
    assert not result.ok and "gave up after 3 attempts" in result.detail and len(receiver.requests) == 3
    receiver.script = [(404, {})]
    result = send(parse_sink(f"webhook:{receiver.url}/"), MSG, ctx(tmp_path))
    assert not result.ok and result.detail.startswith("HTTP 404") and len(receiver.requests) == 4


def test_connection_refused_is_retried_then_reported(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    result = send(parse_sink(f"webhook:http://127.0.0.1:{port}/x"), MSG, ctx(tmp_path))
    assert not result.ok and "ConnectError" in result.detail and "gave up after 3 attempts" in result.detail
    assert time.monotonic() - started >= 0.15  # 0.05 + 0.1 of backoff


def test_env_url_headers_secret_signature_and_template(tmp_path: Path, receiver: Receiver) -> None:
    env = {"HOOK": f"{receiver.url}/env-hook", "TOKEN": "tok-123456789", "SIGN": "s3cr3t-signing-key"}
    sink = check_sink(
        {
            "webhook": {
                "url": "env:HOOK",
                "headers": {"Authorization": "env:TOKEN", "X-Plain": "yes"},
                "secret": "env:SIGN",
                "template": '{"msg": {{ (job ~ ": " ~ status) | tojson }}, "run": "{{ run_id }}"}',
            }
        }
    )
    result = send(parse_sink(sink), MSG, ctx(tmp_path, env))
    assert result.ok, result
    [req] = receiver.requests
    assert req.path == "/env-hook"
    assert req.json() == {"msg": "j: failed", "run": MSG.run_id}
    assert req.headers["authorization"] == "tok-123456789" and req.headers["x-plain"] == "yes"
    expected = hmac.new(b"s3cr3t-signing-key", req.body, hashlib.sha256).hexdigest()
    assert req.headers["x-runner-signature"] == f"sha256={expected}"
    assert result.sink == "webhook:env:HOOK"


def test_unset_env_is_a_failed_sink_naming_the_variable(tmp_path: Path) -> None:
    result = send(parse_sink("slack:env:NOPE_URL"), MSG, ctx(tmp_path))
    assert not result.ok and result.detail == "environment variable NOPE_URL is not set"


def test_slack_discord_telegram_formats(tmp_path: Path, receiver: Receiver) -> None:
    assert send(parse_sink(f"slack:{receiver.url}/services/T0/B0/SECRETPATH"), MSG, ctx(tmp_path)).ok
    long = Message(MSG.run_id, MSG.key, MSG.subject, "x" * 5000, MSG.payload)
    assert send(parse_sink(f"discord:{receiver.url}/api/webhooks/1/TOKEN"), long, ctx(tmp_path)).ok
    tg = ctx(tmp_path, {"TELEGRAM_BOT_TOKEN": "123:bot-token-abc"}, telegram={"base_url": receiver.url})
    result = send(parse_sink("telegram:-100123"), MSG, tg)
    assert result.ok, result
    slack, discord, telegram = receiver.requests
    assert slack.json() == {"text": "*[runner] j: run failed*\nline one\nline two"}
    assert len(discord.json()["content"]) == 2000 and discord.json()["content"].startswith("**[runner]")
    assert telegram.path == "/bot123:bot-token-abc/sendMessage"
    body = telegram.json()
    assert body["chat_id"] == "-100123" and body["text"].startswith("[runner] j: run failed\nline one")


def test_telegram_token_never_in_a_failure_detail(tmp_path: Path, receiver: Receiver) -> None:
    receiver.script = [(401, {})]
    tg = ctx(tmp_path, {"TELEGRAM_BOT_TOKEN": "123:bot-token-abc"}, telegram={"base_url": receiver.url})
    result = send(parse_sink("telegram:@mychannel"), MSG, tg)
    assert not result.ok and "bot-token-abc" not in json.dumps(result.as_dict())


def test_email_through_a_local_smtp_server(tmp_path: Path) -> None:
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message as MessageHandler

    got: list[object] = []

    class Keep(MessageHandler):
        def handle_message(self, message: object) -> None:
            got.append(message)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    controller = Controller(Keep(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        c = ctx(tmp_path, smtp={"host": "127.0.0.1", "port": port, "from": "runner@example.org"})
        result = send(parse_sink("email:ops@example.org"), MSG, c)
        assert result.ok, result
    finally:
        controller.stop()
    [mail] = got
    assert mail["To"] == "ops@example.org" and mail["From"] == "runner@example.org"  # type: ignore[index]
    assert mail["Subject"] == MSG.subject  # type: ignore[index]
    assert "line two" in mail.get_payload()  # type: ignore[attr-defined]


def test_email_without_smtp_config_fails_clearly(tmp_path: Path) -> None:
    result = send(parse_sink("email:ops@example.org"), MSG, ctx(tmp_path))
    assert not result.ok and "smtp:" in result.detail


@pytest.mark.parametrize(
    ("sink", "shown"),
    [
        ("slack:https://hooks.slack.com/services/T0/B0/XYZSECRET", "slack:https://hooks.slack.com/***"),
        ("discord:https://discord.com/api/webhooks/1/TOKEN", "discord:https://discord.com/***"),
        ("webhook:https://user:pw@example.com/h?token=abc", "webhook:https://***@example.com/h?***"),
        ("webhook:env:HOOK", "webhook:env:HOOK"),
        ("telegram:-100123", "telegram:-100123"),
        ("email:a@b.org", "email:a@b.org"),
        ("file", "file"),
    ],
)
def test_labels_mask_secrets(sink: str, shown: str) -> None:
    assert label(sink) == shown
    assert mask_sink_label(sink) == shown  # an old ledger row is masked when shown


@pytest.mark.parametrize(
    "bad",
    [
        "ftp:x",
        "webhook:notaurl",
        "slack:",
        "telegram:abc",
        "email:nobody",
        "file:",
        "stdout:x",
        3,
        {"webhook": {"url": "https://x.org", "colour": 1}},
        {"webhook": {}},
        {"slack": {"url": "https://x"}},
    ],
)
def test_invalid_sinks_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError):
        check_sink(bad)


_secret = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=12, max_size=40)


@given(kind=st.sampled_from(["slack", "discord"]), secret=_secret, host=st.sampled_from(["hooks.slack.com", "x.org"]))
def test_chat_webhook_path_secrets_never_show(kind: str, secret: str, host: str) -> None:
    sink = f"{kind}:https://{host}/services/{secret}"
    assert check_sink(sink) == sink
    assert secret not in label(sink) and secret not in mask_sink_label(sink)


@given(user=_secret, password=_secret, query=_secret)
def test_webhook_credentials_and_query_never_show(user: str, password: str, query: str) -> None:
    sink = f"webhook:https://{user}:{password}@example.org/hook?k={query}"
    shown = label(sink)
    assert password not in shown and user not in shown and query not in shown


def test_plain_http_sinks_load_no_ca_bundle() -> None:
    """(issue 20) The CA bundle costs tens of ms to load; a post to http:// does not need it."""
    from runner.host.tls import ca_context, verify_for

    plain = verify_for("http://127.0.0.1:9/hook")
    assert plain is not ca_context() and plain.cert_store_stats()["x509_ca"] == 0
    assert plain.verify_mode.name == "CERT_REQUIRED" and plain.check_hostname  # would trust nothing
    assert verify_for("HTTPS://example.org/hook") is ca_context()
