"""`runner jobs validate` on 50 agent jobs with template files (static variable checks), as a
user runs it: a fresh process each time. Target: median <= 0.5 s."""

from __future__ import annotations

import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import clean_env, row, time_cli  # noqa: E402

JOBS = 50
RUNS = 15
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
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_project(root)
        env = clean_env(
            RUNNER_HOME=str(root / "home"), OPENAI_API_KEY="sk-bench", OPENAI_BASE_URL="http://127.0.0.1:9/v1"
        )
        args = ["--jobs", str(root / "jobs.yaml"), "jobs", "validate"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, rss = time_cli(args, env, root, runs=RUNS)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / (RUNS + 1)
        row(f"jobs validate, {JOBS} jobs with template files (median wall)", f"{wall * 1000:.0f} ms", "<= 500 ms")
        row("  CPU per run (user+sys, mean; wall on a busy machine is higher)", f"{cpu * 1000:.0f} ms", "(info)")
        row("peak RSS", f"{rss / 1024:.0f} MB", "(info)")


if __name__ == "__main__":
    main()
