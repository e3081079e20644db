"""Secret redaction for everything runner writes or sends: tool results (before the model sees
them), events, outputs, logs, errors, cassettes, delivery records.

Two kinds of secret are masked:

- known values (pool keys, values of secret environment variables), in their raw form and in the
  forms they take inside JSON (``\\"``, ``\\\\``, ``\\uXXXX``) and URLs (``%XX``);
- patterns of common key formats (``FAMILIES``) and secret-named fields (``"password": ...``).

Matching runs on a *decoded view* of the text (JSON string escapes and URL ``%XX`` decoded), and
every match is mapped back to the raw span it came from, so ``\\nghp_...`` or ``\\u0067hp_...`` in
a JSON document is masked as surely as the plain token. Credentials are named by
``fingerprint(key)`` (sha256, 12 hex chars), never by a prefix of the key.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from itertools import accumulate
from typing import Any, NamedTuple
from urllib.parse import quote

import runner.host.secrets as held

MASK = "[REDACTED]"
MIN_SECRET_LEN = 8

SECRET_ENV_NAME = re.compile(
    r"(API_?KEYS?|TOKENS?|SECRETS?|PASSWORD|PASSWD|PRIVATE_KEY|CREDENTIALS?|ACCESS_KEY|AUTH|WEBHOOK(?:_URL)?)$", re.I
)

_MASK_GLUE = re.compile(re.escape(MASK) + r"[A-Za-z0-9_:]")
_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


class Family(NamedTuple):
    """One secret format. ``regex`` starts with a literal (so the engine scans fast); group ``s``
    (or the whole match) is what is masked.

    ``hint``: substrings of which one must be in the text before the regex runs at all;
    ``lower``: match on the lowercased text; ``boundary``: the match must not start inside a word
    (an escape such as ``\\n`` or ``%0A`` just before counts as a boundary); ``lead``: a pattern
    that must end right where the match starts (``span_lead``: and is masked with it);
    ``keep``: gets (key, secret); a match it returns False for is left alone (placeholders)."""

    kind: str
    regex: re.Pattern[str]
    hint: tuple[str, ...]
    lower: bool = False
    boundary: bool = True
    lead: re.Pattern[str] | None = None
    span_lead: bool = False
    keep: Callable[[str, str], bool] | None = None
    # (a NamedTuple, not a dataclass: the process that hides secrets before click loads imports
    # this module for ``is_token``, and ``dataclasses`` would cost it ~10 ms of imports)


_PLAIN_VALUES = frozenset({"null", "none", "true", "false", "nil", "undefined", "", "***", "xxx", "changeme"})
_NOT_SECRET_KEYS = re.compile(r"(?:tokens|tokeniz\w*|token_(?:type|url|uri|endpoint|count|usage|limit)s?)$")


def _is_secret_value(key: str, value: str) -> bool:
    """A keyword's value worth masking: not a placeholder, a number, a mask or a plain URL."""
    if _NOT_SECRET_KEYS.search(re.match(r"[A-Za-z0-9_]*", key).group()):  # type: ignore[union-attr]
        return False
    v = value.strip().strip("\\").strip("\"'`").strip("\\").strip()
    if len(v) < 4 or v.lower() in _PLAIN_VALUES or MASK in v:
        return False
    if v.startswith(("$", "{{", "<", "%(")) or v.lower().startswith(("http://", "https://")):
        return False
    return not re.fullmatch(r"[\d.,:_ -]+", v)


def _family(kind: str, pattern: str, hint: Iterable[str] | None = None, flags: int = 0, **kw: Any) -> Family:
    lead = kw.pop("lead", None)
    literal = re.match(r"[A-Za-z0-9_:-]+", pattern)
    hints = tuple(hint) if hint is not None else ((literal.group(),) if literal else ())
    return Family(kind, re.compile(pattern, flags), hints, lead=re.compile(lead) if lead else None, **kw)


# "password": "x" (JSON, also with escaped quotes), password: x (YAML), PASSWORD=x, pwd => 'x', token := x
_KEY_TAIL = r"[a-z0-9_]*(?:\\?[\"'`\]]){0,2}[ \t]*(?::=|=>|[:=])[ \t]*"
_VALUE = (
    r"(?P<s>\\\"(?:[^\"\\\n]|\\(?!\"))*\\\"|\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|`[^`\n]*`"
    r"|(?:[^\s,;\"'`<>{}\[\]\\&]|&(?![a-z0-9_.-]+=))+)"
)
_KEY_LEAD = (
    r"(?:api|auth|service|account|db|database|priv|private|client|access|secret|encryption|signing|master|app)[_.-]?\Z"
)


def _keyword(literal: str, lead: str | None = None) -> Family:
    return _family(
        "keyword", literal + _KEY_TAIL + _VALUE, [], lower=True, boundary=False, lead=lead, keep=_is_secret_value
    )


def _url_param(literal: str) -> Family:
    names = r"(?:[a-z0-9]+[_-])*(?:token|key|apikey|secret|password|passwd|sig|signature)="
    value = r"(?P<s>[^&\s\"'#<>\[\]\\]+)"
    return _family("url_param", re.escape(literal) + names + value, [], lower=True, boundary=False)


FAMILIES: tuple[Family, ...] = (
    _family(
        "pem",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        [],
        re.S,
        boundary=False,
    ),
    _family(
        "openai_stripe",
        r"sk(?:-(?:proj-|svcacct-|admin-|ant-(?:api|admin)\d\d-|ant-)?[A-Za-z0-9_\-]{16,}|_(?:live|test)_[A-Za-z0-9]{10,})",
        [],
    ),
    _family("stripe", r"rk_(?:live|test)_[A-Za-z0-9]{10,}", []),
    _family("stripe", r"whsec_[A-Za-z0-9+/=]{16,}", []),
    _family("telegram", r":AA[A-Za-z0-9_\-]{32,34}(?![A-Za-z0-9_\-])", [], lead=r"[0-9]{5,16}\Z", span_lead=True),
    _family("jwt", r"eyJ[A-Za-z0-9_=-]{5,}\.[A-Za-z0-9_=-]{5,}(?:\.[A-Za-z0-9_+/=-]*)?", []),
    _family("github", r"gh[pousr]_[A-Za-z0-9]{20,}", []),
    _family("github", r"github_pat_[A-Za-z0-9_]{20,}", []),
    _family("gitlab", r"gl(?:pat|ptt|dt|rt|oas|cbt|imt|ft|agent)-[A-Za-z0-9_\-]{20,}", []),
    _family("slack", r"xox[abposre]-[A-Za-z0-9\-]{10,}", []),
    _family(
        "slack_webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9_/\-]{8,})",
        [],
        boundary=False,
    ),
    _family(
        "discord_webhook",
        r"discord(?:app)?\.com/api/(?:v\d+/)?webhooks/(?P<s>[0-9]{5,}/[A-Za-z0-9_\-]{20,})",
        [],
        boundary=False,
    ),
    _family("aws", r"A[KS]IA[A-Z0-9]{16}(?![A-Z0-9])", []),
    _family("google", r"AIza[0-9A-Za-z_\-]{35}", []),
    _family("huggingface", r"hf_[A-Za-z0-9]{30,}", []),
    _family("npm", r"npm_[A-Za-z0-9]{36}", []),
    _family("pypi", r"pypi-[A-Za-z0-9_\-]{50,}", []),
    _family("bearer", r"bearer\s+(?P<s>[a-z0-9._~+/=\-]{12,})", [], lower=True),
    _family(
        "url_credentials",
        r"://[^\s/:@\"'<>\[\]\\]{0,256}:(?P<s>[^\s/@\"'<>\[\]\\]{1,256})@",
        [],
        boundary=False,
    ),
    _url_param("?"),
    _url_param("&"),
    _keyword("pass(?P<w>word|wd|phrase)?", r"(?:db|database|key)[_.-]?\Z"),
    _keyword("pwd"),
    _keyword("secret"),
    _keyword("token"),
    _keyword("key", _KEY_LEAD),
    _keyword("credential"),
)


# -- the decoded view ---------------------------------------------------------------------------

# Escapes that can hide a secret's characters are decoded; escapes of separators (``\\n``, ``%20``,
# ``\\"``) are not, they count as boundaries (and known values are also matched in escaped form).
_ESCAPES = (
    re.compile(r"\\u[0-9a-fA-F]{4}"),
    re.compile(r"\\/"),
    re.compile(r"%(?:2[1-9A-Fa-f]|[3-6][0-9A-Fa-f]|7[0-9A-Ea-e])"),
)
_BOUNDARY_ESCAPE = re.compile(r"(?:\\[nrtbf\"'\\/]|\\u[0-9a-fA-F]{4}|%[0-9A-Fa-f]{2})\Z")
_DECODE = (
    {"\\/": "/"} | {f"%{i:02X}": chr(i) for i in range(0x21, 0x7F)} | {f"%{i:02x}": chr(i) for i in range(0x21, 0x7F)}
)


def _decode_one(escape: str) -> str:
    simple = _DECODE.get(escape)
    return simple if simple is not None else chr(int(escape[2:], 16))


class View:
    """``raw`` with ``\\uXXXX``, ``\\/`` and ``%XX`` of visible characters decoded, and a map back."""

    def __init__(self, raw: str):
        self.raw = raw
        found: list[tuple[int, int]] = []
        if "\\" in raw or "%" in raw:
            for escape in _ESCAPES:
                found.extend(m.span() for m in escape.finditer(raw))
        self.identity = not found
        if self.identity:
            self.text = raw
            return
        found.sort()
        parts, at = [], 0
        for start, end in found:
            parts.append(raw[at:start])
            parts.append(raw[start:end])
            at = end
        parts.append(raw[at:])
        decoded = parts[:]
        decoded[1::2] = [_decode_one(p) for p in parts[1::2]]
        self.text = "".join(decoded)
        self._raw_at = list(accumulate(map(len, parts), initial=0))
        self._dec_at = list(accumulate(map(len, decoded), initial=0))

    def to_raw(self, start: int, end: int) -> tuple[int, int]:
        """The raw span holding decoded ``[start, end)``; an escape is taken whole."""
        if self.identity:
            return start, end
        k = bisect_right(self._dec_at, start) - 1
        raw_start = self._raw_at[k] + (0 if k % 2 else start - self._dec_at[k])
        j = bisect_right(self._dec_at, end - 1) - 1
        raw_end = self._raw_at[j + 1] if j % 2 else self._raw_at[j] + (end - self._dec_at[j])
        return raw_start, raw_end


# -- known values -------------------------------------------------------------------------------


def encoded_forms(value: str) -> set[str]:
    """``value`` as it may appear in stored text: raw, JSON-escaped (ASCII or not, nested once),
    URL-quoted."""
    forms = {value}
    for ascii_only in (True, False):
        once = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        forms.add(once)
        forms.add(json.dumps(once, ensure_ascii=ascii_only)[1:-1])
    forms.add(quote(value, safe=""))
    forms.add(quote(value, safe="/:"))
    return {f for f in forms if len(f) >= MIN_SECRET_LEN}


def _find_all(text: str, needle: str, out: list[tuple[int, int]]) -> None:
    at = text.find(needle)
    while at != -1:
        out.append((at, at + len(needle)))
        at = text.find(needle, at + len(needle))


# -- the redactor -------------------------------------------------------------------------------


def fingerprint(secret: str) -> str:
    import hashlib

    return hashlib.sha256(secret.encode("utf-8")).hexdigest()[:12]


def secret_env_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-named variables: the process's own environment and the secrets it holds
    (``runner.host.secrets``), or ``environ``."""
    if environ is None:
        environ = held.environ()
    return [v for k, v in environ.items() if SECRET_ENV_NAME.search(k) and len(v) >= MIN_SECRET_LEN]


def _lowered(text: str) -> str:
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _at_boundary(text: str, start: int) -> bool:
    return not start or text[start - 1] not in _WORD or bool(_BOUNDARY_ESCAPE.search(text, max(0, start - 6), start))


def family_spans(text: str) -> list[tuple[str, int, int]]:
    """(kind, start, end) of every pattern match in ``text`` (no decoding)."""
    found: list[tuple[str, int, int]] = []
    low: str | None = None
    for fam in FAMILIES:
        if fam.lower:
            low = _lowered(text) if low is None else low
        where = low if fam.lower else text
        assert where is not None
        if fam.hint and not any(h in where for h in fam.hint):
            continue
        for m in fam.regex.finditer(where):
            start = m.start()
            if fam.boundary and not fam.span_lead and not _at_boundary(text, start):
                continue
            if fam.lead is not None:
                lead = fam.lead.search(where, max(0, start - 40), start)
                if lead is None and not ("w" in fam.regex.groupindex and m.group("w")):
                    continue
                if fam.span_lead and lead is not None:
                    start = lead.start()
                    if not _at_boundary(text, start):
                        continue
            group = "s" if "s" in fam.regex.groupindex else 0
            s, e = m.span(group)
            if fam.keep is not None and not fam.keep(where[m.start() : s], text[s:e]):
                continue
            found.append((fam.kind, start if group == 0 else s, e))
    return found


# token formats that make a variable secret whatever its name (not the keyword/URL families)
_TOKEN_KINDS = frozenset(
    {
        "pem",
        "openai_stripe",
        "stripe",
        "telegram",
        "jwt",
        "github",
        "gitlab",
        "slack",
        "slack_webhook",
        "discord_webhook",
    }
    | {"aws", "google", "huggingface", "npm", "pypi"}
)


def is_token(value: str) -> bool:
    """``value`` holds a key in a known format (so its variable is secret whatever its name)."""
    return any(kind in _TOKEN_KINDS for kind, _, _ in family_spans(value))


def _mask(text: str, spans: list[tuple[int, int]]) -> str:
    out, at = [], 0
    for start, end in sorted(spans):
        if start < at:  # overlaps the previous mask: extend it
            at = max(at, end)
            continue
        out.append(text[at:start])
        out.append(MASK)
        at = end
    out.append(text[at:])
    return "".join(out)


class Redactor:
    """Callable that masks secrets in text; ``redact_obj`` walks JSON-like values."""

    def __init__(self, known: Iterable[str] = (), *, include_env: bool = True):
        values = set(known)
        if include_env:
            values.update(secret_env_values())
        self._values: set[str] = set()
        self._forms: list[str] = []
        self.add(*values)

    def add(self, *values: str) -> None:
        self._values.update(v for v in values if v and len(v) >= MIN_SECRET_LEN)
        forms = set().union(*(encoded_forms(v) for v in self._values)) if self._values else set()
        self._forms = sorted(forms, key=len, reverse=True)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Raw spans of ``text`` to mask."""
        spans: list[tuple[int, int]] = []
        for form in self._forms:
            if form in text:
                _find_all(text, form, spans)
        view = View(text)
        decoded = view.text
        if not view.identity:
            for value in self._values:
                if value in decoded:
                    found: list[tuple[int, int]] = []
                    _find_all(decoded, value, found)
                    spans.extend(view.to_raw(s, e) for s, e in found)
        spans.extend(view.to_raw(s, e) for _, s, e in family_spans(decoded))
        return spans

    def __call__(self, text: str) -> str:
        if not text:
            return text
        spans = self.spans(text)
        if not spans:
            return text
        out = _mask(text, spans)
        for _ in range(3):  # a mask glued to a word ("[REDACTED]ghp_...") makes a new boundary: again
            if not _MASK_GLUE.search(out):
                break
            again = self.spans(out)
            if not again:
                break
            out = _mask(out, again)
        return out

    def redact_obj(self, value: Any) -> Any:
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {k: self.redact_obj(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_obj(v) for v in value]
        return value
