"""serve under systemd, with the real parts: sd_notify datagrams to a real unix socket (READY=1,
WATCHDOG=1, STOPPING=1), journald's log form when stderr is the journal stream, JSON log lines;
the shipped unit file and Dockerfile checked against the repository."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.serve.notify import sd_notify, watchdog_interval
from tests.conftest import REPO
from tests.servehelp import wait_for, write_config


def _serve(project, stderr: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    project.write_jobs("jobs:\n  tick:\n    schedule: every 1h\n    agent: false\n    pre_run: 'true'\n")
    write_config(project)
    fh = open(stderr, "wb")  # noqa: SIM115 - the child holds it; closed when the test's tmp goes
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "serve", *args], env=project.env(**env), cwd=project.root, stderr=fh
    )


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sd_notify_ready_watchdog_stopping_over_a_real_socket(project, tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(20)
    proc = _serve(project, tmp_path / "err", NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
    try:
        got: list[str] = []
        while not any("READY=1" in m for m in got):
            got.append(sock.recv(4096).decode())
        ready = next(m for m in got if "READY=1" in m)
        assert f"MAINPID={proc.pid}" in ready.splitlines()
        pings = 0
        deadline = time.monotonic() + 5
        while pings < 3 and time.monotonic() < deadline:
            pings += sock.recv(4096).decode() == "WATCHDOG=1"
        assert pings == 3  # every 0.2 s: half of WATCHDOG_USEC
        proc.send_signal(signal.SIGTERM)
        while True:
            message = sock.recv(4096).decode()
            if message.startswith("STOPPING=1"):
                break
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()


def test_sd_notify_abstract_socket_and_no_socket(tmp_path):
    name = f"runner-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        assert sd_notify("READY=1", {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(100) == b"READY=1"
    finally:
        sock.close()
    assert not sd_notify("READY=1", {})
    assert not sd_notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert watchdog_interval({"WATCHDOG_USEC": "1000000"}).total_seconds() == 0.5  # type: ignore[union-attr]
    assert watchdog_interval({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}) is None


STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ")


def test_under_journald_no_timestamps_and_syslog_priorities(project, tmp_path):
    err = tmp_path / "journal"
    err.touch()
    st = err.stat()
    proc = _serve(project, err, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
    wait_for(lambda: "serve started" in err.read_text(), 30, what="serve to start")
    assert _stop(proc) == 0
    lines = err.read_text().splitlines()
    assert lines and all(line.startswith("<") for line in lines), lines
    assert any(line.startswith("<6>INFO serve started") for line in lines)
    assert not any(STAMP.match(line[3:]) for line in lines)
    # the file log keeps its timestamps
    assert all(STAMP.match(line) for line in (project.home / "logs" / "serve.log").read_text().splitlines() if line)


def test_journal_stream_of_another_stream_is_ignored(project, tmp_path):
    """A child whose stderr was redirected inherits JOURNAL_STREAM but does not write to journald."""
    err = tmp_path / "err"
    proc = _serve(project, err, JOURNAL_STREAM="1:1")
    wait_for(lambda: "serve started" in err.read_text(), 30, what="serve to start")
    assert _stop(proc) == 0
    assert all(STAMP.match(line) for line in err.read_text().splitlines())


@pytest.mark.parametrize("how", ["option", "env"])
def test_json_logs_one_object_per_line(project, tmp_path, how):
    err = tmp_path / "err"
    proc = (
        _serve(project, err, "--log-format", "json")
        if how == "option"
        else _serve(project, err, RUNNER_LOG_FORMAT="json")
    )
    wait_for(lambda: "serve started" in err.read_text(), 30, what="serve to start")
    assert _stop(proc) == 0
    for text in (err.read_text(), (project.home / "logs" / "serve.log").read_text()):
        docs = [json.loads(line) for line in text.splitlines()]
        assert docs and all({"ts", "level", "logger", "msg"} <= set(d) for d in docs)
        assert any(d["msg"].startswith("serve started") and d["level"] == "info" for d in docs)


def test_bad_log_format_is_one_line(project, tmp_path):
    project.write_jobs("jobs: {}\n")
    res = project.run("serve", env=project.env(RUNNER_LOG_FORMAT="xml"))
    assert res.returncode == 2 and res.stderr.strip() == "error: RUNNER_LOG_FORMAT='xml': expected one of text, json"


# -- the shipped unit file and Dockerfile ------------------------------------------------------
UNIT = REPO / "contrib" / "systemd" / "runner.service"
DOCKERFILE = REPO / "Dockerfile"


def test_unit_file_is_a_notify_service_with_hardening():
    parser = configparser.ConfigParser(strict=True, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    assert set(parser.sections()) == {"Unit", "Service", "Install"}
    service = parser["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    argv = shlex.split(service["ExecStart"])
    assert argv[0].startswith("/") and argv[0].endswith("/runner") and argv[-1] == "serve"
    jobs = Path(argv[argv.index("--jobs") + 1])
    assert jobs.parent == Path(service["WorkingDirectory"])
    from runner.cli import cli

    ctx = cli.make_context("runner", argv[1:-1])  # the global options click really has
    assert ctx.params["jobs_path"] == str(jobs)
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert int(service["WatchdogSec"].rstrip("s")) >= 10
    assert service["KillMode"] == "mixed" and int(service["TimeoutStopSec"]) > 30  # > serve.shutdown_grace
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "StateDirectory": "runner",
    }.items():
        assert service[key] == value, key
    # the agents' sandbox needs these namespaces (bubblewrap), and netlink for network: false
    assert {"user", "pid", "mnt", "ipc", "net"} <= set(service["RestrictNamespaces"].split())
    assert "AF_NETLINK" in service["RestrictAddressFamilies"].split()
    assert service["Environment"].split("=", 1) == ["RUNNER_HOME", "/var/lib/runner"]
    assert "/var/lib/runner" in service["ReadWritePaths"].split()
    assert parser["Install"]["WantedBy"] == "multi-user.target"


def test_dockerfile_references_real_paths():
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines() if line.strip() and not line.startswith("#")]
    copies = [shlex.split(line)[1:-1] for line in lines if line.startswith("COPY ") and "--from" not in line]
    sources = [src for srcs in copies for src in srcs]
    assert sources, "the Dockerfile copies nothing"
    for src in sources:
        assert (REPO / src).exists(), f"Dockerfile: COPY {src}: no such path in the repository"
    entry = next(line for line in lines if line.startswith(("ENTRYPOINT", "CMD")))
    assert "runner" in entry and "serve" in DOCKERFILE.read_text()
    assert any(line.startswith("USER ") and "root" not in line for line in lines)
    assert any("pip install" in line for line in lines)
    assert "RUNNER_HOME" in DOCKERFILE.read_text() and "STOPSIGNAL SIGTERM" in lines
