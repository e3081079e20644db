"""Spine benchmarks (issue 2): `jobs list` on 50 jobs, a one-turn `run-job`, first request size.

Anchor: hermes-agent 0.19 `hermes cron run` of a trivial job: 4.3 s wall, 115 MB peak RSS,
first chat request 45.7 KB.

Cold start (issue 20), this tree beside main before (tests/bench/_before.py), the trees
alternating: warm `jobs list` on 50 jobs (target <= 0.12 s), a one-turn `run-job` against an
instant server (target <= 0.35 s without the model client's import, whose share is printed
apart), `approvals check`; each with its CPU time, which load on the machine inflates less than
wall time, and its module count and import time from `python -X importtime` (README.md,
"Start-up time").
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _before import Tree, side_by_side, time_argv, trees
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
        cold_start(root, fake)
        fake.stop()


def imports(tree: Tree, args: list[str], env: dict[str, str], cwd: Path) -> str:
    """Modules imported and their summed self time (all images of the command), from -X importtime."""
    proc = subprocess.run(
        [tree.python, "-X", "importtime", "-m", "runner", *args], env=env, cwd=cwd, capture_output=True, text=True
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:") and "self [us]" not in line]
    total = sum(int(line.split("|")[0].removeprefix("import time:")) for line in lines) / 1000
    return f"{len(lines)} modules, {total:.0f} ms"


def model_client_share(both: list[Tree], runs: int = 7) -> str:
    """Cumulative import time of the model client module (its HTTP library or SDK): the least of
    ``runs`` fresh interpreters per tree, the trees alternating (the least is the figure load
    on the machine distorts least)."""
    best: dict[str, float] = {}
    for _ in range(runs):
        for tree in both:
            proc = subprocess.run(
                [tree.python, "-X", "importtime", "-c", "import runner.agent.llm"],
                env=tree.env(),
                capture_output=True,
                text=True,
            )
            for line in proc.stderr.splitlines():
                if line.rstrip().endswith("| runner.agent.llm"):
                    ms = int(line.split("|")[1]) / 1000
                    best[tree.name] = min(best.get(tree.name, ms), ms)
    return "   ".join(f"{name} {ms:.0f} ms" for name, ms in best.items())


def cold_start(root: Path, fake: FakeOpenAI) -> None:
    both = trees()
    print("\ncold start: this tree beside main before (median wall, and cpu of the runner processes)")
    cases = [
        ("jobs list, 50 jobs, warm (median 15)", root, ["jobs", "list"], {}, 15, "<= 0.12 s"),
        ("run-job, one-turn job, instant server (median 10)", root / "one", ["run-job", "one"],
         {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-bench"}, 10, "<= 0.35 s without the client"),
        ("approvals check -- rm -rf build (median 15)", root, ["approvals", "check", "--", "rm", "-rf", "build"], {}, 15, ""),
    ]  # fmt: skip
    for label, cwd, args, extra, runs, target in cases:
        envs = {t.name: t.env(RUNNER_HOME=str(root / f"cold-{t.name}".replace(" ", "-")), **extra) for t in both}
        argv = {t.name: [t.python, "-m", "runner", *args] for t in both}
        side_by_side(label, time_argv(argv, envs, cwd, runs), target)
        print("  imports: " + "   ".join(f"{t.name} {imports(t, args, envs[t.name], cwd)}" for t in both))
    print(f"  model client import (runner.agent.llm, cumulative, least of 7): {model_client_share(both)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
