"""Secret redaction for everything runner writes: events, outputs, logs, errors, cassettes.

Exact known values first (pool keys, values of secret-looking environment variables),
longest first; then patterns for common key formats. Credentials are named by
``fingerprint(key)`` (sha256, 12 hex chars), never by a prefix of the key.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "[REDACTED]"
MIN_SECRET_LEN = 8

SECRET_ENV_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|PRIVATE_KEY|CREDENTIALS?|ACCESS_KEY|AUTH)$", re.I)

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("pem", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S)),
    ("openai", re.compile(r"\bsk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_\-]{16,}")),
    ("github", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("slack", re.compile(r"\bxox[baprs]-[A-Za-z0-9\-]{10,}")),
    ("aws", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("google", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("gitlab", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}")),
    ("huggingface", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("npm", re.compile(r"\bnpm_[A-Za-z0-9]{36}")),
    ("pypi", re.compile(r"\bpypi-[A-Za-z0-9_\-]{50,}")),
    ("bearer", re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{12,}")),
    ("url_param", re.compile(r"(?i)([?&](?:api_key|apikey|access_token|token|sig|key|secret)=)[^&\s\"']+")),
    (
        "assignment",
        re.compile(
            r"(?im)^(\s*(?:export\s+)?[A-Z0-9_]*(?:API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|PRIVATE_KEY|ACCESS_KEY)"
            r"\s*[=:]\s*)[\"']?[^\s\"']{6,}[\"']?"
        ),
    ),
    ("aws_secret", re.compile(r"(?i)(aws_secret_access_key\s*[=:]\s*)[A-Za-z0-9/+=]{40}")),
]


def fingerprint(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()[:12]


def secret_env_values(environ: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return [v for k, v in env.items() if SECRET_ENV_NAME.search(k) and len(v) >= MIN_SECRET_LEN]


class Redactor:
    """Callable that masks secrets in text; ``redact_obj`` walks JSON-like values."""

    def __init__(self, known: Iterable[str] = (), *, include_env: bool = True):
        values = set(known)
        if include_env:
            values.update(secret_env_values())
        self._set_known(values)

    def _set_known(self, values: Iterable[str]) -> None:
        self._known = sorted({v for v in values if v and len(v) >= MIN_SECRET_LEN}, key=len, reverse=True)
        self._known_re = re.compile("|".join(re.escape(v) for v in self._known)) if self._known else None

    def add(self, *values: str) -> None:
        self._set_known([*self._known, *values])

    def __call__(self, text: str) -> str:
        if not text:
            return text
        if self._known_re is not None:
            text = self._known_re.sub(MASK, text)
        for kind, pattern in _PATTERNS:
            if kind in ("bearer", "url_param", "assignment", "aws_secret"):
                text = pattern.sub(lambda m: m.group(1) + MASK, text)
            else:
                text = pattern.sub(MASK, text)
        return text

    def redact_obj(self, value: Any) -> Any:
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {k: self.redact_obj(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_obj(v) for v in value]
        return value
