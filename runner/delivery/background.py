"""Alerts from serve's main thread, sent on worker threads so a slow or retrying sink never holds
up scheduling. Each thread has its own store connection and ``Alerter``, opened at its first run
alert; serve's notices (``Notice``) need no store. An alert that fails (the store cannot answer
for its throttle or its event) is logged, and the thread goes on with the next."""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.delivery.alerts import Alerter, Notice, RunEnd, send_notice, tail_of_run
from runner.store import Store

if TYPE_CHECKING:
    from runner.config.jobs import Job
    from runner.config.machine import Config


@dataclass(frozen=True)
class _Item:
    kind: str  # run_ended | paused | notice
    job: Job | None
    end: RunEnd | None
    why: str = ""
    notice: Notice | None = None


class BackgroundAlerts:
    def __init__(
        self, store_path: Path, config: Config, *, home: Path, base_dir: Path, log: logging.Logger, threads: int = 4
    ):
        self.store_path, self.config, self.home, self.base_dir, self.log = store_path, config, home, base_dir, log
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._work, name=f"alerts-{i}", daemon=True) for i in range(threads)]
        for t in self._threads:
            t.start()

    def run_ended(self, job: Job | None, end: RunEnd) -> None:
        self._queue.put(_Item("run_ended", job, end))

    def paused(self, job: Job | None, end: RunEnd, why: str) -> None:
        self._queue.put(_Item("paused", job, end, why))

    def notice(self, notice: Notice) -> None:
        self._queue.put(_Item("notice", None, None, notice=notice))

    def close(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` seconds for queued alerts, then stop the threads (daemons: never block exit)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._queue.unfinished_tasks:
            self.log.warning("%d alert(s) not sent before serve stopped", self._queue.unfinished_tasks)
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        alerter: Alerter | None = None
        try:
            while (item := self._queue.get()) is not None:
                try:
                    if item.notice is not None:
                        self._notice(item.notice)
                        continue
                    if alerter is None:
                        store = Store.open(self.store_path, migrate=False)
                        alerter = Alerter(store, self.config, home=self.home, base_dir=self.base_dir)
                    self._one(alerter, item)
                except Exception as exc:  # noqa: BLE001 - logged; the thread serves the next alert
                    what = f"{item.end.job} run {item.end.run_id}" if item.end is not None else "serve"
                    self.log.error("alert %s for %s not sent: %s", item.kind, what, exc)
                finally:
                    self._queue.task_done()
        finally:
            if alerter is not None:
                alerter.store.close()

    def _notice(self, notice: Notice) -> None:
        results = send_notice(self.config, notice, home=self.home, base_dir=self.base_dir)
        for r in results:
            level = logging.INFO if r.ok else logging.WARNING
            self.log.log(level, "alert %s to %s: %s", notice.event, r.sink, "ok" if r.ok else f"FAILED {r.detail}")

    def _one(self, alerter: Alerter, item: _Item) -> None:
        results: list[Any]
        end = item.end
        assert end is not None
        if item.kind == "paused":
            results = alerter.paused(item.job, end, item.why)
        else:
            end = RunEnd(end.job, end.run_id, end.status, end.reason, end.error, end.tail or _tail(alerter, end.run_id))
            results = alerter.run_ended(item.job, end)
        for r in results:
            level = logging.INFO if r.ok else logging.WARNING
            self.log.log(
                level,
                "alert %s for %s run %s to %s: %s",
                item.kind,
                end.job,
                end.run_id,
                r.sink,
                "ok" if r.ok else f"FAILED {r.detail}",
            )


def _tail(alerter: Alerter, run_id: str) -> str:
    return tail_of_run(alerter.store, run_id)
