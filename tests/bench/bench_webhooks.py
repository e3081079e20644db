"""Issue 34's webhook benchmarks on a real ``runner serve --web`` (the model is the fake server):

1. webhook accepted -> run started under serve: ``runs.started_at - hook_deliveries.received_at``
   for 30 deliveries to a one-turn agent job (``overlap: allow``), p50 and p99 (target p50 <= 100 ms);
2. 200 deliveries in 10 s to one script-only job with ``overlap: queue``: a 429 is retried after
   its ``Retry-After`` with the same delivery id (as a sender does), and every accepted delivery
   is sent once more (a redelivery): 0 lost (each delivery has exactly one run, and it ran),
   0 doubled (no delivery id has two runs).

    python tests/bench/bench_webhooks.py
"""

from __future__ import annotations

import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, clean_env, pct, row, wait  # noqa: E402

sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from runner.safety.signature import hub_signature  # noqa: E402
from runner.testing import FakeOpenAI, final  # noqa: E402

SECRET = "bench-secret"
JOBS = """
jobs:
  hook:
    prompt: "event {{ trigger.payload }}"
    toolsets: []
    overlap: allow
    triggers: [{webhook: {secret: env:HOOK_SECRET}}]
  q:
    agent: false
    pre_run: "true"
    overlap: queue
    deliver: []
    triggers: [{webhook: {secret: env:HOOK_SECRET}}]
"""


def post(client: httpx.Client, url: str, job: str, body: bytes, delivery: str) -> httpx.Response:
    headers = {
        "Content-Type": "application/json",
        "X-Hub-Signature-256": hub_signature(SECRET.encode(), body),
        "X-GitHub-Delivery": delivery,
    }
    return client.post(f"{url}/hooks/{job}", content=body, headers=headers)


def query(db: Path, sql: str) -> list[tuple]:  # type: ignore[type-arg]
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def main() -> None:
    fake = FakeOpenAI().start()
    fake.default = final("ok")
    root = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
    home = root / "home"
    home.mkdir()
    (home / "config.yaml").write_text("serve:\n  max_parallel: 8\n  worker_max_runs: 50\n")
    (root / "jobs.yaml").write_text(JOBS)
    env = clean_env(
        RUNNER_HOME=str(home),
        RUNNER_JOBS=str(root / "jobs.yaml"),
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_API_KEY="sk-bench",
        HOOK_SECRET=SECRET,
    )
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = open(root / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "serve", "--web", f"127.0.0.1:{port}"], env=env, cwd=root, stderr=log
    )
    db = home / "runner.db"
    try:

        def up() -> bool:
            try:
                return httpx.get(f"{url}/static/app.css", timeout=1).status_code > 0
            except httpx.TransportError:
                return False

        wait(up, 30, "serve --web")
        client = httpx.Client(timeout=30)
        # 1. accepted -> started
        ids = []
        for i in range(30):
            r = post(client, url, "hook", f'{{"i": {i}}}'.encode(), f"lat-{i}")
            assert r.status_code == 202, r.text
            ids.append(r.json()["id"])
            time.sleep(0.3)
        wait(lambda: all(x[0] == "succeeded" for x in query(db, "SELECT status FROM runs WHERE job='hook'")), 60, "runs")
        got = query(
            db,
            "SELECT d.received_at, r.started_at FROM hook_deliveries d JOIN runs r ON r.id = d.run_id WHERE d.job='hook'",
        )
        lat = [(datetime.fromisoformat(s) - datetime.fromisoformat(a)).total_seconds() * 1000 for a, s in got]
        print("webhook accepted -> run started (serve --web, one-turn agent job, 30 deliveries)")
        row("p50", f"{statistics.median(lat):.0f} ms", "<= 100 ms")
        row("p99", f"{pct(lat, 99):.0f} ms", "-")

        # 2. 200 deliveries in 10 s, overlap: queue
        results: dict[str, list[int]] = {}
        accepted: dict[str, str] = {}
        lock = threading.Lock()

        def deliver(i: int) -> None:
            c = httpx.Client(timeout=30)
            delivery = f"q-{i}"
            body = f'{{"n": {i}}}'.encode()
            while True:
                r = post(c, url, "q", body, delivery)
                with lock:
                    results.setdefault(delivery, []).append(r.status_code)
                if r.status_code == 429:
                    time.sleep(float(r.headers.get("retry-after", "1")))
                    continue
                assert r.status_code in (200, 202), r.text
                with lock:
                    accepted[delivery] = r.json()["id"]
                again = post(c, url, "q", body, delivery)  # a redelivery: same run, no second one
                assert again.status_code == 200 and again.json()["id"] == accepted[delivery], again.text
                c.close()
                return

        threads = []
        t0 = time.monotonic()
        for i in range(200):
            due = t0 + i * 0.05
            time.sleep(max(0.0, due - time.monotonic()))
            t = threading.Thread(target=deliver, args=(i,))
            t.start()
            threads.append(t)
        sent_in = time.monotonic() - t0
        for t in threads:
            t.join(300)
        wait(
            lambda: query(db, "SELECT COUNT(*) FROM runs WHERE job='q' AND status IN ('queued','running')")[0][0] == 0,
            300,
            "the queue to drain",
        )
        drained = time.monotonic() - t0
        runs = query(db, "SELECT d.delivery, r.status FROM hook_deliveries d JOIN runs r ON r.id=d.run_id WHERE d.job='q'")
        total_runs = query(db, "SELECT COUNT(*) FROM runs WHERE job='q'")[0][0]
        by_status: dict[str, int] = {}
        for _, status in runs:
            by_status[status] = by_status.get(status, 0) + 1
        lost = 200 - sum(1 for _, st in runs if st == "succeeded")
        doubled = total_runs - len({d for d, _ in runs})
        retries = sum(len(v) - 1 for v in results.values())
        print(f"200 deliveries to one overlap: queue job (first sends over {sent_in:.1f} s, drained at {drained:.1f} s)")
        row("accepted deliveries", str(len(accepted)), "200")
        row("429 answers (retried by the sender)", str(retries), "-")
        row("runs by status", str(by_status), "-")
        row("lost", str(lost), "0")
        row("doubled", str(doubled), "0")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
        fake.stop()


if __name__ == "__main__":
    main()
