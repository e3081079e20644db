"""The tamper check's cost per run (issue 13): computing the control plane of a run and hashing it
at start and end, with a 50-job jobs.yaml whose jobs each have a prompt template and a pre_run
script, plus the bundled skills folder with 20 skills (target: <= 10 ms added to a run).

jobs.yaml is parsed before the run starts anyway (the run needs its job), so the figure is what
the check adds: ``protected_set`` + two fingerprints + the comparison.

Main before: the same measurement run by main before's tree (``_before.each_tree``). Floor: the
same files read and hashed twice with ``hashlib.sha256`` in a loop, nothing else.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _before import each_tree  # noqa: E402
from _common import beside, row  # noqa: E402

from runner.run.protect import protected_set, tampered  # noqa: E402
from runner.settings import Settings  # noqa: E402


def project(root: Path) -> Settings:
    (root / "jobs" / "scripts").mkdir(parents=True)
    lines = ["jobs:"]
    for i in range(50):
        (root / "jobs" / f"p{i}.md.j2").write_text(f"Report {i} for {{{{ today }}}}\n" * 20)
        (root / "jobs" / "scripts" / f"s{i}.sh").write_text(f"#!/bin/sh\necho collect {i}\n")
        lines.append(
            f"  job-{i}:\n    prompt: jobs/p{i}.md.j2\n    pre_run: jobs/scripts/s{i}.sh\n"
            f"    schedule: '{i % 60} {i % 24} * * *'\n    toolsets: [terminal, files]"
        )
    (root / "jobs.yaml").write_text("\n".join(lines) + "\n")
    for i in range(20):
        skill = root / "skills" / f"skill-{i}"
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(f"---\nname: skill-{i}\ndescription: skill {i}\n---\n" + "step\n" * 200)
    (root / "home").mkdir()
    settings = Settings(home=root / "home", jobs_path=root / "jobs.yaml", config_path=root / "home" / "config.yaml")
    assert len(settings.jobs.jobs) == 50
    return settings


def measure(rounds: int) -> dict[str, object]:
    """Seconds per tamper check (``rounds`` of them), the files it hashes, and the floor's seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = project(Path(tmp))
        job = settings.jobs.jobs["job-7"]
        samples, files, floor = [], 0, []
        for _ in range(rounds):
            start = time.perf_counter()
            plane = protected_set(settings, job)
            before = plane.fingerprint()
            changed = tampered(plane, before)
            samples.append(time.perf_counter() - start)
            files = len(before.digests)
        assert not changed
        paths = sorted(p for p in Path(tmp).rglob("*") if p.is_file() and p.parent.name != "home")
        for _ in range(rounds):
            start = time.perf_counter()
            for _twice in range(2):
                for path in paths:
                    hashlib.sha256(path.read_bytes()).hexdigest()
            floor.append(time.perf_counter() - start)
    return {"samples": samples, "files": files, "floor": floor, "floor_files": len(paths)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    measured = each_tree("bench_tamper", "measure", parser.parse_args().rounds)
    samples, files = sorted(measured["this tree"]["samples"]), measured["this tree"]["files"]
    median = statistics.median(samples)
    row(f"tamper check per run, 50 jobs ({files} files hashed twice), median", f"{median * 1000:.2f} ms", "<= 10 ms")
    row("  p99", f"{samples[int(len(samples) * 0.99) - 1] * 1000:.2f} ms", "")
    before = measured.get("main before")
    beside(
        "tamper check per run, median",
        median * 1000,
        before and statistics.median(before["samples"]) * 1000,
        statistics.median(measured["this tree"]["floor"]) * 1000,
        f"sha256 of the {measured['this tree']['floor_files']} project files, twice",
        "<= 10 ms",
    )


if __name__ == "__main__":
    main()
