"""A year of a busy fleet (issue 36 item 2): 1,000,000 runs and 20,000,000 events in the store.

Figures, each beside main before (``$RUNNER_BENCH_BASE`` on the same store file) and its target:

- ``runner runs list`` (default, ``--job``, ``--status failed``) and ``runner runs show RUN``: the
  whole CLI process's wall time p50/p95 (target p95 <= 150 ms), with the in-process query time
  beside it, so the CLI's start-up floor shows;
- the dashboard (a running ``runner web``): ``/``, ``/runs?job=X``, ``/runs?status=failed``,
  ``/runs/ID`` p50/p95 (target p95 <= 300 ms);
- ``runner runs search WORD`` p50/p95 (target p95 <= 500 ms), in-process beside it;
- on a copy of the store, with ``runner serve`` firing an every-second job on it: ``runner db
  backup`` of the whole store (its time, and serve's fire lateness meanwhile), then ``runner runs
  prune`` of the oldest 500,000 runs: its time, serve's fire lateness p99 while it runs (target
  <= 250 ms) and the longest wait of a probe process doing a tiny write transaction every ~10 ms
  (target: no write lock held longer than 100 ms).

The store is built once through the store's own bulk API (``runner.store.runs.insert_runs`` /
``insert_events``; the search index's triggers index the events as they go) on main before's
schema, and cached under /tmp/runner-bench-scale (delete it to rebuild). Main before is measured
on it first (its figures kept in ``before.json`` there: later runs print those, since this tree's
migrations add indexes to the cached file that main before's queries would then use too); then
this tree opens it, which applies its migrations.

``--store postgresql``: the same figures (no backup: PostgreSQL's is pg_dump) on a PostgreSQL
server of the benchmark's own (tests/pgserver.py), the store built into it through the same API
each time (not cached); main before is not measured there; the CLI's floor there is a bare Python
importing psycopg, connecting and running `runs list`'s query. ``$RUNNER_BENCH_SCALE_RUNS`` makes a
smaller store (a smoke run).

Run: python tests/bench/bench_ledger_scale.py [--only cli,web,search,ops] [--samples 40]
     [--before-ops] [--store postgresql]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _before import Tree, trees  # noqa: E402
from _common import REPO, pct  # noqa: E402
from bench_prune import JOBS as TICK_JOBS  # noqa: E402
from bench_prune import lateness  # noqa: E402
from bench_search import SHAPE, payload, vocabulary  # noqa: E402
from bench_web import free_port, start, stop  # noqa: E402

CACHE = Path(os.environ.get("RUNNER_BENCH_SCALE", "/tmp/runner-bench-scale"))
RUNS, EVENTS_PER_RUN, JOBS = int(os.environ.get("RUNNER_BENCH_SCALE_RUNS", 1_000_000)), len(SHAPE), 50
VERSION = "v1"  # bump when the generated data changes
STATUSES = ["succeeded"] * 90 + ["failed"] * 6 + ["timed_out"] * 2 + ["skipped"] * 2
SPAN = timedelta(days=365)
BEFORE = CACHE / "before.json"


# -- the store ------------------------------------------------------------------------------------
def build(home: Path, base: Tree | None) -> tuple[datetime, float]:
    """The store under ``home`` (made once): main before's schema, then the runs and their events
    through this tree's bulk API. Returns the newest run's time and seconds spent (0 when cached)."""
    db, marker = home / "runner.db", home / f"built-{VERSION}"
    if marker.exists():
        return datetime.fromisoformat(marker.read_text().strip()), 0.0
    shutil.rmtree(home, ignore_errors=True)
    (home / "outputs").mkdir(parents=True)
    (home / "logs").mkdir()
    started = time.perf_counter()
    schema_by = base or trees()[0]  # main before's migrations: its figures are taken on its own schema
    subprocess.run(
        [schema_by.python, "-c", f"from pathlib import Path; from runner.store import Store; Store.open(Path({str(db)!r})).close()"],
        env=schema_by.env(),
        check=True,
    )
    from runner.store import Store

    store = Store.open(db, migrate=False)
    newest = fill(store, started)
    store.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    marker.write_text(newest.isoformat() + "\n")
    return newest, time.perf_counter() - started


def fill(store: Any, started: float) -> datetime:
    """RUNS runs a year long, up to now, each with EVENTS_PER_RUN events, through the bulk API;
    returns the newest run's time."""
    from runner.store.runs import EventRecord, RunRecord, insert_events, insert_runs

    rng = random.Random(36)
    words = vocabulary()
    weights = [1 / (i + 1) for i in range(len(words))]
    pool = [" ".join(rng.choices(words, weights, k=rng.choice((4, 8, 16)))) for _ in range(20_000)]
    newest = datetime.now(UTC).replace(microsecond=0)
    first = newest - SPAN
    step = SPAN / RUNS
    chunk = min(20_000, RUNS)
    for lo in range(0, RUNS, chunk):
        runs, events = [], []
        for i in range(lo, lo + chunk):
            at = first + step * i
            run_id = f"{at:%Y%m%d-%H%M%S}-{i:06x}"
            stamp = at.isoformat(timespec="milliseconds")
            end = (at + timedelta(seconds=rng.uniform(1, 120))).isoformat(timespec="milliseconds")
            status = STATUSES[rng.randrange(len(STATUSES))]
            runs.append(
                RunRecord(
                    run_id, f"job-{i % JOBS}", "schedule", status, stamp, stamp, end, "gpt-test", 4, 3600, 400, 0.0021,
                    error="exit code 1" if status == "failed" else None,
                )
            )
            for seq, kind in enumerate(SHAPE, 1):
                events.append(EventRecord(run_id, seq, stamp, kind, payload(kind, pool[rng.randrange(20_000)], i, seq)))
        insert_runs(store, runs)
        insert_events(store, events)
        if lo % 100_000 == 0:
            print(f"  {lo + chunk:,} runs written ({time.perf_counter() - started:.0f} s)", flush=True)
    return newest


def sample_ids(newest: datetime, n: int, seed: int) -> list[str]:
    """``n`` run ids of the store ``fill`` wrote (its ids follow from the newest run's time)."""
    rng = random.Random(seed)
    first, step = newest - SPAN, SPAN / RUNS
    return [f"{first + step * i:%Y%m%d-%H%M%S}-{i:06x}" for i in (rng.randrange(RUNS) for _ in range(n))]


# -- printing -------------------------------------------------------------------------------------
def p50_95(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} / {pct(values, 95):7.1f}"


def line(label: str, mine: str, before: str, target: str) -> None:
    print(f"  {label:<34} {mine:>19}   {before:>19}   {target}")


def header(title: str) -> None:
    print(f"\n{title}")
    line("", "this tree p50/p95", "main before p50/p95", "target")


# -- CLI --------------------------------------------------------------------------------------------
# runs in the tree under test: the same store calls the commands make, timed in one process
INPROC = r"""
import json, sys, time
from pathlib import Path
from runner.store import Store
from runner.store.runs import list_runs, events, children, run_with_id
from runner.store.dialect import PgURL
target, run_ids, words, samples = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4])
store = Store.open(PgURL(target) if target.startswith("postgresql") else Path(target), migrate=False)
cases = {
    "runs list": lambda i: list_runs(store, limit=20),
    "runs list --job": lambda i: list_runs(store, job="job-7", limit=20),
    "runs list --status failed": lambda i: list_runs(store, status="failed", limit=20),
    "runs show": lambda i: (run_with_id(store, run_ids[i]), events(store, run_ids[i]), children(store, run_ids[i])),
}
try:
    from runner.store.search import Search, search
    cases["runs search"] = lambda i: search(store, Search(words[i], limit=10))
except ImportError:
    pass
out = {}
for name, call in cases.items():
    call(0)
    times = []
    for i in range(samples):
        t0 = time.perf_counter()
        call(i % len(run_ids))
        times.append((time.perf_counter() - t0) * 1000)
    out[name] = times
print(json.dumps(out))
"""


def cli_argv(name: str, i: int, run_ids: list[str], words: list[str]) -> list[str]:
    return {
        "runner --version (start floor)": ["--version"],
        "runs list": ["runs", "list"],
        "runs list --job": ["runs", "list", "--job", "job-7"],
        "runs list --status failed": ["runs", "list", "--status", "failed"],
        "runs show": ["runs", "show", run_ids[i % len(run_ids)]],
        "runs search": ["runs", "search", words[i % len(words)]],
        "jobs list": ["jobs", "list"],
    }[name]


FLOOR = "runner --version (start floor)"
CLI_CASES = (FLOOR, "runs list", "runs list --job", "runs list --status failed", "runs show", "runs search", "jobs list")
LIVE_BEFORE = (FLOOR, "jobs list")  # main before's measured on the store as it is now (added after before.json)
TARGETS = {"runs search": "p95 <= 500 ms", FLOOR: "(the floor)", "jobs list": "(each job's newest run)"}


def store_env(tree: Tree, home: Path, cwd: Path, url: str | None) -> dict[str, str]:
    extra = {"RUNNER_DATABASE_URL": url} if url else {}
    return tree.env(RUNNER_HOME=str(home), RUNNER_JOBS=str(cwd / "jobs.yaml"), HOME=str(cwd), **extra)


def measure_cli(
    tree: Tree, home: Path, cwd: Path, samples: int, run_ids: list[str], words: list[str], url: str | None = None
) -> dict[str, dict[str, list[float]]]:
    env = store_env(tree, home, cwd, url)
    res = subprocess.run(
        [tree.python, "-c", INPROC, url or str(home / "runner.db"), ",".join(run_ids), ",".join(words), str(samples)],
        env=env, cwd=cwd, capture_output=True, text=True,
    )
    if res.returncode != 0:
        raise SystemExit(f"{tree.name}: in-process timing failed: {res.stderr[-800:]}")
    inproc = json.loads(res.stdout.strip().splitlines()[-1])
    walls = {name: wall_times(tree, [], cwd, samples, lambda i, n=name: cli_argv(n, i, run_ids, words), env) for name in CLI_CASES}  # type: ignore[misc]
    return {"wall": walls, "inproc": inproc}


# PostgreSQL's floor: a bare Python importing the driver, connecting and running `runs list`'s query
PG_FLOOR = (
    "import sys, psycopg; psycopg.connect(sys.argv[1]).execute("
    "'SELECT * FROM runs ORDER BY created_at DESC, id DESC LIMIT 20').fetchall()"
)


def floor_times(python: str, url: str, cwd: Path, samples: int) -> list[float]:
    """Milliseconds of ``PG_FLOOR`` as whole processes, after one warm-up."""
    times = []
    for i in range(-1, samples):
        t0 = time.perf_counter()
        subprocess.run([python, "-c", PG_FLOOR, url], cwd=cwd, check=True, capture_output=True)
        if i >= 0:
            times.append((time.perf_counter() - t0) * 1000)
    return times


def wall_times(tree: Tree, argv: list[str], cwd: Path, samples: int, vary: Any = None, env: dict[str, str] | None = None) -> list[float]:
    """Milliseconds of ``runner ARGV`` as whole processes (``vary(i)``: the i-th sample's argv), after one warm-up."""
    env = env or tree.env(HOME=str(cwd))
    times = []
    for i in range(-1, samples):
        args = vary(max(i, 0)) if vary else argv
        t0 = time.perf_counter()
        out = subprocess.run([tree.python, "-m", "runner", *args], env=env, cwd=cwd, capture_output=True)
        if i >= 0:
            times.append((time.perf_counter() - t0) * 1000)
        if out.returncode != 0:
            raise SystemExit(f"{tree.name}: runner {' '.join(args)}: {out.stderr.decode()[-500:]}")
    return times


# -- web --------------------------------------------------------------------------------------------
WEB_CASES = ("/", "/runs?job=job-7", "/runs?status=failed", "/runs/ID")


def measure_web(
    tree: Tree, home: Path, cwd: Path, samples: int, run_ids: list[str], url: str | None = None
) -> dict[str, list[float]]:
    import httpx

    env = store_env(tree, home, cwd, url)
    python = tree.python
    if subprocess.run([python, "-c", "import prometheus_client, markdown_it"], capture_output=True).returncode:
        python = sys.executable  # its checkout on PYTHONPATH comes first: the same code, this venv's web extra
        print(f"({tree.name}: {tree.python} lacks the web extra; its dashboard runs on {python})")
    port = free_port()
    web = start(["web", "--bind", f"127.0.0.1:{port}"], env, cwd, port, python=python)
    out: dict[str, list[float]] = {}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for case in WEB_CASES:
                times = []
                for i in range(samples + 3):
                    path = case.replace("ID", run_ids[i % len(run_ids)])
                    t0 = time.perf_counter()
                    res = client.get(path)
                    if i >= 3:
                        times.append((time.perf_counter() - t0) * 1000)
                    if res.status_code != 200:
                        raise SystemExit(f"{tree.name}: GET {path}: {res.status_code} {res.text[:300]}")
                out[case] = times
    finally:
        stop(web)
    return out


# -- backup and prune under serve -------------------------------------------------------------------
PROBE = r"""
import sqlite3, sys, time, json
conn = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
conn.execute("PRAGMA synchronous=NORMAL")  # as the store's connections
conn.execute("CREATE TABLE IF NOT EXISTS bench_probe (n INTEGER)")
stop_at = sys.argv[2]
waits = []
import os
while not os.path.exists(stop_at):
    t0 = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO bench_probe VALUES (1)")
    conn.execute("COMMIT")
    waits.append((time.time(), (time.perf_counter() - t0) * 1000))
    time.sleep(0.01)
print(json.dumps(waits))
"""


# PostgreSQL: a tiny transaction under the store-wide lock every writer of runner takes there
PG_PROBE = r"""
import json, os, sys, time
import psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
conn.execute("CREATE TABLE IF NOT EXISTS bench_probe (n BIGINT)")
waits = []
while not os.path.exists(sys.argv[2]):
    t0 = time.perf_counter()
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (int(sys.argv[3]),))
        conn.execute("INSERT INTO bench_probe VALUES (1)")
    waits.append((time.time(), (time.perf_counter() - t0) * 1000))
    time.sleep(0.01)
print(json.dumps(waits))
"""
FIRES = "SELECT slot, created_at, started_at, waited_s FROM runs WHERE job='tick' AND slot >= {p} AND slot <= {p} ORDER BY slot"


def serve_fires(db: Path | str, since: str, until: str) -> list[tuple[str, str, str | None, float | None]]:
    if isinstance(db, str):  # a PostgreSQL URL
        import psycopg

        with psycopg.connect(db) as pg:
            return [tuple(r) for r in pg.execute(FIRES.format(p="%s"), (since, until)).fetchall()]  # type: ignore[misc]
    conn = sqlite3.connect(db, timeout=60)
    rows = conn.execute(FIRES.format(p="?"), (since, until)).fetchall()
    conn.close()
    return rows


def measure_ops(tree: Tree, home: Path, newest: datetime, scratch: Path, url: str | None = None) -> dict[str, object]:
    """On a copy of the store (PostgreSQL: on the store itself): serve firing every second; db
    backup (SQLite), then runs prune of the oldest half with the write probe beside it."""
    work = scratch / tree.name.replace(" ", "-")
    shutil.rmtree(work, ignore_errors=True)
    (work / "home").mkdir(parents=True)
    t0 = time.perf_counter()
    for name in ("runner.db", "runner.db-wal") if url is None else ():
        if (home / name).exists():
            shutil.copy(home / name, work / "home" / name)
    copied = time.perf_counter() - t0
    (work / "jobs.yaml").write_text(TICK_JOBS)
    (work / "home" / "config.yaml").write_text("serve: {max_parallel: 4, shutdown_grace: 5}\n")
    env = store_env(tree, work / "home", work, url)
    env["RUNNER_JOBS"] = str(work / "jobs.yaml")
    db: Path | str = url or work / "home" / "runner.db"
    if tree.name == "this tree":  # this tree's migrations first (serve would apply them on start)
        subprocess.run([tree.python, "-m", "runner", "runs", "list", "--limit", "1"], env=env, cwd=work, check=True, capture_output=True)
    out: dict[str, object] = {"copy_s": copied}
    with open(work / "serve.stderr", "w") as err:
        serve = subprocess.Popen([tree.python, "-m", "runner", "serve"], env=env, cwd=work, stderr=err, stdout=subprocess.DEVNULL)
        try:
            ops(tree, env, work, db, newest, out)
        finally:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(timeout=60)
            except subprocess.TimeoutExpired:
                serve.kill()
    shutil.rmtree(work, ignore_errors=True)
    return out


def ops(tree: Tree, env: dict[str, str], work: Path, db: Path | str, newest: datetime, out: dict[str, object]) -> None:
    time.sleep(8)
    stamp = lambda: datetime.now(UTC).isoformat(timespec="milliseconds")  # noqa: E731
    if isinstance(db, Path):  # backup (PostgreSQL's is pg_dump)
        b0, t0 = stamp(), time.perf_counter()
        res = subprocess.run([tree.python, "-m", "runner", "db", "backup", str(work / "backup.db")], env=env, cwd=work, capture_output=True, text=True)
        out["backup_s"] = time.perf_counter() - t0
        out["backup_ok"] = res.returncode == 0
        out["backup_err"] = res.stderr[-300:]
        time.sleep(2)
        out["backup_fires"] = serve_fires(db, b0, stamp())
        (work / "backup.db").unlink(missing_ok=True)
    # prune with the probe
    hours = int((datetime.now(UTC) - (newest - SPAN / 2)).total_seconds() // 3600)
    flag = work / "probe.stop"
    from runner.store.dialect import STORE_LOCK

    probe_argv = ["-c", PROBE, str(db), str(flag)] if isinstance(db, Path) else ["-c", PG_PROBE, db, str(flag), str(STORE_LOCK)]
    probe = subprocess.Popen([sys.executable, *probe_argv], stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    p0, t0, began = stamp(), time.perf_counter(), time.time()
    res = subprocess.run(
        [tree.python, "-m", "runner", "runs", "prune", "--older-than", f"{hours}h", "--keep-last", "10", "--json"],
        env=env, cwd=work, capture_output=True, text=True,
    )
    out["prune_s"] = time.perf_counter() - t0
    p1 = stamp()
    flag.write_text("")
    timed = json.loads(probe.communicate(timeout=120)[0])
    out["probe_waits"] = [w for _, w in timed]
    out["probe_worst"] = sorted(((w, at - began) for at, w in timed), reverse=True)[:5]  # (ms, s into the prune)
    out["prune_out"] = res.stdout.strip()[-400:] if res.returncode == 0 else f"FAILED: {res.stderr[-400:]}"
    time.sleep(2)
    out["prune_fires"] = serve_fires(db, p0, p1)


def show_ops(name: str, ops: dict[str, object]) -> None:
    b_late = lateness(ops.get("backup_fires", []))[0]  # type: ignore[arg-type]
    p_late = lateness(ops["prune_fires"])[0]  # type: ignore[arg-type]
    waits: list[float] = ops["probe_waits"]  # type: ignore[assignment]
    print(f"  {name}: (store copied in {ops['copy_s']:.0f} s)")
    if "backup_s" in ops:
        ok = "" if ops["backup_ok"] else f"  FAILED: {ops['backup_err']}"
        print(f"    db backup of the whole store        {ops['backup_s']:7.1f} s{ok}")
    if b_late:
        print(f"    serve fires during backup: {len(b_late)}   slot->row p50 {pct(b_late, 50):.0f} p99 {pct(b_late, 99):.0f} ms   target p99 <= 250 ms")
    print(f"    runs prune (oldest {RUNS // 2:,})         {ops['prune_s']:7.1f} s   {ops['prune_out']}")
    if p_late:
        print(f"    serve fires during prune: {len(p_late)}   slot->row p50 {pct(p_late, 50):.0f} p99 {pct(p_late, 99):.0f} ms   target p99 <= 250 ms")
    else:
        print("    serve fires during prune: none recorded")
    if waits:
        print(
            f"    write probe ({len(waits)} tiny transactions): wait p50 {pct(waits, 50):.1f} p99 {pct(waits, 99):.1f} "
            f"max {max(waits):.1f} ms   target max <= 100 ms"
        )
        worst = ", ".join(f"{w:.0f} ms at {at:.0f} s" for w, at in ops["probe_worst"])  # type: ignore[attr-defined]
        print(f"    longest probe waits (seconds into the prune): {worst}; {sum(w > 100 for w in waits)} over 100 ms")


# -- main -------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="cli,web,search,ops")
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--before-ops", action="store_true", help="also backup+prune with main before (a second copy)")
    parser.add_argument("--fresh-before", action="store_true", help="measure main before again (the store must be unmigrated)")
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    only = set(args.only.split(","))
    os.environ.pop("RUNNER_HOME", None)
    if args.store == "postgresql":
        postgresql(only, args.samples)
        return
    measured = trees()
    here, base = measured[0], (measured[1] if len(measured) > 1 else None)
    home = CACHE / "home"
    print(f"a year of a busy fleet: {RUNS:,} runs, {RUNS * EVENTS_PER_RUN:,} events (machine shared, 2 cores)")
    newest, took = build(home, base)
    db = home / "runner.db"
    size = sum(p.stat().st_size for p in home.glob("runner.db*")) / 1e9
    print(f"store: {db} {size:.1f} GB" + (f", built in {took / 60:.1f} min through insert_runs/insert_events" if took else " (cached)"))
    cwd = CACHE / "proj"
    cwd.mkdir(exist_ok=True)
    (cwd / "jobs.yaml").write_text("jobs:\n" + "".join(f"  job-{i}:\n    prompt: hi\n" for i in range(JOBS)))
    run_ids = sample_ids(newest, 50, 1)
    words = vocabulary()[200:250]  # middle-frequency words (bench_search's "middle word")

    conn = sqlite3.connect(db)
    migrated = {r[0] for r in conn.execute("SELECT name FROM _migrations")}
    conn.close()
    mine_names = {p.stem for p in (REPO / "runner" / "store" / "migrations").glob("m0*.py")}
    base_names = {p.stem for p in (base.repo / "runner" / "store" / "migrations").glob("m0*.py")} if base else set()
    before: dict[str, object] = json.loads(BEFORE.read_text()) if BEFORE.exists() else {}
    if base is not None and (args.fresh_before or not before):
        if migrated - base_names:
            print(f"(main before: the cached store has this tree's migrations {sorted(migrated - base_names)}; its figures would use them: not measured)")
        else:
            print("measuring main before on its own schema ...", flush=True)
            before = {"when": datetime.now(UTC).isoformat(timespec="seconds")}
            if only & {"cli", "search"}:
                before["cli"] = measure_cli(base, home, cwd, args.samples, run_ids, words)
            if "web" in only:
                before["web"] = measure_web(base, home, cwd, args.samples, run_ids)
            BEFORE.write_text(json.dumps(before))
    elif before:
        print(f"(main before: figures measured {before['when']} on this store before this tree's migrations; {BEFORE})")
    if mine_names - migrated:
        t0 = time.perf_counter()
        from runner.store import Store

        Store.open(db).close()
        print(f"this tree's migrations {sorted(mine_names - migrated)} applied in {time.perf_counter() - t0:.1f} s")

    b_cli: dict[str, dict[str, list[float]]] = before.get("cli", {})  # type: ignore[assignment]
    if only & {"cli", "search"}:
        cli = measure_cli(here, home, cwd, args.samples, run_ids, words)
        if base is not None:  # what before.json lacks, measured now (the start floor reads no store)
            env = store_env(base, home, cwd, None)
            live = {n: wall_times(base, cli_argv(n, 0, run_ids, words), cwd, args.samples, env=env) for n in LIVE_BEFORE if n not in b_cli.get("wall", {})}
            b_cli = {"wall": {**b_cli.get("wall", {}), **live}, "inproc": b_cli.get("inproc", {})}
            if "jobs list" in live:
                print("(main before's `jobs list`: measured now, on the store with this tree's indexes)")
        header(f"CLI, whole process wall ms ({args.samples} samples; in-process query ms below each)")
        for name in CLI_CASES:
            if name == "runs search" and "search" not in only or name != "runs search" and "cli" not in only:
                continue
            bw = b_cli.get("wall", {}).get(name)
            bi = b_cli.get("inproc", {}).get(name)
            line(name, p50_95(cli["wall"][name]), p50_95(bw) if bw else "-", TARGETS.get(name, "p95 <= 150 ms"))
            if name in cli["inproc"]:
                line("  (in-process query)", p50_95(cli["inproc"][name]), p50_95(bi) if bi else "-", "")
    if "web" in only:
        web = measure_web(here, home, cwd, args.samples, run_ids)
        b_web: dict[str, list[float]] = before.get("web", {})  # type: ignore[assignment]
        header(f"dashboard (runner web), ms per page ({args.samples} samples)")
        for case in WEB_CASES:
            line(case, p50_95(web[case]), p50_95(b_web[case]) if case in b_web else "-", "p95 <= 300 ms")
    if "ops" in only:
        print("\nbackup and prune on a copy of the store, with runner serve firing an every-1s job on it")
        scratch = CACHE / "scratch"
        show_ops("this tree", measure_ops(here, home, newest, scratch))
        if base is not None and args.before_ops:
            show_ops("main before", measure_ops(base, home, newest, scratch))
        elif base is not None:
            print("  main before: not measured (pass --before-ops; it takes another copy and prune)")
        shutil.rmtree(scratch, ignore_errors=True)


def postgresql(only: set[str], samples: int) -> None:
    """The same figures on PostgreSQL: a server of the benchmark's own (tests/pgserver.py), the
    store built into it through the same bulk API (not cached: the server goes at the end)."""
    from runner.store import Store
    from runner.store.dialect import PgURL
    from tests import pgserver

    why = pgserver.available()
    if why:
        print(f"PostgreSQL: skipped ({why})")
        return
    here = trees()[0]
    print(f"a year of a busy fleet on PostgreSQL: {RUNS:,} runs, {RUNS * EVENTS_PER_RUN:,} events (a server of its own)")
    server = pgserver.PgServer.start()
    try:
        url = server.fresh()
        started = time.perf_counter()
        store = Store.open(PgURL(url))
        newest = fill(store, started)
        store.close()
        print(f"store built in {(time.perf_counter() - started) / 60:.1f} min through insert_runs/insert_events")
        print("main before: not measured on PostgreSQL (the store is built by this tree)")
        home, cwd = CACHE / "pg-home", CACHE / "pg-proj"
        for folder in (home / "outputs", home / "logs", cwd):
            folder.mkdir(parents=True, exist_ok=True)
        (cwd / "jobs.yaml").write_text("jobs:\n" + "".join(f"  job-{i}:\n    prompt: hi\n" for i in range(JOBS)))
        run_ids, words = sample_ids(newest, 50, 1), vocabulary()[200:250]
        if only & {"cli", "search"}:
            cli = measure_cli(here, home, cwd, samples, run_ids, words, url)
            header(f"PostgreSQL: CLI, whole process wall ms ({samples} samples; in-process query ms below each)")
            line("bare psycopg: import, connect, query", p50_95(floor_times(here.python, url, cwd, samples)), "-", "(the driver's floor)")
            for name in CLI_CASES:
                line(name, p50_95(cli["wall"][name]), "-", TARGETS.get(name, "p95 <= 150 ms"))
                if name in cli["inproc"]:
                    line("  (in-process query)", p50_95(cli["inproc"][name]), "-", "")
        if "web" in only:
            web = measure_web(here, home, cwd, samples, run_ids, url)
            header(f"PostgreSQL: dashboard (runner web), ms per page ({samples} samples)")
            for case in WEB_CASES:
                line(case, p50_95(web[case]), "-", "p95 <= 300 ms")
        if "ops" in only:
            print("\nPostgreSQL: prune with runner serve firing an every-1s job on the same database")
            show_ops("this tree", measure_ops(here, home, newest, CACHE / "scratch", url))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
