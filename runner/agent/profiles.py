"""Provider profiles: what each provider family needs on the wire, in one place.

A ``Profile`` says, for one family of chat APIs (OpenAI, Azure OpenAI, Gemini, Anthropic,
Mistral, DeepSeek, Moonshot/Kimi, Zhipu/GLM, Groq, OpenRouter, Together, Fireworks, vLLM,
llama.cpp, Ollama, LM Studio, TGI):

- which fields of an assistant turn go back on the next request: unknown fields the provider
  sent (Gemini's ``extra_content.google.thought_signature`` on a tool call, OpenRouter's
  ``reasoning_details``) are kept and echoed verbatim;
- whether the turn's reasoning is sent back, and under which name (Kimi, GLM and DeepSeek's
  thinking mode require ``reasoning_content`` on assistant tool-call turns; the others get none;
  ``echo_reasoning:`` in config.yaml overrides it);
- the tool-call id rule (Mistral takes 9 letters and digits: ids made by another provider are
  renamed, the same way in the call and in its answer, when a run falls back to Mistral);
- how the key is sent (Azure: ``api-key``; the rest: ``Authorization: Bearer``) and Azure's
  ``api-version`` query;
- what an error means (``ErrorKind``): a bad key, no credit, moderation, a content filter, a
  rate limit, an overload, a bad request.

The profile is chosen from the base URL (``profile_for``) and can be named per provider in
config.yaml (``profile: gemini``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from runner.agent.types import THINKING_KEY
from runner.config.families import Family


class ToolIds(StrEnum):
    ANY = "any"  # ids are echoed as the model made them
    ALNUM9 = "alnum9"  # exactly 9 characters a-z, A-Z, 0-9 (Mistral)


class Auth(StrEnum):
    BEARER = "bearer"  # Authorization: Bearer KEY
    API_KEY = "api-key"  # api-key: KEY (Azure OpenAI)
    X_API_KEY = "x-api-key"  # x-api-key: KEY (Anthropic)


@dataclass(frozen=True)
class Profile:
    family: Family
    reasoning_field: str | None = None  # send a turn's reasoning back under this name; None: never
    tool_ids: ToolIds = ToolIds.ANY
    auth: Auth = Auth.BEARER
    native: bool = False  # not the chat-completions protocol (Anthropic's Messages API)

    @property
    def name(self) -> str:
        return str(self.family)


PROFILES: dict[Family, Profile] = {
    family: Profile(family)
    for family in Family
}
PROFILES[Family.AZURE] = Profile(Family.AZURE, auth=Auth.API_KEY)
PROFILES[Family.ANTHROPIC] = Profile(Family.ANTHROPIC, auth=Auth.X_API_KEY, native=True)
PROFILES[Family.MISTRAL] = Profile(Family.MISTRAL, tool_ids=ToolIds.ALNUM9)
PROFILES[Family.MOONSHOT] = Profile(Family.MOONSHOT, reasoning_field="reasoning_content")
PROFILES[Family.ZHIPU] = Profile(Family.ZHIPU, reasoning_field="reasoning_content")
# DeepSeek's thinking mode: a turn's reasoning must come back on the tool-call turns of the run
# (api-docs.deepseek.com/guides/thinking_mode); the legacy R1 endpoint refused it (echo_reasoning: false)
PROFILES[Family.DEEPSEEK] = Profile(Family.DEEPSEEK, reasoning_field="reasoning_content")

HOSTS: tuple[tuple[str, Family], ...] = (
    ("api.openai.com", Family.OPENAI),
    (".openai.azure.com", Family.AZURE),
    (".cognitiveservices.azure.com", Family.AZURE),
    (".services.ai.azure.com", Family.AZURE),
    ("generativelanguage.googleapis.com", Family.GEMINI),
    ("aiplatform.googleapis.com", Family.GEMINI),
    ("api.anthropic.com", Family.ANTHROPIC),
    ("api.mistral.ai", Family.MISTRAL),
    ("api.deepseek.com", Family.DEEPSEEK),
    ("api.moonshot.ai", Family.MOONSHOT),
    ("api.moonshot.cn", Family.MOONSHOT),
    ("open.bigmodel.cn", Family.ZHIPU),
    ("api.z.ai", Family.ZHIPU),
    ("api.groq.com", Family.GROQ),
    ("openrouter.ai", Family.OPENROUTER),
    ("api.together.xyz", Family.TOGETHER),
    ("api.together.ai", Family.TOGETHER),
    ("api.fireworks.ai", Family.FIREWORKS),
)
PORTS = {11434: Family.OLLAMA, 1234: Family.LMSTUDIO}


def family_of(base_url: str) -> Family:
    """The family a base URL belongs to: by host, then by a local server's usual port, then by a
    path Azure or Gemini alone use; else ``generic``."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    for suffix, family in HOSTS:
        if host.endswith(suffix) if suffix.startswith(".") else host == suffix or host.endswith("." + suffix):
            return family
    if "/openai/deployments/" in parts.path:
        return Family.AZURE
    if parts.path.rstrip("/").endswith("/v1beta/openai"):
        return Family.GEMINI
    try:
        port = parts.port
    except ValueError:
        port = None
    return PORTS.get(port or 0, Family.GENERIC)


def profile_for(base_url: str, name: str | None = None, *, echo_reasoning: bool | None = None) -> Profile:
    """The profile named in config.yaml (``profile:``), else the one the base URL implies;
    ``echo_reasoning`` (config.yaml) overrides whether a turn's reasoning goes back."""
    profile = PROFILES[Family(name) if name else family_of(base_url)]
    if echo_reasoning is None:
        return profile
    field = (profile.reasoning_field or "reasoning_content") if echo_reasoning else None
    return replace(profile, reasoning_field=field)


# -- messages as each provider takes them ------------------------------------------------------

RUNNER_FIELDS = frozenset({"reasoning", "refusal", THINKING_KEY})  # runner's own keys of an assistant turn


def wire_messages(messages: Sequence[Mapping[str, Any]], profile: Profile) -> list[dict[str, Any]]:
    """The conversation as this provider takes it: runner's own keys out (a turn's ``reasoning``
    goes back under the profile's ``reasoning_field``, if any), the provider's own fields kept
    unless dropped, tool-call ids renamed where the provider has an id rule."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "assistant":
            sent = {k: v for k, v in m.items() if k not in RUNNER_FIELDS}
            if profile.reasoning_field and m.get("reasoning") and profile.reasoning_field not in sent:
                sent[profile.reasoning_field] = m["reasoning"]
            if profile.tool_ids is ToolIds.ALNUM9 and sent.get("tool_calls"):
                sent["tool_calls"] = [{**c, "id": tool_id(str(c.get("id", "")), profile)} for c in sent["tool_calls"]]
            out.append(sent)
        elif m.get("role") == "tool" and profile.tool_ids is ToolIds.ALNUM9:
            out.append({**m, "tool_call_id": tool_id(str(m.get("tool_call_id", "")), profile)})
        else:
            out.append(dict(m))
    return out


_ALNUM9 = re.compile(r"[A-Za-z0-9]{9}")
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def tool_id(original: str, profile: Profile) -> str:
    """``original`` as this provider takes a tool-call id: unchanged when it already fits, else a
    stable rename (the same original always gives the same id, in the call and in its answer)."""
    if profile.tool_ids is ToolIds.ANY or _ALNUM9.fullmatch(original):
        return original
    digest = int.from_bytes(hashlib.sha256(original.encode()).digest()[:8], "big")
    chars = []
    for _ in range(9):
        digest, i = divmod(digest, len(_ALPHABET))
        chars.append(_ALPHABET[i])
    return "".join(chars)


# -- what an error means ----------------------------------------------------------------------


class ErrorKind(StrEnum):
    BAD_KEY = "bad_key"  # the key is wrong, revoked or not allowed: cool it, then mark it dead
    NO_CREDIT = "no_credit"  # the key's account has no credit or quota left: cool it for long
    RATE_LIMIT = "rate_limit"  # too many requests for this key now: cool it for the reset given
    MODERATION = "moderation"  # this input was flagged: fail the run, no key is at fault
    CONTENT_FILTER = "content_filter"  # the provider's content filter refused the prompt
    OVERLOAD = "overload"  # the provider is busy: retry, no key is at fault
    SERVER = "server"  # a server error: retry
    REQUEST = "request"  # the request itself was refused (400, 404, 413, 422): fail with the message


# words in an error body that decide its kind, whatever the status
_NO_CREDIT_WORDS = (
    "insufficient_quota",
    "insufficient credits",
    "insufficient balance",
    "credit balance is too low",
    "exceeded_current_quota",
    "key limit exceeded",
    "billing_hard_limit",
    "payment required",
    "monthly spending limit",
    "余额不足",  # Zhipu: "insufficient balance"
)
_NO_CREDIT_CODES = ('"code":"1113"',)  # Zhipu's business code for no balance (sent with 429)
_BAD_KEY_WORDS = ("api_key_invalid", "api key not valid", "invalid api key", "incorrect api key", "invalid_api_key")
_OVERLOAD_WORDS = ("engine_overloaded", "overloaded_error", "server is overloaded", "model is overloaded")
_MODERATION_WORDS = ("flagged", "moderation")


def error_kind(profile: Profile, status: int, body: str) -> ErrorKind:
    """What an HTTP error from this provider means (status and body; see ``ErrorKind``)."""
    text = body.lower()
    packed = text.replace(" ", "")
    if any(w in text for w in _NO_CREDIT_WORDS) or any(c in packed for c in _NO_CREDIT_CODES) or status == 402:
        return ErrorKind.NO_CREDIT
    if status == 403 and profile.family is Family.OPENROUTER and any(w in text for w in _MODERATION_WORDS):
        return ErrorKind.MODERATION
    filtered = '"content_filter"' in packed or "responsibleaipolicyviolation" in text
    if status in (400, 403) and filtered:
        return ErrorKind.CONTENT_FILTER
    if status in (401, 403) or (status == 400 and any(w in text for w in _BAD_KEY_WORDS)):
        return ErrorKind.BAD_KEY
    if any(w in text for w in _OVERLOAD_WORDS) or status in (503, 529):
        return ErrorKind.OVERLOAD
    if status == 429:
        return ErrorKind.RATE_LIMIT
    if status >= 500 or status in (408, 409, 425):
        return ErrorKind.SERVER
    return ErrorKind.REQUEST


MESSAGE_CHARS = 600  # of the provider's words kept in an error line


def error_message(body: str) -> str:
    """The provider's own words from an error body, as text: OpenAI's ``{"error": {"message"}}``,
    Gemini's list-wrapped ``[{"error": {...}}]``, Mistral/vLLM's ``{"object": "error", "message"}``,
    Anthropic's ``{"type": "error", "error": {...}}``, OpenRouter's ``metadata.reasons``; a body
    that is not JSON as its first MESSAGE_CHARS characters."""
    try:
        data = json.loads(body)
    except ValueError:
        return " ".join(body.split())[:MESSAGE_CHARS]
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]
    if not isinstance(data, dict):
        return str(data)[:MESSAGE_CHARS]
    err = data.get("error", data)
    if isinstance(err, str):
        return err[:MESSAGE_CHARS]
    if not isinstance(err, dict):
        return json.dumps(data)[:MESSAGE_CHARS]
    message = err.get("message") or err.get("detail") or data.get("message") or data.get("detail")
    if isinstance(message, (dict, list)):
        message = json.dumps(message)
    text = str(message or err.get("code") or err.get("type") or json.dumps(err))
    metadata = err.get("metadata")
    reasons = metadata.get("reasons") if isinstance(metadata, dict) else None
    if isinstance(reasons, list) and reasons:
        text += f" (reasons: {', '.join(map(str, reasons))})"
    return text[:MESSAGE_CHARS]


# -- how long a rate limit lasts ----------------------------------------------------------------

_GO_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?")
RESET_HEADERS = (
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "x-ratelimit-reset",
    "ratelimit-reset",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
)
MAX_WAIT_S = 7 * 86400.0  # a reset further away than this is cut to it


def reset_seconds(value: str, now: float) -> float | None:
    """Seconds until a reset given as: Go-style durations (``7.66s``, ``2m59.56s``, ``1h2m3.5s``,
    ``20ms``), plain seconds, epoch seconds or milliseconds (OpenRouter's ``X-RateLimit-Reset``),
    an RFC 3339 time (Anthropic) or an HTTP date (``Retry-After``). None when unreadable."""
    value = value.strip()
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is not None:
        if number != number or number in (float("inf"), float("-inf")):
            return None
        if number > 1e12:  # epoch milliseconds
            return _bounded(number / 1000 - now)
        if number > 1e9:  # epoch seconds
            return _bounded(number - now)
        return _bounded(number)
    match = _GO_DURATION.fullmatch(value.lower())
    if match and any(match.groups()):
        h, m, s, ms = (float(g) if g else 0.0 for g in match.groups())
        return _bounded(h * 3600 + m * 60 + s + ms / 1000)
    return _date_seconds(value, now)


def _date_seconds(value: str, now: float) -> float | None:
    from datetime import datetime
    from email.utils import parsedate_to_datetime

    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
    if when.tzinfo is None:
        return None
    return _bounded(when.timestamp() - now)


def _bounded(seconds: float) -> float:
    """A wait of at least 0 and at most a week (no header locks a key away for longer)."""
    return min(MAX_WAIT_S, max(0.0, seconds))


def _remaining(lower: Mapping[str, str], reset_header: str) -> str | None:
    """The ``remaining`` header that goes with a reset header (``x-ratelimit-reset-tokens`` ->
    ``x-ratelimit-remaining-tokens``), stripped, if sent."""
    value = lower.get(reset_header.replace("-reset", "-remaining"))
    return None if value is None else value.strip()


def retry_after(headers: Mapping[str, str], body: str = "", now: float | None = None) -> float | None:
    """Seconds the provider asks to wait: ``retry-after-ms``, ``Retry-After``, else the reset of
    the window that ran out (its ``remaining`` header is 0; OpenAI and Groq send both windows),
    else the longest reset given, else Gemini's ``retryDelay`` in the error body."""
    import time

    now = time.time() if now is None else now
    lower = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lower:
        try:
            return _bounded(float(lower["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    if "retry-after" in lower:
        seconds = reset_seconds(lower["retry-after"], now)
        if seconds is not None:
            return seconds
    names = [name for name in RESET_HEADERS if name in lower]
    spent = [n for n in names if _remaining(lower, n) == "0"]  # the window that ran out decides
    resets = [s for name in spent or names for s in [reset_seconds(lower[name], now)] if s is not None]
    if resets:
        return max(resets)
    delay = re.search(r'"retryDelay"\s*:\s*"([0-9.]+)s"', body)
    return _bounded(float(delay.group(1))) if delay else None
