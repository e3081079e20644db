"""Floors shared by the heavy benchmarks (issue 36): the same work as a runner figure with runner
out of the way.

- ``fork_pool``: a warm Python forks N children, at most P alive at once (what serve's pool does
  from its warm forkserver); each child writes its row with bare ``sqlite3`` (started), runs
  ``true`` when asked (the script-only job's ``pre_run``), writes its end and exits.
- ``ledger_rows``: bare ``sqlite3`` inserting N rows, a transaction each (serve writing the
  ledger rows of N fires).
- ``forked_request``: a warm Python with an openai client built before the fork; a forked child
  makes one request and exits (``fork_pool`` with ``base_url``: N such children, P alive).
- ``CeleryFloor``: a bare Celery worker (threads pool, the options ``runner worker`` passes) on the
  same Redis; each task records when it started in a bare ``sqlite3`` row (and runs ``true``, or
  makes one openai request, when asked). Sent -> started is the broker's round trip.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import wait

ROWS = "CREATE TABLE IF NOT EXISTS rows (i INTEGER PRIMARY KEY, sent REAL, first REAL, started REAL, ended REAL)"


def connect(path: Path) -> sqlite3.Connection:
    """A bare connection with the store's pragmas (WAL, ``synchronous=NORMAL``)."""
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _db(path: Path) -> None:
    conn = connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("DROP TABLE IF EXISTS rows")
    conn.execute(ROWS)
    conn.close()


def _rows(path: Path) -> list[tuple[int, float, float, float, float | None]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT i, sent, first, started, ended FROM rows ORDER BY i").fetchall()
    finally:
        conn.close()


@dataclass(frozen=True)
class Pool:
    running: list[float]  # ms from the start (the slot) to each child's row written
    overhead: list[float]  # ms from each child's first moment to its row written
    throughput: float  # children ended per second, from the start to the last end
    ended: list[float]  # ms from the start to each child's end written


def fork_pool(n: int, parallel: int, run_true: bool = True, base_url: str = "") -> Pool:
    """A warm Python forking ``n`` children, ``parallel`` at most alive at once (see the module doc);
    with ``base_url``, each child first makes one chat request (an openai client built before the
    fork), as a one-turn run does."""
    client = _client(base_url) if base_url else None
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "floor.db"
        _db(db)
        live: set[int] = set()
        failed = 0

        def reap() -> None:
            nonlocal failed
            pid, status = os.wait()
            live.discard(pid)
            failed += status != 0

        t0 = time.time()
        for i in range(n):
            while len(live) >= parallel:
                reap()
            pid = os.fork()
            if pid == 0:  # the child
                code = 1
                try:
                    first = time.time()
                    if client is not None:
                        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "floor"}])
                    conn = connect(db)
                    conn.execute("INSERT INTO rows VALUES (?, ?, ?, ?, NULL)", (i, t0, first, time.time()))
                    if run_true:
                        subprocess.run(["true"], check=True)
                    conn.execute("UPDATE rows SET ended = ? WHERE i = ?", (time.time(), i))
                    code = 0
                finally:
                    os._exit(code)
            live.add(pid)
        while live:
            reap()
        if failed:
            raise SystemExit(f"{failed} floor children failed")
        rows = _rows(db)
    end = max(r[4] or 0.0 for r in rows)
    return Pool(
        running=[(r[3] - t0) * 1000 for r in rows],
        overhead=[(r[3] - r[2]) * 1000 for r in rows],
        throughput=len(rows) / (end - t0),
        ended=[((r[4] or end) - t0) * 1000 for r in rows],
    )


def ledger_rows(n: int) -> list[float]:
    """Ms from the start to each of ``n`` rows committed by bare ``sqlite3``, a transaction each."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "floor.db"
        _db(db)
        conn = connect(db)
        t0 = time.time()
        out = []
        for i in range(n):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO rows VALUES (?, ?, ?, ?, NULL)", (i, t0, t0, time.time()))
            conn.execute("COMMIT")
            out.append((time.time() - t0) * 1000)
        conn.close()
    return out


def _client(base_url: str) -> Any:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="sk-bench-floor")
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "warm"}])
    return client


def forked_request(samples: int, base_url: str) -> list[float]:
    """Ms from ``os.fork()`` to the child's exit, the child making one chat request with an openai
    client built before the fork, for each of ``samples``."""
    client = _client(base_url)
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "floor"}])
                code = 0
            finally:
                os._exit(code)
        if os.waitpid(pid, 0)[1] != 0:
            raise SystemExit("a floor child failed")
        out.append((time.perf_counter() - started) * 1000)
    return out


APP = r"""
import sqlite3, subprocess, time
from celery import Celery
app = Celery("floor", broker=BROKER, set_as_current=False)
app.conf.update(task_acks_late=True, task_ignore_result=True, task_serializer="json", accept_content=["json"],
                worker_prefetch_multiplier=1, worker_hijack_root_logger=False)
CLIENT = []

@app.task(name="floor.run", acks_late=True, ignore_result=True)
def run(i, sent, work, db, base_url):
    first = time.time()
    if work == "request":
        if not CLIENT:
            import openai
            CLIENT.append(openai.OpenAI(base_url=base_url, api_key="sk-bench-floor"))
        CLIENT[0].chat.completions.create(model="m", messages=[{"role": "user", "content": "floor"}])
    conn = sqlite3.connect(db, timeout=30, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("INSERT INTO rows VALUES (?, ?, ?, ?, NULL)", (i, sent, first, time.time()))
    if work == "true":
        subprocess.run(["true"], check=True)
    conn.execute("UPDATE rows SET ended = ? WHERE i = ?", (time.time(), i))
    conn.close()
"""


@dataclass(frozen=True)
class Trips:
    started: list[float]  # ms from each task sent to its row written (after its request, if any)
    throughput: float  # tasks ended per second, from the first sent to the last end
    ended: list[float]  # ms from each task sent to its end written


class CeleryFloor:
    """``workers`` bare Celery workers x ``concurrency`` threads on ``broker`` (see the module doc)."""

    def __init__(self, broker: str, workers: int, concurrency: int):
        self.broker, self.dir = broker, Path(tempfile.mkdtemp(prefix="bench-celery-floor-"))
        (self.dir / "floorapp.py").write_text(f"BROKER = {broker!r}\n" + APP)
        self.db = self.dir / "floor.db"
        self.procs: list[subprocess.Popen[bytes]] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
        env["PYTHONPATH"] = str(self.dir)
        for w in range(workers):
            log = self.dir / f"w{w}.log"
            with open(log, "w") as out:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "celery", "-A", "floorapp", "worker", "--pool=threads",
                         f"--concurrency={concurrency}", f"--hostname=floor{w}@bench", "--queues=floor",
                         "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"],
                        env=env, cwd=self.dir, stdout=out, stderr=subprocess.STDOUT,
                    )
                )  # fmt: skip
        try:
            for w, proc in enumerate(self.procs):
                log = self.dir / f"w{w}.log"
                wait(lambda log=log, proc=proc: "ready" in log.read_text() or proc.poll() is not None, 60, "a worker")
                if proc.poll() is not None:
                    raise SystemExit(f"the bare Celery worker exited: {log.read_text()[-800:]}")
        except BaseException:
            self.stop()
            raise
        from celery import Celery

        self.app = Celery("floor-sender", broker=broker, set_as_current=False)
        self.app.conf.update(task_serializer="json", accept_content=["json"])

    def send(self, n: int, work: str = "", base_url: str = "", one_at_a_time: bool = False) -> Trips:
        """``n`` tasks, all at once or each after the last one's row; ``work``: "", "true", "request"."""
        _db(self.db)
        t0 = time.time()
        for i in range(n):
            self.app.send_task("floor.run", args=[i, time.time(), work, str(self.db), base_url], queue="floor")
            if one_at_a_time:
                wait(lambda i=i: sum(r[4] is not None for r in _rows(self.db)) > i, 60, "a floor task", 0.005)
        wait(lambda: sum(r[4] is not None for r in _rows(self.db)) >= n, 600, f"{n} floor tasks", 0.02)
        rows = _rows(self.db)
        end = max(r[4] or 0.0 for r in rows)
        return Trips(
            started=[(r[3] - r[1]) * 1000 for r in rows],
            throughput=len(rows) / (end - t0),
            ended=[((r[4] or end) - r[1]) * 1000 for r in rows],
        )

    def __enter__(self) -> CeleryFloor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
