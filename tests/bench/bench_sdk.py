"""The model client on the openai SDK (issue 15): cold one-turn `run-job` (wall, peak RSS, CPU),
the SDK import's share of it, and the streaming overhead per turn for a 2 KB answer.

Each figure is printed beside the same figure for main before the change: a checkout and a venv
given by RUNNER_BENCH_BASE (default /work/base) and RUNNER_BENCH_BASE_PYTHON (default
/tmp/venv-base/bin/python); without them only this tree's figures are printed.

Targets: run-job one turn, cold process <= 1.5 s and <= 90 MB; streaming overhead <= 5 ms per turn.

Floors, the same work with runner out of the way: for the cold run, a bare ``python -c`` that
imports openai and makes the same request (issue 36's floor, measured the same way); for the
streaming overhead, bare httpx reading the same answer's SSE lines and ``json.loads`` of each,
less the same answer unstreamed (client CPU).
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

from _common import REPO, beside, clean_env, row

from runner.testing import FakeOpenAI, Reply, final

BASE = Path(os.environ.get("RUNNER_BENCH_BASE", "/work/base"))
BASE_PYTHON = os.environ.get("RUNNER_BENCH_BASE_PYTHON", "/tmp/venv-base/bin/python")
RUNS = 5


def have_base() -> bool:
    return (BASE / "runner").is_dir() and Path(BASE_PYTHON).exists()


MEASURE = """
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.run(sys.argv[1:], capture_output=True).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(code, time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
"""


ASK = "import openai\nopenai.OpenAI().chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'Say ok'}])"


def cold_run_job(
    python: str, repo: Path, fake: FakeOpenAI, root: Path, floor: bool = False
) -> tuple[float, float, float]:
    """Median wall and CPU seconds and peak RSS (MB) of a one-turn `run-job`, fresh process each
    (each measured by its own small parent, so one tree's peak never shows in the other's); with
    ``floor``, of the bare ``python -c`` that imports openai and makes the same request."""
    (root / "jobs.yaml").write_text("jobs:\n  one:\n    prompt: Say ok\n    toolsets: [terminal, files]\n")
    env = clean_env(RUNNER_HOME=str(root / "home"), OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-bench")
    env["PYTHONPATH"] = str(repo)
    args = [python, "-c", ASK] if floor else [python, "-m", "runner", "run-job", "one"]
    subprocess.run(args, env=env, cwd=root, capture_output=True, check=True)  # bytecode caches, migrations
    walls, cpus, rss = [], [], 0.0
    for _ in range(RUNS):
        res = subprocess.run([sys.executable, "-c", MEASURE, *args], env=env, cwd=root, capture_output=True, text=True)
        code, wall, cpu, peak = res.stdout.split()
        if code != "0":
            raise SystemExit(f"run-job failed ({repo}): exit {code}")
        walls.append(float(wall))
        cpus.append(float(cpu))
        rss = max(rss, float(peak))
    return statistics.median(walls), statistics.median(cpus), rss


IMPORT_SDK = """
import resource, time
import httpx, pydantic, runner.agent.llm  # what a run has loaded before its first model request
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start, cpu = time.perf_counter(), time.process_time()
import openai
took, cpu = time.perf_counter() - start, time.process_time() - cpu
print(took, cpu, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024)
"""


def sdk_import() -> tuple[float, float, float]:
    """Median wall and CPU seconds and RSS growth (MB) of `import openai` in a process that has
    what a run has loaded before its first model request."""
    env = clean_env()
    out = []
    for _ in range(5):
        res = subprocess.run([sys.executable, "-c", IMPORT_SDK], env=env, capture_output=True, text=True, check=True)
        out.append(tuple(float(x) for x in res.stdout.split()))
    return tuple(statistics.median(o[i] for o in out) for i in range(3))  # type: ignore[return-value]


PER_TURN = """
import json, statistics, sys, time
from runner.agent.keys import Credential, StaticKeys
from runner.agent.llm import ChatClient
base_url, modes = sys.argv[1], json.loads(sys.argv[2])
text = ("lorem ipsum dolor sit amet " * 80)[:2048]
out = {}
for stream in modes:
    extra = {"stream": stream} if "stream" in ChatClient.__init__.__code__.co_varnames else {}
    llm = ChatClient(base_url=base_url, model="m", keys=StaticKeys(Credential("k", "sk-bench")), **extra)
    for _ in range(20):
        llm.complete([{"role": "user", "content": "hi"}], [])
    walls, cpus = [], []
    for _ in range(80):
        w, c = time.perf_counter(), time.process_time()
        reply = llm.complete([{"role": "user", "content": "hi"}], [])
        cpus.append(time.process_time() - c)
        walls.append(time.perf_counter() - w)
        assert reply.content == text
    out[str(stream)] = [statistics.median(walls), statistics.median(cpus)]
print(json.dumps(out))
"""


FLOOR_TURN = """
import json, statistics, sys, time, httpx
client = httpx.Client(base_url=sys.argv[1], headers={"Authorization": "Bearer sk-bench"})
body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
def once(stream):
    if not stream:
        return client.post("/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    text = []
    with client.stream("POST", "/chat/completions", json=body | {"stream": True}) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                choices = json.loads(line[6:])["choices"]
                text.append(choices[0]["delta"].get("content") or "" if choices else "")
    return "".join(text)
out = {}
for stream in json.loads(sys.argv[2]):
    for _ in range(20):
        once(stream)
    walls, cpus = [], []
    for _ in range(80):
        w, c = time.perf_counter(), time.process_time()
        once(stream)
        cpus.append(time.process_time() - c)
        walls.append(time.perf_counter() - w)
    out[str(stream)] = [statistics.median(walls), statistics.median(cpus)]
print(json.dumps(out))
"""


def per_turn(
    python: str, repo: Path, server: FakeOpenAI, modes: list[bool], code: str = PER_TURN
) -> dict[str, list[float]]:
    """Median wall and client CPU seconds of one `complete()` of a 2 KB answer from ``server``
    (run here, so its sending is not in the client's process); ``FLOOR_TURN`` for the bare SDK's."""
    env = clean_env()
    env["PYTHONPATH"] = str(repo)
    args = [python, "-c", code, server.base_url, json.dumps(modes)]
    res = subprocess.run(args, env=env, cwd=repo, capture_output=True, text=True)  # cwd: the tree measured
    if res.returncode != 0:
        raise SystemExit(f"per-turn measure failed ({repo}): {res.stderr[-800:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def sdk_share_in_run(fake: FakeOpenAI, root: Path) -> tuple[float, float]:
    """(seconds the SDK's imports took, whole process wall) in one cold `run-job`, from
    ``-X importtime``: the top-level imports of ``openai``/``httpx2`` modules, nested ones included."""
    env = clean_env(RUNNER_HOME=str(root / "home"), OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-bench")
    start = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runner", "run-job", "one"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - start
    total = 0
    for line in res.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        _, cumulative, name = line.split("|")
        if name.startswith(" ") and not name.startswith("  ") and name.strip().split(".")[0] in ("openai", "httpx2"):
            total += int(cumulative)
    return total / 1e6, wall


def main() -> None:
    base = have_base()
    fake = FakeOpenAI().start()
    fake.default = final("ok")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "new").mkdir()
        wall, cpu, rss = cold_run_job(sys.executable, REPO, fake, Path(tmp) / "new")
        in_run, run_wall = sdk_share_in_run(fake, Path(tmp) / "new")
        was = "main before: n/a"
        if base:
            (Path(tmp) / "base").mkdir()
            b_wall, b_cpu, b_rss = cold_run_job(BASE_PYTHON, BASE, fake, Path(tmp) / "base")
            was = f"main before: {b_wall:.2f} s wall, {b_cpu:.2f} s CPU, {b_rss:.0f} MB"
        (Path(tmp) / "floor").mkdir()
        f_wall, f_cpu, f_rss = cold_run_job(sys.executable, REPO, fake, Path(tmp) / "floor", floor=True)
    fake.stop()
    row("run-job, one turn, cold process: wall (median)", f"{wall:.3f} s", "<= 1.5 s")
    row("  CPU time (user+sys, median)", f"{cpu:.3f} s", "-")
    row("  peak RSS", f"{rss:.1f} MB", "<= 90 MB")
    print(f"  ({was})")
    what = "python -c: import openai, the same request"
    beside("run-job, one turn, cold: wall", wall, b_wall if base else None, f_wall, what, "<= 1.5 s", "s")
    beside("  CPU", cpu, b_cpu if base else None, f_cpu, what, "", "s")
    beside("  peak RSS", rss, b_rss if base else None, f_rss, what, "<= 90 MB", "MB")
    row("  SDK imports inside one run (-X importtime)", f"{in_run:.3f} s", "-")
    print(f"  (share of that run's wall: {in_run / run_wall:.0%} of {run_wall:.2f} s)")
    took, took_cpu, grew = sdk_import()
    row("  of which `import openai` (median of 5, fresh process)", f"{took:.3f} s", "-")
    print(
        f"  (import CPU {took_cpu:.3f} s = {took_cpu / cpu:.0%} of the run's CPU time; RSS +{grew:.1f} MB)"
    )
    text = ("lorem ipsum dolor sit amet " * 80)[:2048]
    for chunk in (16, 4):
        server = FakeOpenAI().start()
        server.default = Reply(content=text, chunk=chunk)
        plain, streamed = per_turn(sys.executable, REPO, server, [False, True]).values()
        events = -(-2048 // chunk)
        row(
            f"streaming overhead per turn, 2 KB in {events} deltas: client CPU",
            f"{(streamed[1] - plain[1]) * 1000:.2f} ms",
            "<= 5 ms",
        )
        line = f"streamed {streamed[0] * 1000:.2f} ms, not streamed {plain[0] * 1000:.2f} ms"
        then: float | None = None
        if base:
            b_plain, b_streamed = per_turn(BASE_PYTHON, BASE, server, [False, True]).values()
            then = (b_streamed[1] - b_plain[1]) * 1000
            line += f"; main before streamed {b_streamed[0] * 1000:.2f} ms, not streamed {b_plain[0] * 1000:.2f} ms"
        print(f"  (wall per turn: {line})")
        bare_plain, bare_streamed = per_turn(sys.executable, REPO, server, [False, True], FLOOR_TURN).values()
        beside(f"streaming overhead, {events} deltas: CPU", (streamed[1] - plain[1]) * 1000,
               then, (bare_streamed[1] - bare_plain[1]) * 1000,
               "httpx: the SSE lines read, json.loads each", "<= 5 ms")
        server.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
