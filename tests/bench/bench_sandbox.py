"""The sandbox's price (issue 29): ``python tests/bench/bench_sandbox.py [RUNS]``.

Prints, beside main before the sandbox (tests/bench/_before.py: ``$RUNNER_BENCH_BASE``, whose
local backend ran commands on the host):

1. one command (``true``) on the local backend: p50 over RUNS (default 200) in one process, main
   before / this tree without a sandbox / this tree in its sandbox, and the sandbox's extra;
2. opening and closing the backend (what every run pays once: bubblewrap and the sandbox's first
   process start, and end with the run);
3. a 20-command job, ``run-job --replay`` end to end (the commands a real nightly job runs: git,
   grep, ls, cat, find, wc, python), main before against this tree (the sandbox on by default);
4. a one-turn replayed run (no command), main before against this tree;
and for 3 and 4 this tree with ``sandbox: off`` too, so the sandbox's own share shows apart from
the rest of this tree's start (since issue 29 every ``run-job`` validates jobs.yaml and config.yaml
itself: ~0.1 s of pydantic that main before's snapshot saved).

Targets (issue 29): p50 per command within 15 ms of main before's; the 20-command job within
1.3x of main before; the one-turn run within 150 ms of main before.

Main before has the sandbox too now (issue 29 is in it), so its sandboxed figures are measured as
well. Floors, the same work with runner out of the way: a command, ``subprocess.run(["true"])`` (a
spawn, what a command in an open sandbox costs too); a sandbox's open+close, one bare ``bwrap``
(new namespaces, / read-only) running ``true``; the replayed runs, a bare ``python -c`` reading the
cassette and, for the 20-command job, running its 20 commands with ``subprocess.run``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import Tree, side_by_side, time_argv, trees  # noqa: E402
from _common import REPO, beside, clean_env  # noqa: E402

#: a measurement run by each tree's own Python: per-command p50 of the local backend, and the
#: open+close of a backend, with or without a sandbox plan (this tree only has one)
PROBE = r"""
import json, statistics, sys, tempfile, time
from pathlib import Path
try:
    from runner.backends.base import BackendContext
    from runner.backends.local import LocalBackend
    from runner.backends.sandbox import Plan
except ModuleNotFoundError:  # main before the move to runner/backends/
    from backends.base import BackendContext
    from backends.local import LocalBackend
    from backends.sandbox import Plan
runs, sandboxed = int(sys.argv[1]), sys.argv[2] == "yes"
work = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
extra = {}
if sandboxed:
    extra["sandbox"] = Plan(workdir=str(work))
def ctx():
    return BackendContext(workdir=work, home=work / "home", run_id="bench", job="bench", **extra)
opens = []
for _ in range(20):
    t = time.perf_counter(); b = LocalBackend(ctx()); b.run("true", timeout=30); b.close()
    opens.append(time.perf_counter() - t)
b = LocalBackend(ctx())
b.run("true", timeout=30)
samples = []
for _ in range(runs):
    t = time.perf_counter(); b.run("true", timeout=30); samples.append(time.perf_counter() - t)
b.close()
samples.sort()
print(json.dumps({"p50": statistics.median(samples) * 1000, "p90": samples[int(0.9 * (len(samples) - 1))] * 1000,
                  "open": statistics.median(opens) * 1000}))
"""

COMMANDS = [
    "git log --oneline -n 5 2>/dev/null || echo no git",
    "ls -la",
    "cat README.md | head -20",
    "grep -rn import --include=*.py . | head -5",
    "find . -name '*.md' | head",
    "wc -l README.md",
    "python3 -c 'print(sum(range(1000)))'",
    "echo hello > out.txt && cat out.txt",
    "mkdir -p build && ls build",
    "date +%Y-%m-%d",
] * 2

JOBS = "jobs:\n  one:\n    prompt: Say ok\n    toolsets: [terminal, files]\n  twenty:\n    prompt: Look around\n    toolsets: [terminal, files]\n    max_iterations: 40\n"
#: this tree also runs both jobs with ``sandbox: off``: what the sandbox itself adds to a run
UNSANDBOXED = JOBS + "  one-off:\n    prompt: Say ok\n    toolsets: [terminal, files]\n    sandbox: off\n" + (
    "  twenty-off:\n    prompt: Look around\n    toolsets: [terminal, files]\n    max_iterations: 40\n    sandbox: off\n"
)


def cassette(commands: list[str]) -> dict[str, object]:
    turns: list[dict[str, object]] = [
        {
            "content": None,
            "tool_calls": [{"id": f"c{i}", "name": "terminal", "arguments": json.dumps({"command": c})}],
            "finish_reason": "tool_calls",
        }
        for i, c in enumerate(commands)
    ]
    turns.append({"content": "done", "finish_reason": "stop"})
    return {"version": 1, "turns": turns}


def probe(tree: Tree, runs: int, sandboxed: bool) -> dict[str, float]:
    out = subprocess.run(
        [tree.python, "-c", PROBE, str(runs), "yes" if sandboxed else "no"],
        env=tree.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{tree.name}: the probe failed: {out.stderr[-800:]}")
    return dict(json.loads(out.stdout))


BWRAP_TRUE = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--share-net",
              "--die-with-parent", "true"]  # fmt: skip


def spawn_floor(argv: list[str], runs: int) -> float:
    """Median milliseconds of ``subprocess.run(argv)``."""
    walls = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, check=True)
        walls.append((time.perf_counter() - started) * 1000)
    return statistics.median(walls)


def per_command(all_trees: list[Tree], runs: int) -> None:
    rows = [(tree.name + ", host", probe(tree, runs, False)) for tree in all_trees]
    rows.append(("this tree, sandbox", probe(all_trees[0], runs, True)))
    if len(all_trees) > 1:
        rows.append(("main before, sandbox", probe(all_trees[1], runs, True)))
    for name, figures in rows:
        print(f"  `true`, {name:<24} p50 {figures['p50']:6.2f} ms   p90 {figures['p90']:6.2f} ms   "
              f"open+close {figures['open']:6.1f} ms")
    found = dict(rows)
    base = found.get("main before, host", found["this tree, host"])
    extra = found["this tree, sandbox"]["p50"] - base["p50"]
    print(f"  the sandbox's extra per command (p50): {extra:+.2f} ms   target <= +15 ms")
    spawn = spawn_floor(["true"], runs)
    for where in ("host", "sandbox"):
        before = found.get(f"main before, {where}")
        beside(f"`true` p50, {where}", found[f"this tree, {where}"]["p50"], before and before["p50"], spawn,
               "subprocess.run(['true'])", "")
    before = found.get("main before, sandbox")
    beside("sandbox open+close", found["this tree, sandbox"]["open"], before and before["open"],
           spawn_floor(BWRAP_TRUE, 20), "one bare bwrap running true", "")


FLOOR_ONE = "import sys\nopen(sys.argv[1], 'rb').read()"
FLOOR_TWENTY = """import json, subprocess, sys
for turn in json.load(open(sys.argv[1]))["turns"]:
    for call in turn.get("tool_calls", []):
        subprocess.run(json.loads(call["arguments"])["command"], shell=True, capture_output=True)
"""


def runs_end_to_end(all_trees: list[Tree], runs: int) -> None:
    project = Path(tempfile.mkdtemp(prefix="bench-sandbox-project-"))
    try:
        (project / "jobs.yaml").write_text(JOBS)  # main before knows no sandbox: key
        (project / "jobs-here.yaml").write_text(UNSANDBOXED)
        (project / "README.md").write_text("# a project\n" + "import x\n" * 50)
        (project / "one.json").write_text(json.dumps(cassette([])))
        (project / "twenty.json").write_text(json.dumps(cassette(COMMANDS)))
        subprocess.run(["git", "init", "-q", str(project)], check=False)
        for job in ("one", "twenty"):
            by_tree, envs = {}, {}
            for tree in all_trees:
                jobs = project / ("jobs-here.yaml" if tree.name == "this tree" else "jobs.yaml")
                home = project / f"home-{tree.name.replace(' ', '-')}"
                envs[tree.name] = tree.env(RUNNER_HOME=str(home), RUNNER_JOBS=str(jobs))
                by_tree[tree.name] = [tree.python, "-m", "runner", "run-job", job, "--replay", str(project / f"{job}.json")]
            here = all_trees[0]
            envs["this tree, sandbox: off"] = envs["this tree"]
            by_tree["this tree, sandbox: off"] = [*by_tree["this tree"][:4], f"{job}-off", *by_tree["this tree"][5:]]
            floor = FLOOR_ONE if job == "one" else FLOOR_TWENTY
            by_tree["floor"], envs["floor"] = [sys.executable, "-c", floor, str(project / f"{job}.json")], clean_env()
            timings = time_argv(by_tree, envs, project, runs)
            floor_timing = timings.pop("floor")
            label = "one-turn replayed run (no command)" if job == "one" else "20-command job, replayed"
            side_by_side(f"  {label}", timings, "+150 ms" if job == "one" else "1.3x")
            sandbox = timings["this tree"].wall - timings["this tree, sandbox: off"].wall
            print(f"    the sandbox's share: {1000 * sandbox:+.0f} ms ({here.name} with it / without it: "
                  f"{timings['this tree'].wall / timings['this tree, sandbox: off'].wall:.2f}x)")
            if "main before" in timings:
                now, before = timings["this tree"].wall, timings["main before"].wall
                print(f"    this tree - main before: {1000 * (now - before):+.0f} ms, ratio {now / before:.2f}x")
            then = timings.get("main before")
            beside(f"  {label}", timings["this tree"].wall, then and then.wall, floor_timing.wall,
                   "python -c: read the cassette" + (", run its 20 commands" if job != "one" else ""), "", "s")
    finally:
        shutil.rmtree(project, ignore_errors=True)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    all_trees = trees()
    print(f"per command, {runs} runs each (in one process):")
    per_command(all_trees, runs)
    print("whole runs (wall and cpu medians, the trees alternating):")
    runs_end_to_end(all_trees, max(5, runs // 20))
    print(f"(this tree: {REPO})")


if __name__ == "__main__":
    main()
