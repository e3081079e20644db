"""A run's inbox of messages sent to it while it runs (steering: ``runner runs say RUN MESSAGE``,
the dashboard's box on the run page, a kanban comment on the task the run works on).

The run's cancel watch (``runner.run.cancel``), on its own thread, puts each message it finds in
the store here; the agent loop (``runner.agent.loop.run_loop``) takes them at the top of each turn,
before its next model request, so a message never lands between an assistant turn's tool calls and
their results, and a run parked on an approval gets it once the approval is answered. When the run
ends, ``delivered`` and ``left`` tell the store which messages the model was given
(``runner.store.control.settle_steers``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from runner.events import Steer


class Inbox:
    """Thread-safe: ``put`` from the watch thread, ``take`` from the run's loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[Steer] = []
        self._seen: set[str] = set()
        self._delivered: list[str] = []

    def seen(self) -> frozenset[str]:
        """The ids of every message put here so far (the watch does not read them twice)."""
        with self._lock:
            return frozenset(self._seen)

    def put(self, steers: Iterable[Steer]) -> None:
        with self._lock:
            for steer in steers:
                if steer.request_id not in self._seen:
                    self._seen.add(steer.request_id)
                    self._waiting.append(steer)

    def take(self) -> list[Steer]:
        """The messages waiting, oldest first; from now on they count as given to the model."""
        with self._lock:
            taken, self._waiting = self._waiting, []
            self._delivered.extend(s.request_id for s in taken)
        return taken

    def delivered(self) -> list[str]:
        with self._lock:
            return list(self._delivered)

    def left(self) -> list[Steer]:
        """The messages still waiting (the run asked the model nothing more after they came)."""
        with self._lock:
            return list(self._waiting)
