"""Learning-across-runs benchmarks (issue 18 items 3-5): what they add to a run and to the Curator.

Run: python tests/bench/bench_learn.py   (from the repository root)

- the skills index of 500 skills (load + validate + scan + build, in a fresh process), this tree
  beside main before (the frontmatter now also reads platforms and metadata.hermes);
- building the review request of a 200-turn run (digest of the transcript), per run;
- `runner curator apply` of a plan with 50 merges over 1,000 agent-written skills (checks, snapshot,
  writes, verification, archive) and its `--dry-run`;
- `runner skills import` of a 500-skill Hermes folder (rules and full scan per skill).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _before import side_by_side, time_argv, trees  # noqa: E402
from _common import REPO, clean_env  # noqa: E402

INDEX_SNIPPET = """
import sys, time, statistics, json
from pathlib import Path
from runner.skills.loader import Source, build_index, load_catalog
root = Path(sys.argv[1])
catalog = load_catalog([Source("home", root)])
build_index(catalog.skills.values(), can_manage=True)
assert len(catalog.skills) == 500, len(catalog.skills)
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
    by_tree = {t.name: [t.python, "-c", INDEX_SNIPPET, str(root)] for t in trees()}
    envs = {t.name: t.env() for t in trees()}
    timings = time_argv(by_tree, envs, REPO, runs=9)
    side_by_side("index of 500 skills, fresh process", timings)


def bench_review_request() -> None:
    from runner.skills.review import digest

    messages: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": "do it " * 200}]
    for i in range(200):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 5000})
    times = []
    for _ in range(50):
        started = time.perf_counter()
        digest(messages)
        times.append(time.perf_counter() - started)
    print(
        f"{'review request digest, 200-turn run':<44} median {statistics.median(times) * 1000:.2f} ms (new; no main before)"
    )


def runner_cli(home: Path, jobs: Path, *args: str) -> float:
    env = clean_env(RUNNER_HOME=str(home), RUNNER_JOBS=str(jobs), PYTHONPATH=str(REPO))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "runner", *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"runner {' '.join(args)} failed: {proc.stderr[-800:]}")
    return took


def bench_apply(tmp: Path) -> None:
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
    dry = min(runner_cli(home, jobs, "curator", "apply", str(plan), "--dry-run") for _ in range(3))
    real = runner_cli(home, jobs, "curator", "apply", str(plan))
    print(
        f"{'curator apply, 50 merges / 1,000 skills':<44} dry run {dry:.2f} s, apply {real:.2f} s (whole CLI process)"
    )


def bench_import(tmp: Path) -> None:
    src = tmp / "hermes"
    for i in range(500):
        cat = f"cat{i % 10}"
        name = f"hermes-{i:04d}"
        folder = src / cat / name
        folder.mkdir(parents=True)
        extra = "platforms: [cli, telegram]\nmetadata:\n  hermes:\n    tags: [ops, demo]\n"
        (folder / "SKILL.md").write_text(skill_text(name, extra))
    home = tmp / "import-home"
    jobs = tmp / "jobs.yaml"
    took = runner_cli(home, jobs, "skills", "import", str(src))
    print(f"{'skills import, 500 Hermes skills':<44} {took:.2f} s (whole CLI process; new)")


if __name__ == "__main__":
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (wall times grow with load)")
    with tempfile.TemporaryDirectory() as tmp:
        bench_index(Path(tmp))
        bench_review_request()
        bench_apply(Path(tmp))
        bench_import(Path(tmp))
