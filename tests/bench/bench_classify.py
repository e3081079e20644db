"""Benchmark of the command classifier (runner.safety.shell.classify).

Run:  python tests/bench/bench_classify.py
 or:  pytest tests/bench/bench_classify.py -s     (not collected by a plain `pytest`:
      the file name does not match test_*.py)

Prints the median time per command over the benign corpus (target <= 50 µs) and the
time for 512k-character adversarial inputs (target < 2 s). Per command the best of
several repeats is taken, as timeit recommends, so other load on the machine inflates
the numbers less; the median is over commands.

Main before: the same figures from main before's tree (``_before.each_tree``). Floor: one regex
pass tokenising the same command into words and shell operators (``re.findall``), the scan any
classifier makes before it can judge anything.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # when run as a script, the repository root is not on sys.path
    sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).parent))

from _before import each_tree  # noqa: E402
from _common import beside  # noqa: E402

from runner.safety.shell import classify  # noqa: E402
from tests.safety.corpus import load  # noqa: E402

MEDIAN_TARGET_US = 50.0
ADVERSARIAL_TARGET_S = 2.0
LOOPS = 50
REPEATS = 5

# 512k-character inputs: separators, substitutions, quotes, here-documents, nesting.
ADVERSARIAL_UNITS = (";&|", "a;", "a|", "$(", "`", "'a' ", "<<a ", "${IFS}", "rm -rf x; ", ":(){ :|:& };",
                     "{a,b}", "{", "echo a | xargs rm -rf; ", "echo x >> a.sh; bash a.sh; ", "x=$y; $x ",
                     "git -c core.pager=x log; ",
                     # issue 29: function bodies, aliases, executors, containers, written Makefiles
                     "{ ", "f(){ f; }; f; ", "alias a=b; a ", "parallel x {1} ::: a b; ",
                     "docker run -v /:/h a x /h; ", "printf 'all:\\n\\tx\\n' > Makefile; make; ")  # fmt: skip


TOKENS = re.compile(r"[^\s;&|()<>`$'\"]+|[;&|()<>`$'\"]+")


def tokenise(command: str) -> str:
    """The floor: one regex pass over the command (a verdict-shaped answer, so both return alike)."""
    return "safe" if TOKENS.findall(command) else "empty"


def per_command_us(command: str, judge: object = classify) -> float:
    """Best-of-REPEATS mean time of one classify() call (or the floor's), in microseconds."""
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(LOOPS):
            judge(command)  # type: ignore[operator]
        best = min(best, (time.perf_counter() - start) / LOOPS)
    return best * 1e6


def benign_median_us(judge: object = classify) -> tuple[float, float, float]:
    times = sorted(per_command_us(c, judge) for c in load("benign"))
    return statistics.median(times), times[int(len(times) * 0.9)], times[-1]


def adversarial_seconds(unit: str, size: int = 512 * 1024) -> tuple[float, str]:
    command = (unit * (size // len(unit) + 1))[:size]
    start = time.perf_counter()
    verdict = classify(command)
    return time.perf_counter() - start, verdict.level


def measure() -> dict[str, object]:
    """The benign median (µs) and the slowest 512k adversarial input (s), and the floor's."""
    slowest, floor = 0.0, 0.0
    for unit in ADVERSARIAL_UNITS:
        slowest = max(slowest, adversarial_seconds(unit)[0])
        command = (unit * (512 * 1024 // len(unit) + 1))[: 512 * 1024]
        start = time.perf_counter()
        tokenise(command)
        floor = max(floor, time.perf_counter() - start)
    return {"median": benign_median_us()[0], "slowest": slowest, "floor_median": benign_median_us(tokenise)[0], "floor_slowest": floor}


def main() -> int:
    median, p90, worst = benign_median_us()
    print(f"benign corpus: {len(load('benign'))} commands")
    print(f"  median {median:.1f} µs/command (target <= {MEDIAN_TARGET_US:.0f} µs)")
    print(f"  p90 {p90:.1f} µs, max {worst:.1f} µs")
    slowest: dict[str, float] = {}
    for size, label in ((512 * 1024, "512k"), (128 * 1024 - 1, "128k-1")):
        for unit in ADVERSARIAL_UNITS:
            seconds, verdict = adversarial_seconds(unit, size)
            slowest[label] = max(slowest.get(label, 0.0), seconds)
            print(f"  {label:6} x {unit!r:16} {seconds * 1000:8.1f} ms  {verdict}")
    print(f"512k adversarial: slowest {slowest['512k']:.3f} s (target < {ADVERSARIAL_TARGET_S:.0f} s)")
    print(f"just under the 128k limit: slowest {slowest['128k-1']:.3f} s")
    measured = each_tree("bench_classify", "measure")
    here, before = measured["this tree"], measured.get("main before")
    what = "one re.findall tokenising the same text"
    beside("benign command, median", here["median"], before and before["median"], here["floor_median"], what, f"<= {MEDIAN_TARGET_US:.0f} µs", "µs")
    beside("512k adversarial, slowest", here["slowest"], before and before["slowest"], here["floor_slowest"], what, f"< {ADVERSARIAL_TARGET_S:.0f} s", "s")
    ok = median <= MEDIAN_TARGET_US and slowest["512k"] < ADVERSARIAL_TARGET_S
    return 0 if ok else 1


@pytest.mark.bench
def test_benign_median_within_target() -> None:
    median, _, _ = benign_median_us()
    print(f"\nbenign median {median:.1f} µs/command")
    assert median <= MEDIAN_TARGET_US


@pytest.mark.bench
@pytest.mark.parametrize("unit", ADVERSARIAL_UNITS, ids=repr)
def test_512k_adversarial_within_target(unit: str) -> None:
    seconds, verdict = adversarial_seconds(unit)
    print(f"\n512k x {unit!r}: {seconds * 1000:.1f} ms ({verdict})")
    assert seconds < ADVERSARIAL_TARGET_S
    assert verdict != "safe"


if __name__ == "__main__":
    sys.exit(main())
