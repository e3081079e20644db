"""Helpers for the benchmark scripts: a clean environment, timing of CLI subprocesses, and one
line form for a figure beside main before and its floor."""

from __future__ import annotations

import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

# the runner checkout measured: this one, or main before's when _before.in_tree runs a bench under it
REPO = Path(os.environ.get("RUNNER_BENCH_TREE") or Path(__file__).resolve().parents[2]).resolve()
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def clean_env(**extra: str) -> dict[str, str]:
    """The environment a user has: bytecode caching on, nothing of ours leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def time_cli(args: list[str], env: dict[str, str], cwd: Path, runs: int = 15) -> tuple[float, int]:
    """Median wall seconds and max peak RSS (KB) of ``python -m runner ARGS``."""
    walls, rss = [], 0
    subprocess.run([sys.executable, "-m", "runner", *args], env=env, cwd=cwd, capture_output=True)  # warm pycs
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "runner", *args], env=env, cwd=cwd, capture_output=True)
        walls.append(time.perf_counter() - start)
        if res.returncode != 0:
            raise SystemExit(f"runner {' '.join(args)} failed: {res.stderr.decode()[-500:]}")
        rss = max(rss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before)
    return statistics.median(walls), rss


def row(name: str, value: str, target: str) -> None:
    print(f"{name:<58} {value:>14}   target {target}")


def figure(value: float | str | None, unit: str) -> str:
    """``value`` in ``unit`` with three significant digits; a string (a reason) as it is."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    digits = 3 - len(str(int(abs(value)))) if abs(value) >= 1 else 3
    return f"{value:,.{max(0, digits)}f} {unit}".rstrip()


def beside(
    label: str,
    this: float | str | None,
    before: float | str | None,
    floor: float | str | None,
    what_floor: str,
    target: str = "",
    unit: str = "ms",
) -> None:
    """One line: this tree's figure, main before's, the floor (what the same work costs with runner
    out of the way, named by ``what_floor``) and the target. ``before`` or ``floor`` may be a
    reason instead of a number ("none (no X before issue N)", "n/a (a policy figure)")."""
    shown = f"this {figure(this, unit)}   main before {figure(before, unit)}   floor {figure(floor, unit)}"
    if what_floor:
        shown += f" ({what_floor})"
    print(f"{label:<44} {shown}" + (f"   target {target}" if target else ""))


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def read(db: Path, sql: str) -> list[tuple]:  # type: ignore[type-arg]
    """Rows of ``sql`` on the runner.db at ``db`` (none while it has no such table yet)."""
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def wait(check: Callable[[], object], timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll ``check`` until it is true; past ``timeout`` seconds the benchmark stops, naming ``what``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(interval)
