"""SSH on a host with a real shell profile: ``python tests/bench/bench_ssh.py [RUNS]``.

A private sshd whose login shell sources a ``~/.bashrc`` that takes 150 ms (``sleep 0.15``,
what ``pyenv init`` costs; no ``SetEnv SHLVL=1`` hiding it, see tests/backends/backend_helpers.py)
serves both this tree and main before the persistent remote shell (``/work/base`` with
``/tmp/venv-base``, or ``$RUNNER_BENCH_BASE`` / ``$RUNNER_BENCH_BASE_PYTHON``), each measured
in a subprocess of its own, side by side:

- connect + workdir probe (``resolve``), and connect to the first model request (the probe plus
  the context-file lookups a run makes before it: AGENTS.md, CLAUDE.md, .cursorrules), beside
  the floor: one new ssh connection running ``true`` (handshake + one run of the profile);
- one command (``true``) inside a run: p50 and p99 over RUNS (default 20); ``read_file`` and
  ``write_file`` of a small file;
- ``runner run-job`` end to end (FakeOpenAI scripting 20 ``terminal`` calls): wall time over ssh
  and with the local backend for reference;
- how often the remote ``~/.bashrc`` ran per command.

The headline figures are printed once more in the common form (``_common.beside``): this tree,
main before, the floor (one new ssh connection running ``true`` for the connects; none of the
profile's runs per command).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import beside  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BASE = Path(os.environ.get("RUNNER_BENCH_BASE", "/work/base"))
BASE_PYTHON = Path(os.environ.get("RUNNER_BENCH_BASE_PYTHON", "/tmp/venv-base/bin/python"))
TARGETS = {"connect_first_request": "<= 400 ms", "true_p50": "<= 15 ms"}


def samples_ms(action: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        out.append((time.perf_counter() - started) * 1000)
    return out


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


# -- the measuring child (runs against one tree: its own sys.path) ---------------------------
def measure(spec: dict[str, Any], root: Path, runs: int) -> dict[str, float]:
    try:
        from runner.backends import resolve
        from runner.backends.base import BackendContext
    except ModuleNotFoundError:  # main before the move to runner/backends/
        from backends import resolve
        from backends.base import BackendContext
    from runner.run.context_files import load_context_file

    runs_file = Path(spec.pop("bashrc_runs"))
    counter = 0

    def ctx() -> BackendContext:
        nonlocal counter
        counter += 1
        work = root / f"w{counter}"
        work.mkdir(parents=True)
        return BackendContext(workdir=work, home=root / "home", run_id=f"bench-{counter}", job="bench")

    def connect(with_context: bool) -> float:
        """Milliseconds from nothing to the connected backend (and the context-file lookups)."""
        c = ctx()
        started = time.perf_counter()
        backend = resolve({**spec, "workdir": str(c.workdir)}, ctx=c)
        if with_context:
            load_context_file(backend, lambda *_: None)
        took = (time.perf_counter() - started) * 1000
        backend.close()
        return took

    out: dict[str, float] = {}
    out["connect"] = statistics.median(connect(False) for _ in range(3))
    out["connect_first_request"] = statistics.median(connect(True) for _ in range(3))
    c = ctx()
    with resolve({**spec, "workdir": str(c.workdir)}, ctx=c) as backend:
        backend.run("true", timeout=30)
        profile_before = _lines(runs_file)
        true = samples_ms(lambda: backend.run("true", timeout=30), runs)
        out["bashrc_per_command"] = (_lines(runs_file) - profile_before) / runs
        out["true_p50"], out["true_p99"] = statistics.median(true), p99(true)
        backend.write_file("note.txt", b"x" * 2000)
        out["read_p50"] = statistics.median(samples_ms(lambda: backend.read_file("note.txt"), 5))
        out["write_p50"] = statistics.median(samples_ms(lambda: backend.write_file("note.txt", b"y" * 2000), 5))
    return out


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


# -- the parent: one sshd, a child per tree ------------------------------------------------------
def run_child(python: Path, tree: Path, spec: dict[str, Any], root: Path, runs: int) -> dict[str, float] | str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
    env["PYTHONPATH"] = str(tree)
    args = [str(python), str(Path(__file__).resolve()), "--measure", json.dumps(spec), str(root), str(runs)]
    done = subprocess.run(args, env=env, cwd=tree, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def end_to_end(python: Path, tree: Path, server: Any, root: Path) -> dict[str, float] | str:
    """Wall time of ``runner run-job`` of a job whose model calls ``terminal`` 20 times, over ssh
    and locally (one run each, after a warm-up that writes the tree's bytecode)."""
    from runner.testing import FakeOpenAI, call, final

    fake = FakeOpenAI().start()
    out: dict[str, float] = {}
    try:
        for kind in ("warm-up", "ssh", "local"):  # the warm-up writes the tree's bytecode
            folder = root / f"e2e-{kind}"
            (folder / "work").mkdir(parents=True)
            backend = server.spec(workdir=str(folder / "work")) if kind == "ssh" else {"type": "local"}
            job = {"prompt": "Run the commands", "toolsets": ["terminal"], "backend": backend}
            if kind == "local":
                job["workdir"] = "work"
            (folder / "jobs.yaml").write_text(json.dumps({"jobs": {"j20": job}}))
            if kind != "warm-up":
                fake.add(
                    *[call("terminal", {"command": f"mkdir -p d && cd d && echo {n} > f && cat f"}) for n in range(20)]
                )
            fake.add(final("done"))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env.update(PYTHONPATH=str(tree), RUNNER_HOME=str(folder / "home"))
            env.update(OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-bench")
            started = time.time()
            done = subprocess.run(
                [str(python), "-m", "runner", "run-job", "j20"], env=env, cwd=folder, capture_output=True, text=True
            )
            wall = time.time() - started
            if done.returncode != 0:
                return f"run-job over {kind} failed: {done.stderr.strip()[-300:]}"
            if kind == "warm-up":
                continue
            out[f"e2e_{kind}"] = wall * 1000
    finally:
        fake.stop()
    return out


ROWS = [
    ("connect", "connect + workdir probe (median of 3)", "ms"),
    ("connect_first_request", "connect to first model request (+ context files, med 3)", "ms"),
    ("true_p50", "one command `true` in a run, p50", "ms"),
    ("true_p99", "one command `true` in a run, p99", "ms"),
    ("e2e_ssh", "run-job, 20 terminal calls, wall, ssh", "ms"),
    ("e2e_local", "run-job, 20 terminal calls, wall, local (reference)", "ms"),
    ("read_p50", "read_file 2 KB, median of 5", "ms"),
    ("write_p50", "write_file 2 KB, median of 5", "ms"),
    ("bashrc_per_command", "remote ~/.bashrc runs per command", ""),
]


def plain_ssh_ms(server: Any) -> float:
    """The floor of any connect: one new ssh connection running ``true`` (no master)."""
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"]
    argv += ["-o", f"UserKnownHostsFile={server.known_hosts}", "-i", server.key, "-p", str(server.port)]
    argv += ["-l", server.user, server.host, "true"]
    return statistics.median(samples_ms(lambda: subprocess.run(argv, check=True, capture_output=True), 3))


def merge(*parts: dict[str, float] | str) -> dict[str, float] | str:
    out: dict[str, float] = {}
    for part in parts:
        if isinstance(part, str):
            return part
        out.update(part)
    return out


def show(ours: dict[str, float] | str, before: dict[str, float] | str, floor: float) -> None:
    print(f"{'ssh, login shell sources a 150 ms ~/.bashrc':<56} {'this tree':>12} {'main before':>12}   target")
    print(f"{'floor: one new ssh connection running `true` (median 3)':<56} {floor:>9.1f} ms {floor:>9.1f} ms")
    for key, label, unit in ROWS:
        cells = []
        for figures in (ours, before):
            if isinstance(figures, str):
                cells.append("-")
            else:
                value = figures[key]
                cells.append(f"{value:.1f} {unit}".strip() if unit else f"{value:.2f}")
        print(f"{label:<56} {cells[0]:>12} {cells[1]:>12}   {TARGETS.get(key, '')}".rstrip())
    for name, figures in (("this tree", ours), ("main before", before)):
        if isinstance(figures, str):
            print(f"{name}: {figures}")
    if isinstance(ours, str):
        return
    then = (lambda key: before[key]) if isinstance(before, dict) else (lambda key: "not measured (see above)")
    plain = "one new ssh connection running true"
    for key, label, target, floor_of, what in (
        ("connect", "ssh connect + workdir probe", "", floor, plain),
        ("connect_first_request", "ssh connect to first model request", "<= 400 ms", floor, plain),
        ("true_p50", "ssh `true` in a run, p50", "<= 15 ms", "see bench_backends.py (a bare ssh over a master)", ""),
        ("bashrc_per_command", "ssh ~/.bashrc runs per command", "", 0.0, "the profile runs once per connection"),
    ):
        beside(label, ours[key], then(key), floor_of, what, target, "ms" if key != "bashrc_per_command" else "")


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    sys.path[:0] = [str(REPO), str(REPO / "tests" / "backends")]
    from backend_helpers import SLOW_BASHRC, SSHServer, Unavailable, start_sshd

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "sshd"
        folder.mkdir()
        try:
            proc, port = start_sshd(folder, bashrc=SLOW_BASHRC)
        except Unavailable as exc:
            print(f"skipped: {exc}")
            return
        try:
            user = __import__("pwd").getpwuid(os.getuid()).pw_name
            server = SSHServer("127.0.0.1", port, user, str(folder / "id_ed25519"), str(folder / "known_hosts"))
            spec = {**server.spec(), "bashrc_runs": str(folder / "home" / "bashrc-runs")}
            floor = plain_ssh_ms(server)
            ours = merge(
                run_child(Path(sys.executable), REPO, spec, Path(tmp) / "ours", runs),
                end_to_end(Path(sys.executable), REPO, server, Path(tmp) / "ours"),
            )
            if BASE_PYTHON.exists() and BASE.is_dir():
                before = merge(
                    run_child(BASE_PYTHON, BASE, spec, Path(tmp) / "base", runs),
                    end_to_end(BASE_PYTHON, BASE, server, Path(tmp) / "base"),
                )
            else:
                before = f"not measured ({BASE_PYTHON} or {BASE} missing)"
        finally:
            proc.terminate()
            proc.wait()
    show(ours, before, floor)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        sys.path.insert(0, os.environ["PYTHONPATH"])
        print(json.dumps(measure(json.loads(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))))
    else:
        main()
