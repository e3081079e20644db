"""runner web: page times on a big store, SSE latency, memory.

- Server time (round trip on loopback, so an upper bound) of the runs page (first page, a deep
  page, filtered by status and by job) and of a run's page, with 100,000 runs and 2,000,000 events
  in the store (targets p50 <= 50 ms, p99 <= 200 ms). The store is generated straight into SQLite
  once and cached under /tmp/runner-bench-web (delete it to rebuild).
- An event written by a worker (another process's connection) -> received over SSE (p50 <= 500 ms).
- `runner web` idle RSS (<= 80 MB); `runner serve --web` RSS over `runner serve` alone (<= +60 MB).

Main before had no dashboard, so there is no "before" figure for these.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._common import clean_env, row  # noqa: E402

CACHE = Path("/tmp/runner-bench-web")
RUNS, EVENTS_PER_RUN, JOBS = 100_000, 20, 20
STATUSES = ["succeeded"] * 90 + ["failed"] * 6 + ["timed_out"] * 2 + ["skipped"] * 2
SAMPLES = 200


def build_store(home: Path) -> list[str]:
    """100,000 runs and 2,000,000 events, written in one transaction; returns the run ids."""
    from runner.store import Store

    db = home / "runner.db"
    marker = home / "built"
    if marker.exists():
        conn = sqlite3.connect(db)
        ids = [r[0] for r in conn.execute("SELECT id FROM runs")]
        conn.close()
        return ids
    home.mkdir(parents=True, exist_ok=True)
    for name in ("outputs", "logs"):
        (home / name).mkdir(exist_ok=True)
    db.unlink(missing_ok=True)
    Store.open(db).close()  # the schema, through the migrations
    rnd = random.Random(16)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    ids, rows = [], []
    for i in range(RUNS):
        created = start + timedelta(seconds=i * 30)
        run_id = f"{created:%Y%m%d-%H%M%S}-{i:06x}"
        ids.append(run_id)
        ended = created + timedelta(seconds=rnd.uniform(1, 120))
        rows.append(
            (
                run_id,
                f"job-{i % JOBS}",
                "schedule",
                rnd.choice(STATUSES),
                created.isoformat(),
                created.isoformat(),
                ended.isoformat(),
                "gpt-test",
                3,
                1200,
                300,
                0.0021,
            )
        )
    conn.executemany(
        "INSERT INTO runs (id, job, trigger, status, created_at, started_at, ended_at, model, iterations, "
        "prompt_tokens, completion_tokens, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    payloads = {
        "request": json.dumps({"iteration": 1, "messages": 4, "tools": 6}),
        "response": json.dumps(
            {
                "iteration": 1,
                "prompt_tokens": 400,
                "completion_tokens": 100,
                "tool_calls": [{"name": "terminal", "arguments": '{"command": "ls -la"}'}],
            }
        ),
        "tool_call": json.dumps({"name": "terminal", "arguments": '{"command": "ls -la"}'}),
        "tool_result": json.dumps({"name": "terminal", "result": "total 8\n" + "-rw-r--r-- 1 u u 10 file\n" * 10}),
    }
    kinds = list(payloads)

    def events():
        for run_id, (_, _, _, _, created, *_rest) in zip(ids, rows, strict=True):
            for seq in range(1, EVENTS_PER_RUN + 1):
                kind = kinds[seq % len(kinds)]
                yield run_id, seq, created, kind, payloads[kind]

    conn.executemany("INSERT INTO run_events (run_id, seq, ts, kind, payload) VALUES (?, ?, ?, ?, ?)", events())
    conn.commit()
    conn.close()
    marker.write_text("ok\n")
    return ids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    args: list[str], env: dict[str, str], cwd: Path, port: int | None, python: str = sys.executable
) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [python, "-m", "runner", *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.time() + 60
    while port is not None and time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"runner {' '.join(args)} exited: {proc.stderr.read().decode()[-800:]}") from None
            time.sleep(0.1)
    if port is not None:
        raise SystemExit("server never listened")
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def time_pages(url: str, ids: list[str]) -> None:
    import httpx

    rnd = random.Random(7)
    cases = {
        "runs page, newest": lambda: "/runs",
        "runs page, deep (keyset cursor)": lambda: f"/runs?before={rnd.choice(ids)}",
        "runs page, status=failed": lambda: "/runs?status=failed",
        "runs page, job filter + deep": lambda: f"/runs?job=job-7&before={rnd.choice(ids)}",
        "run detail (20 events)": lambda: f"/runs/{rnd.choice(ids)}",
    }
    with httpx.Client(base_url=url) as client:
        for name, path in cases.items():
            for _ in range(10):
                client.get(path())
            times = []
            for _ in range(SAMPLES):
                t0 = time.perf_counter()
                res = client.get(path())
                times.append((time.perf_counter() - t0) * 1000)
                assert res.status_code == 200, res.text[:300]
            row(f"{name}: p50 / p99 ms", f"{statistics.median(times):.1f} / {pct(times, 99):.1f}", "50 / 200")


def sse_latency(url: str, db: Path) -> None:
    """A writer (its own connection, as a worker's) adds an event every 300 ms; the reader times
    each one from its write to its arrival over the stream."""
    import httpx

    run_id = "bench-live-run"
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("DELETE FROM run_events WHERE run_id = ?", (run_id,))
    conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
    now = datetime.now(UTC).isoformat()
    conn.execute(
        "INSERT INTO runs (id, job, trigger, status, created_at, started_at) VALUES (?, 'job-1', 'manual', "
        "'running', ?, ?)",
        (run_id, now, now),
    )
    written: dict[int, float] = {}
    latencies: list[float] = []
    n = 40

    def writer() -> None:
        time.sleep(1.0)
        for seq in range(1, n + 1):
            written[seq] = time.perf_counter()
            conn.execute(
                "INSERT INTO run_events (run_id, seq, ts, kind, payload) VALUES (?, ?, ?, 'note', ?)",
                (run_id, seq, datetime.now(UTC).isoformat(), json.dumps({"n": seq})),
            )
            time.sleep(0.3 + random.random() * 0.1)
        conn.execute(
            "UPDATE runs SET status='succeeded', ended_at=? WHERE id=?", (datetime.now(UTC).isoformat(), run_id)
        )

    thread = threading.Thread(target=writer)
    thread.start()
    with httpx.Client(base_url=url, timeout=10) as client, client.stream("GET", f"/runs/{run_id}/stream") as res:
        for line in res.iter_lines():
            if line.startswith("data: ") and 'data-seq="' in line:
                seq = int(line.split('data-seq="', 1)[1].split('"', 1)[0])
                if seq in written:
                    latencies.append((time.perf_counter() - written[seq]) * 1000)
            if line.startswith("event: end"):
                break
    thread.join()
    conn.close()
    row(
        "event written -> received over SSE: p50 / p99 ms",
        f"{statistics.median(latencies):.0f} / {pct(latencies, 99):.0f}",
        "p50 500",
    )


def memory(cwd: Path) -> None:
    home = cwd / "mem-home"
    home.mkdir(exist_ok=True)
    (cwd / "jobs.yaml").write_text("jobs:\n  a:\n    prompt: hi\n    schedule: '0 2 * * *'\n")
    env = clean_env(RUNNER_HOME=str(home), RUNNER_JOBS=str(cwd / "jobs.yaml"), HOME=str(cwd))
    import httpx

    port = free_port()
    web = start(["web", "--bind", f"127.0.0.1:{port}"], env, cwd, port)
    for path in ("/", "/jobs", "/runs", "/board", "/metrics", "/charts", "/skills", "/credentials", "/approvals"):
        httpx.get(f"http://127.0.0.1:{port}{path}")
    time.sleep(1)
    web_rss = rss_mb(web.pid)
    stop(web)
    row("runner web idle RSS (after every page once), MB", f"{web_rss:.1f}", "80")
    alone, both = [], []
    for _ in range(2):  # interleaved
        serve = start(["serve"], env, cwd, None)
        time.sleep(4)
        alone.append(rss_mb(serve.pid))
        stop(serve)
        port = free_port()
        serve = start(["serve", "--web", f"127.0.0.1:{port}"], env, cwd, port)
        for path in ("/", "/jobs", "/runs", "/metrics"):
            httpx.get(f"http://127.0.0.1:{port}{path}")
        time.sleep(3)
        both.append(rss_mb(serve.pid))
        stop(serve)
    row("runner serve alone RSS (main process), MB", f"{statistics.median(alone):.1f}", "")
    row(
        "runner serve --web RSS, MB (over serve alone)",
        f"{statistics.median(both):.1f} (+{statistics.median(both) - statistics.median(alone):.1f})",
        "+60",
    )


def main() -> None:
    home = CACHE / "home"
    t0 = time.perf_counter()
    ids = build_store(home)
    print(
        f"store: {len(ids):,} runs, {len(ids) * EVENTS_PER_RUN:,} events ({time.perf_counter() - t0:.1f} s to "
        f"build or open); machine shared with other work"
    )
    cwd = CACHE / "proj"
    cwd.mkdir(exist_ok=True)
    (cwd / "jobs.yaml").write_text("jobs:\n" + "".join(f"  job-{i}:\n    prompt: hi\n" for i in range(JOBS)))
    env = clean_env(RUNNER_HOME=str(home), RUNNER_JOBS=str(cwd / "jobs.yaml"), HOME=str(cwd))
    port = free_port()
    web = start(["web", "--bind", f"127.0.0.1:{port}"], env, cwd, port)
    try:
        time_pages(f"http://127.0.0.1:{port}", ids)
        sse_latency(f"http://127.0.0.1:{port}", home / "runner.db")
    finally:
        stop(web)
    memory(cwd)
    print("main before: no dashboard (no figure to compare)")


if __name__ == "__main__":
    main()
