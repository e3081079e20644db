"""`runner serve --web HOST:PORT`: the same app on a thread of the daemon; it stops with serve."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("starlette", reason="runner web needs the web extra: pip install -e '.[web]'")

from tests.servehelp import wait_for  # noqa: E402
from tests.web.webhelp import Site, free_port, wait_listening  # noqa: E402


def test_serve_with_web(site: Site) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "serve", "--web", f"127.0.0.1:{port}"],
        env=site.env(),
        cwd=site.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_listening(proc, port)
        url = f"http://127.0.0.1:{port}"
        # the port is bound before serve starts: a request is answered once its start-up is done
        # (about a second on an idle machine, more on a loaded one), hence the long first timeout
        wait_for(
            lambda: "runner_serve_up 1.0" in httpx.get(f"{url}/metrics", timeout=30).text,
            timeout=30,
            interval=0.2,
            what="runner_serve_up 1.0 in /metrics",
        )
        overview = httpx.get(url).text
        assert "running</span> pid" in overview and str(proc.pid) in overview
        assert f"Leader: {socket.gethostname()} (pid {proc.pid})" in overview  # the scheduler lease's holder
        assert httpx.get(f"{url}/jobs").status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        started = time.time()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert time.time() - started < 15
