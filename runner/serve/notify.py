"""systemd's readiness protocol (``Type=notify``, sd_notify(3)) without libsystemd: one datagram
to the unix socket named by ``$NOTIFY_SOCKET`` (a path, or ``@name`` in the abstract namespace).
serve sends ``READY=1`` once started, ``WATCHDOG=1`` from its main loop every half
``$WATCHDOG_USEC`` (so a hung loop is restarted by systemd), ``STOPPING=1`` when it begins to stop.
Without ``$NOTIFY_SOCKET`` every call is a no-op."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from datetime import datetime, timedelta


def sd_notify(state: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (``KEY=VALUE`` lines) to systemd; False when not under a notify socket or
    the socket is gone (systemd ignores a service that stops listening; so do we)."""
    env = os.environ if environ is None else environ
    address = env.get("NOTIFY_SOCKET", "")
    if not address or address[0] not in "/@":
        return False
    target = "\0" + address[1:] if address[0] == "@" else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(target)
            sock.sendall(state.encode())
    except OSError:
        return False
    return True


def watchdog_interval(environ: Mapping[str, str] | None = None) -> timedelta | None:
    """Half of ``$WATCHDOG_USEC`` when the watchdog is meant for this process (``$WATCHDOG_PID``
    unset or ours), else None."""
    env = os.environ if environ is None else environ
    usec, pid = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return timedelta(microseconds=int(usec) / 2)


class WatchdogTicker:
    """``WATCHDOG=1`` from serve's main loop, every half watchdog interval."""

    name = "watchdog"

    def __init__(self, every: timedelta):
        self.every = every
        self._next: datetime | None = None

    def tick(self, now: datetime) -> None:
        if self._next is not None and now < self._next:
            return
        sd_notify("WATCHDOG=1")
        self._next = now + self.every

    def next_wake(self, now: datetime) -> datetime | None:
        return self._next

    def close(self) -> None:
        return None
