"""Spine benchmarks (issue 2): `jobs list` on 50 jobs, a one-turn `run-job`, first request size.

Anchor: hermes-agent 0.19 `hermes cron run` of a trivial job: 4.3 s wall, 115 MB peak RSS,
first chat request 45.7 KB.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import REPO, clean_env, row, time_cli

from runner.testing import FakeOpenAI, final


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lines = ["jobs:"]
        for i in range(50):
            lines.append(
                f"  job-{i}:\n    prompt: 'do thing {i}'\n    schedule: '{i % 60} {i % 24} * * *'\n"
                f"    timezone: Europe/Berlin\n    toolsets: [terminal, files]"
            )
        (root / "jobs.yaml").write_text("\n".join(lines) + "\n")
        env = clean_env(RUNNER_HOME=str(root / "home"))
        wall, _ = time_cli(["jobs", "list"], env, root)
        row("runner jobs list, 50 jobs (median of 15)", f"{wall:.3f} s", "<= 0.35 s")

        fake = FakeOpenAI().start()
        fake.default = final("ok")
        (root / "one").mkdir()
        (root / "one" / "jobs.yaml").write_text("jobs:\n  one:\n    prompt: Say ok\n    toolsets: [terminal, files]\n")
        env = clean_env(RUNNER_HOME=str(root / "home2"), OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-bench")
        wall, rss = time_cli(["run-job", "one"], env, root / "one", runs=10)
        row("runner run-job, one-turn job, instant server (median)", f"{wall:.3f} s", "<= 1.5 s")
        row("  peak RSS", f"{rss / 1024:.1f} MB", "<= 80 MB")
        first = fake.requests[-1]
        row("first chat request, [terminal, files], one-line prompt", f"{first['bytes'] / 1024:.2f} KB", "<= 6 KB")
        body = first["body"]
        tools_bytes = len(json.dumps(body.get("tools", []), separators=(",", ":")))
        system_bytes = len(body["messages"][0]["content"])
        print(f"  (tools {tools_bytes} B, system prompt {system_bytes} B; anchor 45.7 KB)")
        sample = root / "sample"
        shutil.copytree(REPO / "jobs", sample / "jobs")
        shutil.copy(REPO / "jobs.yaml", sample / "jobs.yaml")
        (sample / "README.md").write_text("# sample\n")
        git = ["git", "-c", "user.name=b", "-c", "user.email=b@example.org"]
        subprocess.run(["git", "init", "-q"], cwd=sample, check=True)
        subprocess.run([*git, "add", "-A"], cwd=sample, check=True)
        subprocess.run([*git, "commit", "-qm", "Add the sample job"], cwd=sample, check=True)
        env = clean_env(RUNNER_HOME=str(root / "home3"), OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-bench")
        subprocess.run(
            [sys.executable, "-m", "runner", "run-job", "nightly-report"],
            env=env,
            cwd=sample,
            capture_output=True,
            check=True,
        )
        row(
            "first chat request, sample nightly-report (1 commit)",
            f"{fake.requests[-1]['bytes'] / 1024:.2f} KB",
            "<= 6 KB",
        )
        fake.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
