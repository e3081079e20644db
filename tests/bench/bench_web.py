"""runner web: page times on a big store, SSE latency, memory.

- Server time (round trip on loopback, so an upper bound) of the runs page (first page, a deep
  page, filtered by status and by job) and of a run's page, with 100,000 runs and 2,000,000 events
  in the store (targets p50 <= 50 ms, p99 <= 200 ms). The store is generated straight into SQLite
  once and cached under /tmp/runner-bench-web (delete it to rebuild).
- An event written by a worker (another process's connection) -> received over SSE (p50 <= 500 ms).
- `runner web` idle RSS (<= 80 MB); `runner serve --web` RSS over `runner serve` alone (<= +60 MB).

Main before (``$RUNNER_BENCH_BASE``, which has the dashboard now) is measured in the same run: its
``runner web`` on the same store (the same pages, SSE), its idle RSS and its ``serve --web``. Then
the headline figures in the common ``beside`` form with their floors, the same work with runner
out of the way: a page, a bare ``SELECT`` of the same rows through ``sqlite3`` plus the round trip
of the same page's bytes from a bare Starlette app on uvicorn (the same server stack); SSE, the
event's row written by one bare ``sqlite3`` connection and read by another; ``runner web``'s RSS,
that bare server's (``serve --web`` over ``serve`` has none: an increment over what serve holds).

Run: python tests/bench/bench_web.py [--runs 100000]; quick: --runs 10000 (its own cache,
/tmp/runner-bench-web-10000)
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
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tests.bench._common import beside, clean_env, row  # noqa: E402

FOUND: dict[str, Any] = {}  # what the measuring functions found, by the server's URL: for the beside lines

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
            FOUND.setdefault(url, {})[name] = times


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
    FOUND.setdefault(url, {})["sse"] = latencies


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
    FOUND["memory"] = (web_rss, statistics.median(both) - statistics.median(alone))


def main() -> None:
    global CACHE, RUNS
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=RUNS, help="runs in the generated store (20 events each)")
    if (runs := parser.parse_args().runs) != RUNS:
        CACHE, RUNS = Path(f"{CACHE}-{runs}"), runs
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
    compare(home, ids, env, cwd, f"http://127.0.0.1:{port}")


# -- main before and the floors (issue 36) ------------------------------------------------------------
# the same rows as each page, as bare SQL (a page's first query; ? is a run id)
PAGE_SQL = {
    "runs page, newest": ["SELECT * FROM runs ORDER BY rowid DESC LIMIT 51"],
    "runs page, deep (keyset cursor)": [
        "SELECT * FROM runs WHERE rowid < (SELECT rowid FROM runs WHERE id = ?) ORDER BY rowid DESC LIMIT 51"
    ],
    "runs page, status=failed": ["SELECT * FROM runs WHERE status = 'failed' ORDER BY rowid DESC LIMIT 51"],
    "runs page, job filter + deep": [
        "SELECT * FROM runs WHERE job = 'job-7' AND rowid < (SELECT rowid FROM runs WHERE id = ?) "
        "ORDER BY rowid DESC LIMIT 51"
    ],
    "run detail (20 events)": [
        "SELECT * FROM runs WHERE id = ?",
        "SELECT * FROM run_events WHERE run_id = ? ORDER BY seq",
    ],
}
PAGE_PATH = {
    "runs page, newest": "/runs",
    "runs page, deep (keyset cursor)": "/runs?before={id}",
    "runs page, status=failed": "/runs?status=failed",
    "runs page, job filter + deep": "/runs?job=job-7&before={id}",
    "run detail (20 events)": "/runs/{id}",
}
# a bare Starlette app on uvicorn answering each file of a folder at /NAME with its bytes
STATIC = """
import sys
from pathlib import Path
import uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
pages = {p.name: p.read_bytes() for p in Path(sys.argv[1]).iterdir()}
async def page(request):
    return Response(pages[request.path_params["name"]], media_type="text/html; charset=utf-8")
uvicorn.run(Starlette(routes=[Route("/{name}", page)]), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


def launch(python: str, argv: list[str], env: dict[str, str], cwd: Path, port: int | None) -> subprocess.Popen[bytes]:
    """``python ARGV`` (started and listening on ``port``, when given), stderr kept."""
    proc = subprocess.Popen([python, *argv], env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while port is not None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                stop(proc)
                raise SystemExit(f"{' '.join(argv)} never listened: {proc.stderr.read().decode()[-800:]}") from None  # type: ignore[union-attr]
            time.sleep(0.1)
    return proc


def compare(home: Path, ids: list[str], env: dict[str, str], cwd: Path, here: str) -> None:
    """Main before's figures on the same store and the floors, then the ``beside`` lines."""
    import httpx
    from _before import python_with, trees

    measured = trees()
    before, then = (measured[1] if len(measured) > 1 else None), ""
    if before is not None:
        port = free_port()
        then = f"http://127.0.0.1:{port}"
        tree_env = {**env, "PYTHONPATH": str(before.repo)}
        python, note = python_with(before, "prometheus_client, markdown_it")  # the web extra
        print(f"main before, its runner web on the same store{f' ({note})' if note else ''}:")
        try:  # its code may not open a store migrated further: then say so
            web = launch(python, ["-m", "runner", "web", "--bind", f"127.0.0.1:{port}"], tree_env, cwd, port)
            try:
                time_pages(then, ids)
                sse_latency(then, home / "runner.db")
            finally:
                stop(web)
        except SystemExit as exc:
            print(f"  not measured: {str(exc).strip().splitlines()[-1]}")
        FOUND["memory before"] = before_memory(python, {**clean_env(), "PYTHONPATH": str(before.repo)}, cwd)
    rnd = random.Random(3)
    run_id = ids[len(ids) // 2]
    port = free_port()
    web = start(["web", "--bind", f"127.0.0.1:{port}"], env, cwd, port)
    pages = cwd / "floor-pages"
    pages.mkdir(exist_ok=True)
    try:
        for i, path in enumerate(PAGE_PATH.values()):
            (pages / str(i)).write_bytes(httpx.get(f"http://127.0.0.1:{port}{path.format(id=run_id)}").content)
    finally:
        stop(web)
    port = free_port()
    bare = launch(sys.executable, ["-c", STATIC, str(pages), str(port)], clean_env(), cwd, port)
    http: dict[str, list[float]] = {}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            for i, name in enumerate(PAGE_PATH):
                for _ in range(10):
                    client.get(f"/{i}")
                http[name] = []
                for _ in range(SAMPLES):
                    t0 = time.perf_counter()
                    client.get(f"/{i}").raise_for_status()
                    http[name].append((time.perf_counter() - t0) * 1000)
        time.sleep(1)
        bare_rss = rss_mb(bare.pid)
    finally:
        stop(bare)
    conn = sqlite3.connect(home / "runner.db")
    sql: dict[str, list[float]] = {}
    for name, statements in PAGE_SQL.items():
        sql[name] = []
        for n in range(SAMPLES + 10):
            one = rnd.choice(ids)
            t0 = time.perf_counter()
            for statement in statements:
                conn.execute(statement, (one,) if "?" in statement else ()).fetchall()
            if n >= 10:
                sql[name].append((time.perf_counter() - t0) * 1000)
    conn.close()
    what = "a bare SELECT of the same rows + the same bytes from bare Starlette/uvicorn"
    for name in PAGE_PATH:
        for at, target in ((50, "<= 50 ms"), (99, "<= 200 ms")):
            was = FOUND.get(then, {}).get(name)
            floor = [a + b for a, b in zip(sql[name], http[name], strict=True)]  # a SELECT and a round trip each
            beside(f"{name} p{at}", pct(FOUND[here][name], at), was and pct(was, at), pct(floor, at), what, target)
    was = FOUND.get(then, {}).get("sse")
    beside("event written -> received over SSE p50", statistics.median(FOUND[here]["sse"]),
           was and statistics.median(was), statistics.median(row_seen()),
           "bare sqlite3: the row written, read by a second connection", "<= 500 ms")  # fmt: skip
    web_rss, added = FOUND["memory"]
    before_rss, before_added = FOUND.get("memory before", (None, None))
    beside("runner web idle RSS", web_rss, before_rss, bare_rss, "bare Starlette/uvicorn serving the same bytes",
           "<= 80 MB", "MB")  # fmt: skip
    beside("serve --web over serve, RSS", added, before_added,
           "n/a (an increment: serve holds much of the stack already; the server's own is above)", "",
           "<= +60 MB", "MB")  # fmt: skip


def before_memory(python: str, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Main before's ``runner web`` idle RSS and ``serve --web`` over ``serve`` (one round each)."""
    import httpx

    home = cwd / "mem-home-before"
    home.mkdir(exist_ok=True)
    env = {**env, "RUNNER_HOME": str(home), "RUNNER_JOBS": str(cwd / "jobs.yaml"), "HOME": str(cwd)}
    port = free_port()
    web = launch(python, ["-m", "runner", "web", "--bind", f"127.0.0.1:{port}"], env, cwd, port)
    for path in ("/", "/jobs", "/runs", "/board", "/metrics", "/charts", "/skills", "/credentials", "/approvals"):
        httpx.get(f"http://127.0.0.1:{port}{path}")
    time.sleep(1)
    web_rss = rss_mb(web.pid)
    stop(web)
    serve = launch(python, ["-m", "runner", "serve"], env, cwd, None)
    time.sleep(4)
    alone = rss_mb(serve.pid)
    stop(serve)
    port = free_port()
    serve = launch(python, ["-m", "runner", "serve", "--web", f"127.0.0.1:{port}"], env, cwd, port)
    for path in ("/", "/jobs", "/runs", "/metrics"):
        httpx.get(f"http://127.0.0.1:{port}{path}")
    time.sleep(3)
    both = rss_mb(serve.pid)
    stop(serve)
    return web_rss, both - alone


def row_seen() -> list[float]:
    """Ms from a row written by one bare sqlite3 connection to its read by another, 40 times."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "floor.db"
        writer = sqlite3.connect(path, isolation_level=None)
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA synchronous=NORMAL")  # the store's
        writer.execute("CREATE TABLE run_events (seq INTEGER PRIMARY KEY, payload TEXT)")
        reader = sqlite3.connect(path, isolation_level=None)
        for seq in range(40):
            t0 = time.perf_counter()
            writer.execute("INSERT INTO run_events VALUES (?, ?)", (seq, json.dumps({"n": seq})))
            reader.execute("SELECT * FROM run_events WHERE seq > ?", (seq - 1,)).fetchall()
            out.append((time.perf_counter() - t0) * 1000)
        writer.close()
        reader.close()
    return out


if __name__ == "__main__":
    main()
