"""Learning-across-runs benchmarks (issue 18 items 3-5): what they add to a run and to the Curator.

Run: python tests/bench/bench_learn.py [--runs 9]   (from the repository root)

- the skills index of 500 skills (load + validate + scan + build, in a fresh process), this tree
  beside main before (the frontmatter now also reads platforms and metadata.hermes);
- building the review request of a 200-turn run (digest of the transcript), per run;
- `runner curator apply` of a plan with 50 merges over 1,000 agent-written skills (checks, snapshot,
  writes, verification, archive) and its `--dry-run`;
- `runner skills import` of a 500-skill Hermes folder (rules and full scan per skill).

Each beside main before (it has all four now: its tree and Python; the digest through
``_before.each_tree``) and beside its floor, plain Python doing the same file work with runner out
of the way: the index, a fresh ``python -c`` reading each SKILL.md and splitting its front matter;
the digest, joining each message's first 200 characters; apply, writing the 50 merged SKILL.md
files and renaming the 50 sources away; import, ``shutil.copytree`` of the 500 skills.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _before import Tree, each_tree, side_by_side, time_argv, trees  # noqa: E402
from _common import REPO, beside  # noqa: E402

INDEX_SNIPPET = """
import sys, time, statistics, json
from pathlib import Path
from runner.skills.loader import Source, build_index, load_catalog
root = Path(sys.argv[1])
catalog = load_catalog([Source("home", root)])
build_index(catalog.skills.values(), can_manage=True)
assert len(catalog.skills) == 500, len(catalog.skills)
"""
INDEX_FLOOR = """
import sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("*/SKILL.md")):
    dict(line.partition(": ")[::2] for line in path.read_text().split("---\\n")[1].splitlines())
"""

BODY = "".join(f"{i}. Step {i}: check the inputs, run the command, look at the output.\n" for i in range(1, 25))


def skill_text(name: str, extra: str = "") -> str:
    return f"---\nname: {name}\ndescription: How to {name.replace('-', ' ')} safely.\n{extra}---\n# Steps\n{BODY}"


def write_skills(root: Path, n: int, extra: str = "") -> list[str]:
    names = []
    for i in range(n):
        name = f"task-{i:04d}"
        (root / name).mkdir(parents=True)
        (root / name / "SKILL.md").write_text(skill_text(name, extra))
        names.append(name)
    return names


def bench_index(tmp: Path) -> None:
    root = tmp / "index"
    write_skills(root, 500, "category: ops\n")
    both = trees()
    by_tree = {t.name: [t.python, "-c", INDEX_SNIPPET, str(root)] for t in both}
    envs = {t.name: t.env() for t in both}
    by_tree["floor"], envs["floor"] = [sys.executable, "-c", INDEX_FLOOR, str(root)], both[0].env()
    timings = time_argv(by_tree, envs, REPO, runs=RUNS)
    floor = timings.pop("floor")
    side_by_side("index of 500 skills, fresh process", timings)
    before = timings.get("main before")
    beside("index of 500 skills, fresh process", timings["this tree"].wall, before and before.wall, floor.wall,
           "python -c: read each SKILL.md, split its front matter", "", "s")


RUNS = 9


def transcript() -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": "do it " * 200}]
    for i in range(200):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 5000})
    return messages


def median_ms(fn: object, repeat: int = 50) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def digest_ms() -> float:
    """Median ms of the review request's digest of a 200-turn transcript."""
    from runner.skills.review import digest

    messages = transcript()
    return median_ms(lambda: digest(messages))


def bench_review_request() -> None:
    found = each_tree("bench_learn", "digest_ms")
    here = found["this tree"]
    print(f"{'review request digest, 200-turn run':<44} median {here:.2f} ms")
    messages = transcript()
    floor = median_ms(lambda: "\n".join(str(m.get("content"))[:200] for m in messages))
    beside("review request digest, 200-turn run", here, found.get("main before"), floor,
           "joining each message's first 200 characters", "")


def runner_cli(home: Path, jobs: Path, *args: str, tree: Tree | None = None) -> float:
    tree = tree or trees()[0]
    env = tree.env(RUNNER_HOME=str(home), RUNNER_JOBS=str(jobs))
    started = time.perf_counter()
    proc = subprocess.run([tree.python, "-m", "runner", *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"runner {' '.join(args)} failed: {proc.stderr[-800:]}")
    return took


def bench_apply(tmp: Path) -> None:
    found = {t.name: one_apply(tmp / t.name.replace(" ", "-"), t) for t in trees()}
    here, before = found["this tree"], found.get("main before")
    print(
        f"{'curator apply, 50 merges / 1,000 skills':<44} dry run {here[0]:.2f} s, apply {here[1]:.2f} s (whole CLI process)"
    )
    beside("curator apply, 50 merges / 1,000 skills", here[1], before and before[1], here[2],
           "in-process: write the 50 merged files, rename the 50 sources", "", "s")


def one_apply(tmp: Path, tree: Tree) -> tuple[float, float, float]:
    from runner.skills.merge import content_hash

    home = tmp / "home"
    root = home / "skills"
    names = write_skills(root, 1000)
    records = {n: {"created_by": "agent", "created_at": "2026-11-01T00:00:00.000+00:00"} for n in names}
    (root / ".usage.json").write_text(json.dumps({"version": 1, "skills": records}))
    merges = []
    for i in range(50):
        into, src = names[2 * i], names[2 * i + 1]
        merges.append(
            {
                "into": into,
                "sources": [src],
                "reason": "overlap",
                "content": skill_text(into) + "\n## Also\nWhat the other skill knew.\n",
                "hashes": {into: content_hash(root / into), src: content_hash(root / src)},
            }
        )
    plan = tmp / "plan.json"
    plan.write_text(json.dumps({"version": 1, "merges": merges}))
    jobs = tmp / "jobs.yaml"
    jobs.write_text("jobs:\n  j:\n    prompt: hi\n")
    dry = min(runner_cli(home, jobs, "curator", "apply", str(plan), "--dry-run", tree=tree) for _ in range(3))
    real = runner_cli(home, jobs, "curator", "apply", str(plan), tree=tree)
    floor_root = tmp / "floor"
    write_skills(floor_root, 1000)
    (floor_root / ".archive").mkdir()
    started = time.perf_counter()
    for merge in merges:
        (floor_root / merge["into"] / "SKILL.md").write_text(merge["content"])
        for source in merge["sources"]:
            os.rename(floor_root / source, floor_root / ".archive" / source)
    return dry, real, time.perf_counter() - started


def bench_import(tmp: Path) -> None:
    src = tmp / "hermes"
    for i in range(500):
        cat = f"cat{i % 10}"
        name = f"hermes-{i:04d}"
        folder = src / cat / name
        folder.mkdir(parents=True)
        extra = "platforms: [cli, telegram]\nmetadata:\n  hermes:\n    tags: [ops, demo]\n"
        (folder / "SKILL.md").write_text(skill_text(name, extra))
    jobs = tmp / "jobs.yaml"
    jobs.write_text("jobs:\n  j:\n    prompt: hi\n")
    found = {t.name: runner_cli(tmp / f"import-home-{t.name.replace(' ', '-')}", jobs, "skills", "import", str(src), tree=t)
             for t in trees()}  # fmt: skip
    print(f"{'skills import, 500 Hermes skills':<44} {found['this tree']:.2f} s (whole CLI process)")
    started = time.perf_counter()
    shutil.copytree(src, tmp / "import-floor")
    beside("skills import, 500 Hermes skills", found["this tree"], found.get("main before"),
           time.perf_counter() - started, "in-process shutil.copytree of the 500 skills", "", "s")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--runs":  # fewer runs of the index (a quick check)
        RUNS = int(sys.argv[2])
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (wall times grow with load)")
    with tempfile.TemporaryDirectory() as tmp:
        bench_index(Path(tmp))
        bench_review_request()
        bench_apply(Path(tmp))
        bench_import(Path(tmp))
