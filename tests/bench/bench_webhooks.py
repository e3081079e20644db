"""Issue 34's webhook benchmarks on a real ``runner serve --web`` (the model is the fake server):

1. webhook accepted -> run started under serve: ``runs.started_at - hook_deliveries.received_at``
   for 30 deliveries to a one-turn agent job (``overlap: allow``), p50 and p99 (target p50 <= 100 ms);
2. 200 deliveries in 10 s to one script-only job with ``overlap: queue``: a 429 is retried after
   its ``Retry-After`` with the same delivery id (as a sender does), and every accepted delivery
   is sent once more (a redelivery): 0 lost (each delivery has exactly one run, and it ran),
   0 doubled (no delivery id has two runs).

Main before: both parts again on ``serve --web`` from main before's tree and Python, after this
tree's. Floor of accepted -> started: a bare POST to the same server that it answers without
starting anything (a wrong signature, 401), round trip; lost and doubled are counts with no
floor (0 is the only right answer).

    python tests/bench/bench_webhooks.py [--deliveries 30] [--burst 200]
"""

from __future__ import annotations

import argparse
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

from _before import Tree, or_reason, trees  # noqa: E402
from _common import REPO, beside, pct, row, wait  # noqa: E402

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


def wait_quietly(check: object, timeout: float) -> bool:
    """Whether ``check()`` came true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=30, help="deliveries timed accepted -> started")
    parser.add_argument("--burst", type=int, default=200, help="deliveries sent at 20/s to the queue job")
    args = parser.parse_args()
    found = {t.name: or_reason(t, lambda t=t: one_tree(t, args.deliveries, args.burst)) for t in trees()}
    here, before = found["this tree"], found.get("main before")
    if isinstance(before, str):
        print(f"main before: {before}")

    def then(key: str) -> object:
        return before[key] if isinstance(before, dict) else before and "not measured (see above)"

    beside("webhook accepted -> run started, p50", here["p50"], then("p50"), here["floor"],  # type: ignore[arg-type]
           "a bare POST it answers 401, round trip", "<= 100 ms")
    for key in ("lost", "doubled"):
        beside(f"{args.burst} deliveries, {key}", str(here[key]), str(then(key)) if before else None,
               "n/a (a count; 0 is right)", "", "0", "")


def one_tree(tree: Tree, deliveries: int, burst: int) -> dict[str, float]:
    print(f"== {tree.name}")
    fake = FakeOpenAI().start()
    fake.default = final("ok")
    root = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
    home = root / "home"
    home.mkdir()
    (home / "config.yaml").write_text("serve:\n  max_parallel: 8\n  worker_max_runs: 50\n")
    (root / "jobs.yaml").write_text(JOBS)
    env = tree.env(
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
        [tree.python, "-m", "runner", "serve", "--web", f"127.0.0.1:{port}"], env=env, cwd=root, stderr=log
    )
    db = home / "runner.db"
    try:

        def up() -> bool:
            try:
                return httpx.get(f"{url}/static/app.css", timeout=1).status_code > 0
            except httpx.TransportError:
                return False

        if not wait_quietly(up, 30):
            raise SystemExit(f"serve --web did not come up: {(root / 'serve.log').read_text().strip()}")
        client = httpx.Client(timeout=30)
        # 1. accepted -> started
        ids = []
        for i in range(deliveries):
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
        print(f"webhook accepted -> run started (serve --web, one-turn agent job, {deliveries} deliveries)")
        row("p50", f"{statistics.median(lat):.0f} ms", "<= 100 ms")
        row("p99", f"{pct(lat, 99):.0f} ms", "-")
        floor = []
        for _ in range(deliveries):
            started = time.perf_counter()
            r = client.post(f"{url}/hooks/hook", content=b"{}", headers={"X-Hub-Signature-256": "sha256=00"})
            floor.append((time.perf_counter() - started) * 1000)
            assert r.status_code == 401, r.status_code

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
        for i in range(burst):
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
        lost = burst - sum(1 for _, st in runs if st == "succeeded")
        doubled = total_runs - len({d for d, _ in runs})
        retries = sum(len(v) - 1 for v in results.values())
        print(f"{burst} deliveries to one overlap: queue job (first sends over {sent_in:.1f} s, drained at {drained:.1f} s)")
        row("accepted deliveries", str(len(accepted)), str(burst))
        row("429 answers (retried by the sender)", str(retries), "-")
        row("runs by status", str(by_status), "-")
        row("lost", str(lost), "0")
        row("doubled", str(doubled), "0")
        return {"p50": statistics.median(lat), "floor": statistics.median(floor), "lost": lost, "doubled": doubled}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
        fake.stop()


if __name__ == "__main__":
    main()
