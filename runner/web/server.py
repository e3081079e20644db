"""Serving the app: ``runner web`` (uvicorn in the foreground) and ``runner serve --web``
(uvicorn on a thread of the daemon, started and stopped as one of serve's loops)."""

from __future__ import annotations

import importlib.util
import logging
import socket
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runner.errors import UsageError
from runner.host import secrets
from runner.web.app import build_app
from runner.web.auth import Bind, TokenSource, check_bind
from runner.web.source import Source

if TYPE_CHECKING:
    from runner.serve.host import ServeHost, Ticker
    from runner.settings import Settings

log = logging.getLogger("runner.web")
GRACEFUL_S = 2
EXTRA = ("starlette", "uvicorn", "prometheus_client", "markdown_it", "multipart")


def token_source(settings: Settings, bind: Bind) -> TokenSource:
    """The tokens of a serving dashboard, re-read when the token files or config.yaml's ``web:``
    references change (a config.yaml that no longer loads keeps the last good references)."""
    source = Source(settings)
    web = settings.config.web
    last = [(web.token, web.read_only_token)]

    def refs() -> tuple[str | None, str | None]:
        loaded = source.config_loaded()
        if loaded.error is None:
            last[0] = (loaded.value.web.token, loaded.value.web.read_only_token)
        return last[0]

    return TokenSource(settings.home, refs, secrets.getenv, loopback=bind.loopback, warn=log.warning)


def prepare(settings: Settings, bind: Bind) -> tuple[TokenSource, socket.socket]:
    """Check the bind against the tokens and bind the socket now, so a refused bind or a port in
    use is one line and exit 2 before anything else starts."""
    missing = [name for name in EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"runner web needs the web extra ({', '.join(missing)} missing): pip install -e '.[web]'")
    tokens = token_source(settings, bind)
    check_bind(bind, tokens.load())
    family = socket.AF_INET6 if ":" in bind.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted connections
    try:
        sock.bind((bind.host, bind.port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"runner web: cannot listen on {bind}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(False)
    return tokens, sock


def _server(settings: Settings, tokens: TokenSource, *, log_level: str = "warning") -> Any:
    import uvicorn

    config = uvicorn.Config(
        build_app(settings, tokens),
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_S,
        lifespan="off",
        proxy_headers=False,
        server_header=False,
    )
    return uvicorn.Server(config)


def serve_forever(settings: Settings, sock: socket.socket, tokens: TokenSource) -> int:
    """``runner web``: serve until SIGTERM/SIGINT (uvicorn's own handlers)."""
    server = _server(settings, tokens)
    server.run(sockets=[sock])
    return 0


class WebThread:
    """The app on a thread of ``runner serve`` (a ticker that only starts and stops it)."""

    name = "web"

    def __init__(self, settings: Settings, sock: socket.socket, tokens: TokenSource):
        self.server = _server(settings, tokens)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, name="runner-web", daemon=True
        )
        self.sock = sock
        self.thread.start()

    def tick(self, now: datetime) -> None:
        return None

    def next_wake(self, now: datetime) -> datetime | None:
        return None

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=GRACEFUL_S + 3)
        self.sock.close()


def serve_loop(settings: Settings, sock: socket.socket, tokens: TokenSource) -> Callable[[ServeHost], Ticker]:
    """A loop factory for ``run_serve(loops=...)``: the web thread starts with serve's loops."""
    return lambda host: WebThread(settings, sock, tokens)
