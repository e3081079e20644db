"""Redaction of a 1 MB tool result (issue 13): median wall time, target <= 20 ms.

The text is realistic tool output: source lines, JSON with escapes, URLs, log lines, and a few
planted secrets of each family, so both the raw pass and the decoded (JSON/URL escapes) pass run.

Main before: the same measurement run by main before's tree (``_before.each_tree``). Floor: one
``re.sub`` over the same text with one alternation of the planted secrets' shapes and the two
known values: a single regex pass, without the families' checks or the decoded pass.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _before import each_tree  # noqa: E402
from _common import beside, row  # noqa: E402

from runner.safety.redact import Redactor  # noqa: E402

PLANTED = [
    "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "AKIA" + "IOSFODNN7EXAMPLQ",
    "https://hooks.slack.com/services/T0000AAAA/B0000BBBB/abcdefghijklmnopqrstuvwx",
]


def corpus(size: int = 1_000_000, seed: int = 7) -> str:
    rng = random.Random(seed)
    words = [
        "the",
        "run",
        "job",
        "model",
        "tool",
        "result",
        "file",
        "path",
        "value",
        "config",
        "error",
        "status",
        "output",
        "line",
    ]
    parts: list[str] = []
    total = 0
    while total < size:
        kind = rng.randrange(5)
        if kind == 0:
            line = f"def f_{rng.randrange(10**6)}(x):\n    return x + {rng.randrange(100)}  # {' '.join(rng.choices(words, k=6))}\n"
        elif kind == 1:
            line = json.dumps({"id": rng.randrange(10**9), "msg": " ".join(rng.choices(words, k=8)) + '\n"q"'}) + "\n"
        elif kind == 2:
            line = f"GET https://example.org/api/v1/items?page={rng.randrange(99)}&q=a%20b 200 {rng.random():.3f}s\n"
        elif kind == 3:
            line = f"2024-05-0{rng.randrange(1, 9)} INFO {' '.join(rng.choices(words, k=10))}\n"
        else:
            line = rng.choice(PLANTED) + "\n" if rng.random() < 0.01 else "ok\n"
        parts.append(line)
        total += len(line)
    return "".join(parts)[:size]


KNOWN = ["known-secret-value-1234", 'we"ird\\pa\u00dfword-99']
FLOOR = re.compile(
    r"ghp_[A-Za-z0-9]{36}|sk_live_[A-Za-z0-9]{24}|AKIA[A-Z0-9]{16}|https://hooks\.slack\.com/services/[A-Za-z0-9/]+|"
    + "|".join(re.escape(k) for k in KNOWN)
)


def measure(runs: int) -> dict[str, object]:
    """Seconds per redaction of the corpus (``runs`` of them), the planted secrets left, the floor's seconds."""
    text = corpus()
    r = Redactor(KNOWN, include_env=False)
    out = r(text)
    walls, floor = [], []
    for _ in range(runs):
        start = time.perf_counter()
        r(text)
        walls.append(time.perf_counter() - start)
        start = time.perf_counter()
        FLOOR.sub("[REDACTED]", text)
        floor.append(time.perf_counter() - start)
    return {"walls": walls, "missed": [p[:10] for p in PLANTED if p in out], "floor": floor}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    measured = each_tree("bench_redact", "measure", runs)
    here = measured["this tree"]
    if here["missed"]:
        print(f"  planted secrets missed: {here['missed']}")
    row(f"redact a 1 MB tool result (median of {runs})", f"{statistics.median(here['walls']) * 1000:.1f} ms", "<= 20 ms")
    before = measured.get("main before")
    beside(
        "redact a 1 MB tool result, median",
        statistics.median(here["walls"]) * 1000,
        before and statistics.median(before["walls"]) * 1000,
        statistics.median(here["floor"]) * 1000,
        "one re.sub of the planted shapes and known values",
        "<= 20 ms",
    )


if __name__ == "__main__":
    main()
