"""Who may use the dashboard: tokens (full and read-only), the bind rule, CSRF.

Standard library only, so ``runner web`` and ``runner serve --web`` can refuse a bad bind before
starlette or uvicorn is imported.

- Tokens live in RUNNER_HOME (``web-token``, ``web-token-readonly``, mode 0600; ``runner web token``
  writes them) or come from config.yaml ``web: {token: env:NAME, read_only_token: env:NAME}``.
- Loopback binds without any token configured: everyone who can reach the port may act.
  Once a token exists, every request must carry one (``Authorization: Bearer``, or the session
  cookie the login form sets). Any other bind refuses to start without a full token.
- POSTs carry a CSRF token: a random value in a cookie and the same value in the form
  (``csrf`` field) or the ``X-CSRF-Token`` header (double submit), compared in constant time.
- State-changing requests (POST, PUT, PATCH, DELETE) name their origin: a present ``Origin`` must
  be the dashboard's own; one that is absent or ``null`` (what Chromium sends after a cross-origin
  redirect) needs the token in ``Authorization: Bearer``. Cookies do not keep ports apart, so a page
  on another port of the same host can plant the CSRF cookie and the browser sends the session
  cookie with its post: the Origin is what tells such a post from the dashboard's own.
- One request is outside all of these: ``POST /hooks/JOB`` exactly (``is_hook_request``), which
  its sender's HMAC signature authenticates (``runner.web.hooks``). Any other method, or any other
  path under or near ``/hooks/`` (dot segments, percent-encoding, a trailing slash, ``/hooksX``),
  is an ordinary dashboard request.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from runner.errors import UsageError

TOKEN_FILE = "web-token"
READ_ONLY_TOKEN_FILE = "web-token-readonly"
SESSION_COOKIE = "runner_session"
CSRF_COOKIE = "runner_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
DEFAULT_BIND = "127.0.0.1:9119"


UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: the webhook route's path: JOB as jobs.yaml spells a name (``runner.config.jobfile.JOB_NAME``),
#: so never ``.``/``..``, ``%`` or a further ``/``
HOOK_PATH = re.compile(r"/hooks/[a-z0-9][a-z0-9_-]{0,63}")


class Role(StrEnum):
    ADMIN = "admin"  # may view and act
    VIEWER = "viewer"  # may view only (the read-only token)


@dataclass(frozen=True)
class Bind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_is_loopback(header: str) -> bool:
    """Whether a Host header (``name[:port]``, ``[v6]:port``) names this machine's loopback."""
    text = header.strip()
    if text.startswith("["):
        name = text[1:].partition("]")[0]
    else:
        name = text.rpartition(":")[0] if text.count(":") == 1 else text
    return is_loopback(name.lower())


def parse_bind(text: str, *, where: str = "--bind") -> Bind:
    """``HOST:PORT`` (``[::1]:9119`` for IPv6); a bad value is a one-line usage error."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"{where} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9119")
    return Bind(host, int(port))


@dataclass(frozen=True)
class Tokens:
    """The configured tokens (None: not set). Never printed, never put in a page."""

    admin: str | None
    viewer: str | None
    locked: bool = False  # no token can be read now where one is needed: every request is refused

    @property
    def required(self) -> bool:
        return self.admin is not None or self.viewer is not None or self.locked

    def role_for(self, presented: str | None) -> Role | None:
        if not presented:
            return None
        if self.admin is not None and hmac.compare_digest(presented.encode(), self.admin.encode()):
            return Role.ADMIN
        if self.viewer is not None and hmac.compare_digest(presented.encode(), self.viewer.encode()):
            return Role.VIEWER
        return None

    def role_for_session(self, value: str | None) -> Role | None:
        """The role of a session cookie (an HMAC of the token, so the cookie never holds the token)."""
        if not value:
            return None
        for token, role in ((self.admin, Role.ADMIN), (self.viewer, Role.VIEWER)):
            if token is not None and hmac.compare_digest(value.encode(), session_value(token).encode()):
                return role
        return None


def session_value(token: str) -> str:
    return hmac.new(token.encode(), b"runner-web-session", "sha256").hexdigest()


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the web token: {exc.strerror or exc}") from None
    return text or None


def _from_env(ref: str | None, getenv: Callable[[str], str | None], what: str) -> str | None:
    if ref is None:
        return None
    value = getenv(ref[4:])
    if not value:
        raise UsageError(f"config.yaml web.{what}: {ref} is not set in the environment")
    return value


def load_tokens(
    home: Path, *, token_ref: str | None, read_only_ref: str | None, getenv: Callable[[str], str | None]
) -> Tokens:
    """config.yaml's ``env:`` references first, else the files in RUNNER_HOME."""
    admin = _from_env(token_ref, getenv, "token") or _read(home / TOKEN_FILE)
    viewer = _from_env(read_only_ref, getenv, "read_only_token") or _read(home / READ_ONLY_TOKEN_FILE)
    return Tokens(admin=admin, viewer=viewer)


@dataclass(frozen=True)
class _Seen:
    """What the tokens were last read from: config.yaml's references and each file's identity."""

    refs: tuple[str | None, str | None]
    files: tuple[tuple[int, int, int] | None, ...]


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class TokenSource:
    """The tokens as they are now, for a dashboard that lives for days: RUNNER_HOME's token files
    are re-read when they change (``runner web token`` or ``--rotate`` applies to the running
    server on its next request, no restart) and config.yaml's ``web.token`` / ``web.read_only_token``
    references as ``refs()`` gives them (the config reloaded when it changes).

    A dashboard bound off loopback never falls open: when neither token can be read there (files
    removed, a variable unset, a file unreadable) every request is refused until one can. On loopback
    with no token at all it answers without one, like a fresh start; a token that cannot be read
    (an ``env:`` variable unset, an unreadable file) locks it too rather than opening it."""

    def __init__(
        self,
        home: Path,
        refs: Callable[[], tuple[str | None, str | None]],
        getenv: Callable[[str], str | None],
        *,
        loopback: bool,
        warn: Callable[[str], None] | None = None,
    ):
        import threading

        self.home, self.refs, self.getenv, self.loopback = home, refs, getenv, loopback
        self.warn = warn or (lambda text: None)
        self._lock = threading.Lock()
        self._seen: _Seen | None = None
        self._tokens = Tokens(admin=None, viewer=None, locked=True)

    def load(self) -> Tokens:
        """Read the tokens now, raising ``UsageError`` as a fresh start would (the bind check)."""
        token_ref, read_only_ref = self.refs()
        tokens = load_tokens(self.home, token_ref=token_ref, read_only_ref=read_only_ref, getenv=self.getenv)
        with self._lock:
            self._seen, self._tokens = self._stamp(), tokens
        return tokens

    def _stamp(self) -> _Seen:
        return _Seen(self.refs(), (_identity(self.home / TOKEN_FILE), _identity(self.home / READ_ONLY_TOKEN_FILE)))

    def current(self) -> Tokens:
        stamp = self._stamp()
        with self._lock:
            if stamp == self._seen:
                return self._tokens
        try:
            tokens = load_tokens(self.home, token_ref=stamp.refs[0], read_only_ref=stamp.refs[1], getenv=self.getenv)
        except UsageError as exc:
            self.warn(f"runner web: {exc}; refusing every request until a token can be read")
            tokens = Tokens(admin=None, viewer=None, locked=True)
        if not tokens.required and not self.loopback:
            self.warn("runner web: no token left for a bind off loopback; refusing every request until one exists")
            tokens = Tokens(admin=None, viewer=None, locked=True)
        with self._lock:
            self._seen, self._tokens = stamp, tokens
        return tokens


def check_bind(bind: Bind, tokens: Tokens) -> None:
    """Anything but loopback needs a full token: refuse with one line otherwise."""
    if not bind.loopback and tokens.admin is None:
        raise UsageError(
            f"runner web: binding {bind} (not loopback) needs a token; run `runner web token` "
            f"(writes RUNNER_HOME/{TOKEN_FILE}, mode 0600) or set web.token: env:NAME in config.yaml"
        )


def write_token(home: Path, *, read_only: bool, rotate: bool) -> tuple[Path, str, bool]:
    """(path, token, created): the existing token unless ``rotate``; a new one is written 0600."""
    path = home / (READ_ONLY_TOKEN_FILE if read_only else TOKEN_FILE)
    existing = _read(path)
    if existing is not None and not rotate:
        return path, existing, False
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (token + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path, token, True


def new_csrf() -> str:
    return secrets.token_urlsafe(24)


def csrf_ok(cookie: str | None, submitted: str | None) -> bool:
    if not cookie or not submitted:
        return False
    return hmac.compare_digest(cookie.encode(), submitted.encode())


def same_origin(origin: str, *, host: str, scheme: str) -> bool:
    """Whether an ``Origin`` header names the dashboard itself: the Host the request was sent to,
    over the request's scheme (or https in front of an http dashboard: a TLS proxy)."""
    origin_scheme, sep, netloc = origin.strip().lower().partition("://")
    schemes = {scheme.lower(), "https"}
    return bool(sep) and bool(host) and origin_scheme in schemes and netloc == host.strip().lower()


def is_hook_request(method: str, path: str, raw_path: bytes | None, root_path: str = "") -> bool:
    """Whether a request is a webhook delivery (its signature is its authentication, not the
    token, and no CSRF or Origin rule applies): exactly ``POST /hooks/JOB``, both as sent
    (``raw_path``, ASGI's undecoded path: nothing percent-encoded) and as decoded (``path``, what
    the router matches). ``/hooks/../runs``, ``/hooks%2F..``, ``/hooks/JOB/``, ``/hooksX``, a GET or a
    PUT, or an app under a ``root_path`` (runner web never sets one) are ordinary requests."""
    if method != "POST" or root_path:
        return False
    if HOOK_PATH.fullmatch(path) is None:
        return False
    return raw_path is None or raw_path == path.encode("ascii")


def cross_site_refusal(method: str, origin: str | None, *, host: str, scheme: str, bearer: bool) -> str | None:
    """Why a request may not change anything (None: it may). ``bearer``: it carries a valid token
    in ``Authorization: Bearer``, which no other site's page can make a browser send."""
    if method.upper() not in UNSAFE_METHODS:
        return None
    if origin is None or origin.strip().lower() == "null":
        if bearer:
            return None
        return (
            "cross-site request refused: no Origin (or Origin: null); send the dashboard's own Origin "
            "or the token in Authorization: Bearer"
        )
    if not same_origin(origin, host=host, scheme=scheme):
        return f"cross-site request refused: Origin {origin.strip()[:100]} is not this dashboard"
    return None
