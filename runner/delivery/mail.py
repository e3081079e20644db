"""The ``email:ADDRESS`` sink: one plain-text message through the SMTP server of config.yaml's ``smtp:``."""

from __future__ import annotations

import smtplib
import time
from collections.abc import Callable
from email.message import EmailMessage

from runner.config.machine import SmtpConfig
from runner.delivery.message import Message
from runner.delivery.retry import Policy

TRANSIENT = (smtplib.SMTPServerDisconnected, smtplib.SMTPConnectError, ConnectionError, TimeoutError)


def build(smtp: SmtpConfig, to: str, message: Message) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = smtp.from_
    mail["To"] = to
    mail["Subject"] = message.subject
    mail["X-Runner-Run-Id"] = message.run_id
    mail.set_content(message.text)
    return mail


def send_mail(
    smtp: SmtpConfig, to: str, message: Message, *, resolve: Callable[[str], str], policy: Policy
) -> tuple[bool, str]:
    """Send, trying again on connection faults (not on a refused recipient)."""
    mail = build(smtp, to, message)
    wait, detail = policy.backoff, ""
    for attempt in range(1, policy.attempts + 1):
        try:
            _send_once(smtp, mail, resolve)
            return True, f"sent via {smtp.host}:{smtp.port}" + (f" after {attempt} attempts" if attempt > 1 else "")
        except TRANSIENT as exc:
            detail = f"{type(exc).__name__}: {exc}"
        except smtplib.SMTPException as exc:
            return False, f"{type(exc).__name__}: {exc}"
        if attempt < policy.attempts:
            time.sleep(wait)
            wait = min(policy.max_backoff, wait * 2)
    return False, f"{detail} (gave up after {policy.attempts} attempts)"


def _send_once(smtp: SmtpConfig, mail: EmailMessage, resolve: Callable[[str], str]) -> None:
    cls = smtplib.SMTP_SSL if smtp.ssl else smtplib.SMTP
    with cls(smtp.host, smtp.port, timeout=smtp.timeout) as conn:
        if smtp.starttls:
            conn.starttls()
        if smtp.user:
            conn.login(smtp.user, resolve(smtp.password or ""))
        conn.send_message(mail)
