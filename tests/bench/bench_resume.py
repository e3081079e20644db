"""Issue 33: resume after kill -9 under a real ``runner serve`` (the model is the fake server).

Each round triggers a 6-turn agent job (``resume: auto``, the default); when turn 4's request is
in flight, the worker process running the run is killed with SIGKILL. Measured per round, from
the ledger and the fake server's request log:

- kill -> loss recorded: the first attempt's row ends (``failed/worker_died``);
- loss recorded -> run continues: the resumed attempt's turn-4 request reaches the model
  (target: within 5 s of the loss being detected);
- the resumed attempt asked nothing again for turns 1-3 (checked: request sizes).

Main before: the same rounds on ``runner serve`` from main before's tree and Python, after this
tree's. Floors: for kill -> loss, a parent's ``waitpid`` on a child killed with SIGKILL; for loss ->
turn 4 asked again, a fork of a warm Python with an openai client built making one request to the
same fake (serve's workers are forked warm too), with runner out of the way.

    python tests/bench/bench_resume.py [ROUNDS]
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import Tree, or_reason, trees  # noqa: E402
from _common import REPO, beside, read, row, wait  # noqa: E402

sys.path.insert(0, str(REPO))

from runner.testing import FakeOpenAI, call, final, hang  # noqa: E402

JOBS = """
jobs:
  durable:
    prompt: go
    toolsets: [terminal]
    workdir: {work}
"""


def floors(rounds: int) -> tuple[float, float]:
    """Milliseconds (medians): a killed child's waitpid, and a forked warm process's first answer."""
    import openai

    fake = FakeOpenAI().start()
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-bench")  # built warm, before the fork
    reaped, asked = [], []
    try:
        for _ in range(rounds):
            child = subprocess.Popen(["sleep", "60"])
            started = time.perf_counter()
            child.kill()
            child.wait()
            reaped.append((time.perf_counter() - started) * 1000)
            fake.add(final("floor"))
            started = time.perf_counter()
            pid = os.fork()
            if pid == 0:  # the child: one request, then out without the parent's cleanup
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
                os._exit(0)
            if os.waitpid(pid, 0)[1] != 0:
                raise SystemExit("the floor's forked request failed")
            asked.append((time.perf_counter() - started) * 1000)
    finally:
        fake.stop()
    return statistics.median(reaped), statistics.median(asked)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    found = {t.name: or_reason(t, lambda t=t: one_tree(t, rounds)) for t in trees()}
    here, before = found["this tree"], found.get("main before")
    if isinstance(before, str):
        print(f"main before: {before}")
    reaped, asked = floors(rounds)
    for key, label, floor, what, target in (
        ("detect", "kill -> loss recorded, p50", reaped, "waitpid on a child killed with SIGKILL", ""),
        ("cont", "loss recorded -> turn 4 asked again, p50", asked, "a warm python forked, one openai request", "<= 5000 ms"),
    ):
        then = statistics.median(before[key]) if isinstance(before, dict) else before and "not measured (see above)"
        beside(label, statistics.median(here[key]), then, floor, what, target)


def one_tree(tree: Tree, rounds: int) -> dict[str, list[float]]:
    print(f"== {tree.name}")
    fake = FakeOpenAI().start()
    root = Path(tempfile.mkdtemp(prefix="bench-resume-"))
    home, work = root / "home", root / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.yaml").write_text("serve:\n  max_parallel: 2\n")
    (root / "jobs.yaml").write_text(JOBS.format(work=work))
    env = tree.env(
        RUNNER_HOME=str(home), RUNNER_JOBS=str(root / "jobs.yaml"), OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-bench"
    )
    log = open(root / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([tree.python, "-m", "runner", "serve"], env=env, cwd=root, stderr=log)
    db = home / "runner.db"
    detect: list[float] = []
    cont: list[float] = []
    total: list[float] = []
    try:
        wait(lambda: "serving" in (root / "serve.log").read_text() or db.exists(), 30, "serve")
        for n in range(rounds):
            base = len(fake.requests)
            for turn in (1, 2, 3):
                fake.add(call("terminal", {"command": f"echo r{n}-t{turn} >> marker"}))
            fake.add(hang(60))
            fake.add(call("terminal", {"command": f"echo r{n}-t4 >> marker"}), call("terminal", {"command": "true"}))
            fake.add(final(f"round {n} done"))
            out = subprocess.run(
                [tree.python, "-m", "runner", "jobs", "trigger", "durable"], env=env, cwd=root, capture_output=True, text=True
            )
            assert out.returncode == 0, out.stderr
            wait(lambda b=base: len(fake.requests) >= b + 4, 60, "turn 4's request")  # type: ignore[misc]
            [(run_id, pid)] = read(db, "SELECT id, pid FROM runs WHERE status='running' AND attempt=1")
            os.kill(int(pid), signal.SIGKILL)
            killed = time.monotonic()
            lost_at = resumed_at = None
            while resumed_at is None or lost_at is None:
                now = time.monotonic()
                if lost_at is None and read(db, f"SELECT 1 FROM runs WHERE id='{run_id}' AND ended_at IS NOT NULL"):
                    lost_at = now
                if resumed_at is None and len(fake.requests) >= base + 5:
                    resumed_at = now
                if now - killed > 60:
                    raise SystemExit(f"round {n}: no resume within 60 s (see {root / 'serve.log'})")
                time.sleep(0.005)
            wait(
                lambda r=run_id: read(db, f"SELECT 1 FROM runs WHERE parent_run='{r}' AND status='succeeded'"),  # type: ignore[misc]
                60,
                "the resumed attempt to succeed",
            )
            sizes = [len(r["body"]["messages"]) for r in fake.requests[base:]]
            assert sizes == [2, 4, 6, 8, 8, 10, 12], sizes  # turns 1-3 not asked again
            detect.append((lost_at - killed) * 1000)
            cont.append(max(0.0, resumed_at - lost_at) * 1000)
            total.append((resumed_at - killed) * 1000)
        lines = (work / "marker").read_text().splitlines()
        assert len(lines) == 4 * rounds and len(set(lines)) == len(lines), "a command ran twice"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        fake.stop()
    print(f"resume after kill -9 under serve ({rounds} rounds, {datetime.now():%Y-%m-%d}; every command ran once)")
    row("kill -> loss recorded, p50", f"{statistics.median(detect):.0f} ms", "-")
    row("kill -> loss recorded, max", f"{max(detect):.0f} ms", "-")
    row("loss recorded -> turn 4 asked again, p50", f"{statistics.median(cont):.0f} ms", "<= 5000 ms")
    row("loss recorded -> turn 4 asked again, max", f"{max(cont):.0f} ms", "<= 5000 ms")
    row("kill -> turn 4 asked again, p50", f"{statistics.median(total):.0f} ms", "-")
    return {"detect": detect, "cont": cont}


if __name__ == "__main__":
    main()
