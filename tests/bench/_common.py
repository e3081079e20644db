"""Helpers for the benchmark scripts: a clean environment, timing of CLI subprocesses."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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
