"""`runner jobs validate` on 50 agent jobs with template files (static variable checks), as a
user runs it: a fresh process each time. Target: median <= 0.5 s.

Main before: the same command on main before's tree, timed alternately (``_before.time_argv``).
Floor: a bare ``python -c`` that parses the same jobs.yaml with PyYAML and the 50 templates with
Jinja2: the reading and parsing any validator must do, without runner.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import time_argv, trees  # noqa: E402
from _common import beside, clean_env, row, time_cli  # noqa: E402

JOBS = 50
RUNS = 15
FLOOR = """import sys, pathlib, yaml, jinja2
root = pathlib.Path(sys.argv[1])
jobs = yaml.safe_load((root / "jobs.yaml").read_text())["jobs"]
env = jinja2.Environment()
for job in jobs.values():
    env.parse((root / job["prompt"]).read_text())
"""
TEMPLATE = """You review {{ vars.repo }} for {{ job.name }} on {{ today }} (yesterday: {{ yesterday }}).
{% for line in pre_run.stdout.splitlines() %}- {{ line }}
{% endfor %}{% if last_output %}Last time:
{{ last_output }}{% endif %}
Owner: {{ vars.owner | default('nobody') }}, token set: {{ 'yes' if env.TOKEN else 'no' }}.
"""


def write_project(root: Path) -> None:
    (root / "prompts").mkdir()
    lines = ["jobs:"]
    for i in range(JOBS):
        (root / "prompts" / f"job{i}.md.j2").write_text(TEMPLATE)
        lines += [
            f"  job-{i:02d}:",
            f"    schedule: '{i % 60} {i % 24} * * mon-fri'",
            f"    prompt: prompts/job{i}.md.j2",
            f"    vars: {{repo: repo{i}, owner: me}}",
            "    env_vars: [TOKEN]",
            "    model: [default]",
        ]
    (root / "jobs.yaml").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_project(root)
        env = clean_env(
            RUNNER_HOME=str(root / "home"), OPENAI_API_KEY="sk-bench", OPENAI_BASE_URL="http://127.0.0.1:9/v1"
        )
        args = ["--jobs", str(root / "jobs.yaml"), "jobs", "validate"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, rss = time_cli(args, env, root, runs=runs)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / (runs + 1)
        row(f"jobs validate, {JOBS} jobs with template files (median wall)", f"{wall * 1000:.0f} ms", "<= 500 ms")
        row("  CPU per run (user+sys, mean; wall on a busy machine is higher)", f"{cpu * 1000:.0f} ms", "(info)")
        row("peak RSS", f"{rss / 1024:.0f} MB", "(info)")
        ours = {k: v for k, v in env.items() if k.startswith(("RUNNER_", "OPENAI_"))}
        both = trees()
        by_tree = {t.name: [t.python, "-m", "runner", *args] for t in both}
        envs = {t.name: t.env(**ours) for t in both}
        by_tree["floor"], envs["floor"] = [sys.executable, "-c", FLOOR, str(root)], env
        timed = time_argv(by_tree, envs, root, runs)
        before = timed.get("main before")
        beside(
            f"jobs validate, {JOBS} jobs (median wall)",
            timed["this tree"].wall * 1000,
            before and before.wall * 1000,
            timed["floor"].wall * 1000,
            "python -c: PyYAML + Jinja2 parse of the same files",
            "<= 500 ms",
        )


if __name__ == "__main__":
    main()
