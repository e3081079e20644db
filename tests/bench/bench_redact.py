"""Redaction of a 1 MB tool result (issue 13): median wall time, target <= 20 ms.

The text is realistic tool output: source lines, JSON with escapes, URLs, log lines, and a few
planted secrets of each family, so both the raw pass and the decoded (JSON/URL escapes) pass run.
"""

from __future__ import annotations

import json
import random
import statistics
import time

from _common import row

from runner.safety.redact import Redactor

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


def main() -> None:
    text = corpus()
    r = Redactor(["known-secret-value-1234", 'we"ird\\pa\u00dfword-99'], include_env=False)
    out = r(text)
    missed = [p[:10] for p in PLANTED if p in out]
    if missed:
        print(f"  planted secrets missed: {missed}")
    walls = []
    for _ in range(15):
        start = time.perf_counter()
        r(text)
        walls.append(time.perf_counter() - start)
    row("redact a 1 MB tool result (median of 15)", f"{statistics.median(walls) * 1000:.1f} ms", "<= 20 ms")


if __name__ == "__main__":
    main()
