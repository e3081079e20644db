"""Backend latency benchmark: ``python tests/bench/bench_backends.py [RUNS]``.

Prints the median of RUNS (default 50) runs of ``true`` per backend, and how long a Docker
container takes from start to its first command. Docker start (issue 20) is printed for this tree
beside main before (tests/bench/_before.py), with the floor ``docker run --rm IMAGE true`` measured
on the same daemon: ``runner backend run docker:IMAGE -- true`` end to end, and inside one process
the first container (the SDK import and the client included) and the next ones (what a process
that runs several jobs pays per run), and the removal at close. Docker uses ``$RUNNER_TEST_DOCKER_IMAGE``
(default runner-test:busybox, see .ci/services.sh); SSH uses a private sshd started here,
as the tests do. An unavailable backend is skipped with the reason.

Each backend's `true` is also printed beside main before (the same ``true_ms`` under its tree,
``_before.in_tree``) and beside its floor, the same command with runner out of the way: local,
``subprocess.run(["true"])``; docker exec, the docker SDK's ``exec_run("true")`` on a running
container; ssh, a bare ``ssh`` over the same master connection.
"""

from __future__ import annotations

import getpass
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "backends"), str(ROOT / "tests" / "bench")]

from _before import Tree, in_tree, or_reason, side_by_side, time_argv, trees  # noqa: E402
from _common import beside  # noqa: E402
from backend_helpers import SSHServer, Unavailable, make_ctx, start_sshd  # noqa: E402

from runner.backends import resolve  # noqa: E402
from runner.backends.base import Backend, BackendContext  # noqa: E402

TARGETS_MS = {"local": 15, "docker exec": 100, "docker start": 2000, "ssh (master)": 40}


def median_ms(action: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def report(name: str, ms: float | None, note: str = "") -> None:
    target = TARGETS_MS.get(name)
    verdict = "" if ms is None or target is None else ("ok" if ms <= target else "OVER TARGET")
    shown = "skipped" if ms is None else f"{ms:8.1f} ms"
    limit = f"(target <= {target} ms)" if target else ""
    print(f"{name:<22} {shown:>12}  {limit:<20} {verdict} {note}".rstrip())


def true_latency(backend: Backend, runs: int) -> float:
    backend.run("true", timeout=30)  # warm up
    return median_ms(lambda: backend.run("true", timeout=30), runs)


def true_ms(spec: str | dict, root: str, runs: int, extra: dict) -> float:
    """Median ms of `true` on the backend ``spec`` (run by either tree through ``in_tree``)."""
    with resolve(spec, ctx=make_ctx(Path(root), **extra)) as backend:
        return true_latency(backend, runs)


def before_true(spec: str | dict, root: Path, runs: int, extra: dict | None = None) -> float | str | None:
    """Main before's `true` on the same backend, or why it was not measured (None: no main before)."""
    others = trees()[1:]
    if not others:
        return None
    return or_reason(others[0], lambda: in_tree(others[0], "bench_backends", "true_ms", spec, str(root), runs, extra or {}))


def bench_local(root: Path, runs: int) -> None:
    with resolve("local", ctx=make_ctx(root / "local")) as backend:
        here = true_latency(backend, runs)
    report("local", here)
    beside("local: `true`", here, before_true("local", root / "local-before", runs),
           median_ms(lambda: subprocess.run(["true"], check=True), runs), "subprocess.run(['true'])",
           f"<= {TARGETS_MS['local']} ms")


def bench_docker(root: Path, runs: int) -> None:
    image = os.environ.get("RUNNER_TEST_DOCKER_IMAGE", "runner-test:busybox")
    ctx = make_ctx(root / "docker", run_id="bench", job="bench")
    try:
        starts = []
        for _ in range(3):
            started = time.perf_counter()
            backend = resolve({"type": "docker", "image": image, "pull": "never"}, ctx=ctx)
            backend.run("true", timeout=30)
            starts.append(time.perf_counter() - started)
            backend.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "not available here"
        report("docker exec", None, f"({exc})")
        return
    spec = {"type": "docker", "image": image, "pull": "never"}
    with resolve(spec, ctx=ctx) as backend:
        here = true_latency(backend, runs)
    report("docker exec", here)
    report("docker start", statistics.median(starts) * 1000, "(start to first command, median of 3)")
    import docker

    container = docker.from_env().containers.run(image, "sleep 600", detach=True, remove=True)
    try:
        container.exec_run("true")
        floor = median_ms(lambda: container.exec_run("true"), runs)
    finally:
        container.kill()
    beside("docker exec: `true`", here, before_true(spec, root / "docker-before", runs, {"run_id": "bench-b", "job": "bench"}),
           floor, "docker SDK exec_run('true') on a running container", f"<= {TARGETS_MS['docker exec']} ms")


# runs in each tree's own interpreter: N containers in one process, each timed from resolve() to the
# end of its first command, then its close(); prints "first next-median close-median" in ms
IN_PROCESS = """
import statistics, sys, tempfile, time
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests/backends"]
import requests
from backend_helpers import make_ctx
try:
    from runner.backends import resolve
except ModuleNotFoundError:  # main before the move to runner/backends/
    from backends import resolve
calls = []  # Docker API requests, counted (not changed) to show the round trips per container
send = requests.Session.send
requests.Session.send = lambda self, request, **kw: (calls.append(request.method), send(self, request, **kw))[1]
image, n = sys.argv[2], int(sys.argv[3])
starts, closes, per_container = [], [], []
with tempfile.TemporaryDirectory() as tmp:
    for i in range(n):
        ctx = make_ctx(Path(tmp) / str(i), run_id=f"bench-{i}", job="bench")
        before = len(calls)
        t = time.perf_counter()
        backend = resolve({"type": "docker", "image": image, "pull": "never"}, ctx=ctx)
        backend.run("true", timeout=30)
        starts.append(time.perf_counter() - t)
        t = time.perf_counter()
        backend.close()
        closes.append(time.perf_counter() - t)
        per_container.append(len(calls) - before)
print(starts[0] * 1000, statistics.median(starts[1:]) * 1000, statistics.median(closes) * 1000,
      per_container[0], statistics.median(per_container[1:]))
"""


def bench_docker_start(root: Path) -> None:
    """Docker start, this tree beside main before and the floor, all three alternating (the
    daemon's speed varies with the machine's load, so they are measured in the same rounds)."""
    image = os.environ.get("RUNNER_TEST_DOCKER_IMAGE", "runner-test:busybox")
    both = trees()
    floor = "floor: docker run --rm IMAGE true"
    argv = {t.name: [t.python, "-m", "runner", "backend", "run", f"docker:{image}", "--", "true"] for t in both}
    envs = {t.name: t.env(RUNNER_HOME=str(root / "home")) for t in both}
    argv[floor], envs[floor] = ["docker", "run", "--rm", image, "true"], dict(os.environ)
    timed = time_argv(argv, envs, root, 7)
    side_by_side("runner backend run docker:IMAGE -- true (median 7)", timed)
    before = timed.get("main before")
    beside("backend run docker:IMAGE -- true", timed["this tree"].wall, before and before.wall, timed[floor].wall,
           "docker run --rm IMAGE true", "", "s")
    for tree in both:
        print(f"  in one process, {tree.name}: " + _in_process(tree, image))


def _in_process(tree: Tree, image: str, n: int = 8) -> str:
    proc = subprocess.run(
        [tree.python, "-c", IN_PROCESS, str(tree.repo), image, str(n)], env=tree.env(), capture_output=True, text=True
    )
    if proc.returncode != 0:
        return f"failed: {proc.stderr.strip()[-300:]}"
    first, rest, close, first_calls, calls = (float(x) for x in proc.stdout.split())
    return (
        f"first container {first:.0f} ms (SDK import included), next {rest:.0f} ms (median of {n - 1}), "
        f"close {close:.0f} ms; API requests per run: first {first_calls:.0f}, next {calls:.0f}"
    )


def bench_ssh(root: Path, runs: int) -> None:
    folder = root / "sshd"
    folder.mkdir()
    try:
        proc, port = start_sshd(folder)
    except Unavailable as exc:
        report("ssh (master)", None, f"({exc})")
        return
    try:
        key, known_hosts = str(folder / "id_ed25519"), str(folder / "known_hosts")
        server = SSHServer("127.0.0.1", port, getpass.getuser(), key, known_hosts)
        ctx: BackendContext = make_ctx(root / "ssh")
        with resolve(server.spec(workdir=str(ctx.workdir)), ctx=ctx) as backend:
            here = true_latency(backend, runs)
            report("ssh (master)", here)
            # the first value of an ssh option wins, so these switch multiplexing off
            rest = backend._argv[1:]  # type: ignore[attr-defined]
            argv = ["ssh", "-o", "ControlMaster=no", "-o", "ControlPath=none", *rest, "127.0.0.1", "true"]
            one = lambda: subprocess.run(argv, check=True, capture_output=True)  # noqa: E731
            report("ssh (no master)", median_ms(one, runs), "(a new connection per command, for comparison)")
            bare = ["ssh", *rest, "127.0.0.1", "true"]
            floor = median_ms(lambda: subprocess.run(bare, check=True, capture_output=True), runs)
        (root / "ssh-before").mkdir()
        then = before_true(server.spec(workdir=str(root / "ssh-before" / "work")), root / "ssh-before", runs)
        beside("ssh (master): `true`", here, then, floor, "a bare ssh over the same master",
               f"<= {TARGETS_MS['ssh (master)']} ms")
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    print(f"median of {runs} runs of `true`")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bench_local(root, runs)
        bench_docker(root, runs)
        bench_ssh(root, runs)
        print("\ndocker start, this tree beside main before (wall; cpu of the runner process)")
        bench_docker_start(root)


if __name__ == "__main__":
    main()
