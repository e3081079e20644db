"""Skills benchmarks: a curator pass over 10,000 agent-written skills, and the index for 500.

Run: python tests/bench/bench_skills.py [--skills N] [--index N] [--repeats N]
Prints medians with the target beside each.

Main before: the same figures from main before's tree (``_before.each_tree``). Floors, plain
Python on the same files: for the index, reading every SKILL.md and splitting its front
matter's ``key: value`` lines; for the curator pass, ``json`` load and dump of the usage file and ``os.rename`` of
the folders past archive age.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import each_tree  # noqa: E402
from _common import beside  # noqa: E402

from runner.clock import iso  # noqa: E402
from runner.settings import Settings  # noqa: E402
from runner.skills import SkillPaths  # noqa: E402
from runner.skills.curator import run_pass  # noqa: E402
from runner.skills.loader import Source, build_index, load_catalog  # noqa: E402

NOW = datetime(2026, 6, 1, tzinfo=UTC)
BODY = (
    "# Procedure\n\n"
    + "".join(
        f"{i}. Step {i}: check the inputs, run the command, look at the output and note what changed.\n"
        for i in range(1, 25)
    )
    + "\n## Pitfalls\n- Do not skip the dry run.\n- Keep the report short.\n"
)


def skill_text(name: str, category: str) -> str:
    description = (
        f"How to {name.replace('-', ' ')}: the checks to run first, the commands, and what a good result looks like."
    )
    return f"---\nname: {name}\ndescription: {json.dumps(description)}\ncategory: {category}\n---\n{BODY}"


def make_agent_skills(home: Path, n: int) -> None:
    """n agent-written skills: a third fresh, a third past stale, a third past archive age."""
    paths = SkillPaths.under(home)
    paths.root.mkdir(parents=True)
    records = {}
    for i in range(n):
        name = f"skill-{i:05d}"
        folder = paths.live(name)
        folder.mkdir()
        (folder / "SKILL.md").write_text(skill_text(name, f"cat{i % 10}"))
        age = (5, 45, 120)[i % 3]
        records[name] = {"created_at": iso(NOW - timedelta(days=age)), "created_by": "agent", "state": "active"}
    paths.usage.write_text(json.dumps({"version": 1, "skills": records}))


def curator_floor(n: int) -> float:
    """Seconds of the plain-Python floor of a pass: the usage file loaded and written back, the
    folders past archive age renamed."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        make_agent_skills(home, n)
        paths = SkillPaths.under(home)
        started = time.perf_counter()
        usage = json.loads(paths.usage.read_text())
        archive = home / "archived"
        archive.mkdir()
        for i in range(2, n, 3):
            os.rename(paths.live(f"skill-{i:05d}"), archive / f"skill-{i:05d}")
        paths.usage.write_text(json.dumps(usage))
        return time.perf_counter() - started


def index_floor(root: Path) -> float:
    """Seconds of the plain-Python floor of the index: each SKILL.md read, its front matter split."""
    started = time.perf_counter()
    for path in sorted(root.glob("*/SKILL.md")):
        dict(line.partition(": ")[::2] for line in path.read_text().split("---\n")[1].splitlines())
    return time.perf_counter() - started


def bench_curator(n: int = 10_000, repeats: int = 3) -> dict[str, object]:
    times = []
    quiet = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp) / "home"
            make_agent_skills(home, n)
            (Path(tmp) / "jobs.yaml").write_text("jobs:\n  j:\n    prompt: hi\n")
            settings = Settings.from_options(jobs=str(Path(tmp) / "jobs.yaml"), home=str(home))
            assert (
                settings.store and settings.jobs
            )  # open the store, load jobs.yaml: outside the timing (serve has both)
            started = time.perf_counter()
            result = run_pass(settings, now=NOW)
            times.append(time.perf_counter() - started)
            started = time.perf_counter()
            run_pass(settings, now=NOW + timedelta(seconds=1))  # nothing left to change
            quiet.append(time.perf_counter() - started)
    return {"changed": len(result.plan.transitions), "times": times, "quiet": quiet}


def show_curator(n: int, here: dict, before: dict | None) -> None:
    times = here["times"]
    print(f"curator pass, {n:,} agent skills ({here['changed']:,} changed, snapshot + moves + report):")
    print(f"  median {statistics.median(times):.3f} s   target <= 2 s   runs: {', '.join(f'{t:.3f}' for t in times)}")
    print(f"  pass with nothing to change: median {statistics.median(here['quiet']):.3f} s")
    beside(
        f"curator pass, {n:,} skills",
        statistics.median(times),
        before and statistics.median(before["times"]),
        curator_floor(n),
        "json load/dump of the usage file, os.rename of the archived third",
        "<= 2 s",
        "s",
    )


def bench_index(n: int = 500, repeats: int = 20) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "skills"
        for i in range(n):
            name = f"task-{i:03d}-procedure"
            folder = root / name
            folder.mkdir(parents=True)
            (folder / "SKILL.md").write_text(skill_text(name, f"category-{i % 12}"))
        sources = [Source("home", root)]
        load_and_build, load_cpu, build_only = [], [], []
        index = ""
        for _ in range(repeats):
            started, cpu = time.perf_counter(), time.process_time()
            catalog = load_catalog(sources)
            index = build_index(catalog.skills.values(), can_manage=True)
            load_and_build.append(time.perf_counter() - started)
            load_cpu.append(time.process_time() - cpu)
            started = time.perf_counter()
            build_index(catalog.skills.values(), can_manage=True)
            build_only.append(time.perf_counter() - started)
        assert len(catalog.skills) == n
        floor = statistics.median(index_floor(root) for _ in range(repeats))
    return {"load_and_build": load_and_build, "load_cpu": load_cpu, "build_only": build_only, "size": len(index), "floor": floor}


def show_index(n: int, here: dict, before: dict | None) -> None:
    load_and_build = here["load_and_build"]
    print(f"skills index, {n} skills:")
    print(
        f"  load from disk + validate + scan + build: median {statistics.median(load_and_build) * 1000:.1f} ms wall, "
        f"{statistics.median(here['load_cpu']) * 1000:.1f} ms CPU   target <= 100 ms"
    )
    print(f"  build from loaded skills: median {statistics.median(here['build_only']) * 1000:.2f} ms")
    print(f"  size: {here['size']:,} chars, about {here['size'] // 4:,} tokens (chars / 4)")
    beside(
        f"skills index, {n} skills, load + build",
        statistics.median(load_and_build) * 1000,
        before and statistics.median(before["load_and_build"]) * 1000,
        here["floor"] * 1000,
        "read each SKILL.md, split its front matter's key: value lines",
        "<= 100 ms",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skills", type=int, default=10_000, help="agent skills for the curator pass")
    parser.add_argument("--index", type=int, default=500, help="skills in the index")
    parser.add_argument("--repeats", type=int, default=3, help="curator passes (the index runs 20 / 3 times more)")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (wall times grow with load)")
    index = each_tree("bench_skills", "bench_index", args.index, max(1, args.repeats * 20 // 3))
    show_index(args.index, index["this tree"], index.get("main before"))
    curator = each_tree("bench_skills", "bench_curator", args.skills, args.repeats)
    show_curator(args.skills, curator["this tree"], curator.get("main before"))


if __name__ == "__main__":
    main()
