"""``keep_alive: true``: under ``runner serve``, one stdio server per (job, server) lives across runs.

serve (``Bridges``, in serve's process) starts a bridge (``python -m runner.mcp.bridge``) lazily,
just before it starts the first run of a job on the local backend whose ``toolsets:`` name a
``keep_alive`` stdio server. The bridge runs the server once and serves it to runs as a
streamable-HTTP MCP endpoint on 127.0.0.1 behind a random bearer token. Where to reach it is a
file ``RUNNER_HOME/mcp-bridges/JOB--SERVER.json`` (mode 0600, never the environment block): serve
writes ``{"pid": ...}`` when it starts the bridge, the bridge adds ``url`` and ``token`` once its
server answers. A run (``find_bridge``) connects there instead of spawning the server; a file
whose bridge is gone or never got ready means the run starts its own server.

A job whose commands run in the sandbox has its kept servers run in one too (``stdio_args``:
bubblewrap with the job's plan around the server), as a run's own server would.

The server's variables (``env:``) are resolved in serve (which holds the secrets) and handed to
the bridge through its stdin, which stays open: the bridge stops when serve closes it (shutdown,
a changed ``mcp_servers:`` entry, or serve dying). Stdlib only: serve imports this.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from runner.backends.sandbox import stdio_args
from runner.config.machine import load_config
from runner.config.mcp import McpServer, is_ref, parse_ref
from runner.errors import ConfigError
from runner.host.procs import running
from runner.store.atomic import write_private

if TYPE_CHECKING:
    from runner.backends.sandbox import Plan

DIR = "mcp-bridges"


@dataclass(frozen=True)
class BridgeAddress:
    url: str
    token: str


def bridge_file(home: Path, job: str, server: str) -> Path:
    return home / DIR / f"{job}--{server}.json"


def kept_servers(toolsets: Sequence[str], servers: dict[str, McpServer], local: bool) -> list[str]:
    """The ``keep_alive`` stdio servers a job names (none for a job not on the local backend)."""
    if not local:
        return []
    names = dict.fromkeys(parse_ref(t)[0] for t in toolsets if is_ref(t))
    return [n for n in names if n in servers and servers[n].keep_alive and servers[n].kind == "stdio"]


def find_bridge(home: Path, job: str, server: str, wait: float) -> tuple[BridgeAddress | None, str]:
    """(where the bridge answers, "") or (None, why not: "" when serve keeps no bridge for it).
    A bridge still starting is waited for, at most ``wait`` seconds."""
    path = bridge_file(home, job, server)
    deadline = time.monotonic() + wait
    while True:
        try:
            info = json.loads(path.read_text())
        except FileNotFoundError:
            return None, ""
        except (OSError, ValueError) as exc:
            return None, f"the bridge file {path} cannot be read: {exc}"
        if info.get("url") and info.get("token"):
            return BridgeAddress(str(info["url"]), str(info["token"])), ""
        if not running(int(info.get("pid", 0)), None):
            return None, "the keep-alive bridge is gone"
        if time.monotonic() >= deadline:
            return None, f"the keep-alive bridge did not get ready within {wait:g}s"
        time.sleep(0.05)


@dataclass
class _Bridge:
    proc: subprocess.Popen[str]
    fingerprint: str
    path: Path
    log: IO[str]


class Bridges:
    """serve's bridges, keyed by (job, server): ``prepare(job)`` before a run starts (starts one,
    or a new one when the entry or the job's workdir changed), ``refresh`` on each tick (stops
    bridges whose config.yaml entry changed or went away), ``close`` at shutdown."""

    def __init__(self, home: Path, config_path: Path, getenv: Callable[[str], str | None], log: logging.Logger):
        self.home, self._config_path, self._getenv, self._log = home, config_path, getenv, log
        self._live: dict[tuple[str, str], _Bridge] = {}
        self._config: tuple[tuple[int, ...] | None, dict[str, McpServer]] | None = None
        for stale in (home / DIR).glob("*.json"):  # a serve that died left them; its bridges are gone
            stale.unlink(missing_ok=True)

    def _load(self) -> dict[str, McpServer]:
        """config.yaml's ``mcp_servers:``, read again when the file changed (kept while it is invalid)."""

        try:
            st = self._config_path.stat()
            key: tuple[int, ...] | None = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            key = None
        if self._config is not None and self._config[0] == key:
            return self._config[1]
        try:
            servers = dict(load_config(self._config_path).mcp_servers)
        except ConfigError as exc:
            self._log.warning("keep-alive MCP bridges: config.yaml is invalid, keeping the last one: %s", exc)
            return self._config[1] if self._config is not None else {}
        self._config = (key, servers)
        return servers

    def prepare(
        self, job: str, toolsets: Sequence[str], local: bool, workdir: Path, plan: Plan | None = None
    ) -> None:
        """Start the job's kept servers that are not running; ``plan``: the job's sandbox, which
        each server then runs in (a bubblewrap sandbox of its own, as a run's own server would)."""
        if not local and not self._live:
            return
        servers = self._load()
        for name in kept_servers(toolsets, servers, local):
            try:
                self._ensure(job, name, servers[name], workdir, plan)
            except OSError as exc:
                self._log.warning("cannot start the keep-alive bridge for %s/%s: %s", job, name, exc)

    def _ensure(self, job: str, name: str, server: McpServer, workdir: Path, plan: Plan | None) -> None:
        argv = [str(server.command), *server.args]
        cwd = server.cwd or str(workdir)
        if plan is not None:
            argv = stdio_args(plan, argv, cwd)
        fingerprint = json.dumps([server.model_dump(mode="json"), str(workdir), argv], sort_keys=True)
        bridge = self._live.get((job, name))
        if bridge is not None and bridge.proc.poll() is None and bridge.fingerprint == fingerprint:
            return
        if bridge is not None:
            self._stop((job, name), "its config changed" if bridge.fingerprint != fingerprint else "it exited")
        env, missing = server.env_values(self._getenv)
        if missing:
            return  # the run reports the unset variables when it starts the server itself
        self._live[(job, name)] = self._start(job, name, server, argv, cwd, env, fingerprint)

    def _start(
        self, job: str, name: str, server: McpServer, argv: list[str], cwd: str, env: dict[str, str], fingerprint: str
    ) -> _Bridge:
        path = bridge_file(self.home, job, name)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        path.unlink(missing_ok=True)
        log = (path.parent / f"{job}--{name}.log").open("a")
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner.mcp.bridge", str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
            start_new_session=True,  # a run's signals to its group never reach it
            env={k: v for k, v in os.environ.items() if k != "RUNNER_SECRETS_FD"},
        )
        write_private(path, json.dumps({"pid": proc.pid}))
        spec: dict[str, Any] = {
            "name": name,
            "command": argv[0],
            "args": argv[1:],
            "env": env,
            "cwd": cwd,
            "start_timeout": server.start_timeout,
        }
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(spec) + "\n")
        proc.stdin.flush()
        self._log.info("started the keep-alive MCP bridge for %s/%s (pid %d)", job, name, proc.pid)
        return _Bridge(proc, fingerprint, path, log)

    def refresh(self) -> None:
        """Stop the bridges whose config.yaml entry changed, forget the ones that exited."""
        if not self._live:
            return
        servers = self._load()
        for (job, name), bridge in list(self._live.items()):
            server = servers.get(name)
            if server is None or not server.keep_alive or server.kind != "stdio":
                self._stop((job, name), "it is no longer kept alive")
            elif json.loads(bridge.fingerprint)[0] != server.model_dump(mode="json"):
                self._stop((job, name), "its config changed")
            elif bridge.proc.poll() is not None:
                self._stop((job, name), f"it exited with {bridge.proc.returncode}")

    def _stop(self, key: tuple[str, str], why: str, *, wait: bool = False) -> None:
        """Tell the bridge to stop. serve's loop does not wait for it (a reaper thread does, up to
        10 s, then kills it); at shutdown (``wait``) serve waits, so no server outlives it."""
        bridge = self._live.pop(key)
        bridge.path.unlink(missing_ok=True)
        if bridge.proc.poll() is None:
            self._log.info("stopping the keep-alive MCP bridge for %s/%s: %s", key[0], key[1], why)
        try:
            assert bridge.proc.stdin is not None
            bridge.proc.stdin.close()  # the bridge stops its server and exits
        except OSError:
            pass  # it is gone already: nothing to tell it
        if wait:
            _reap(bridge)
        else:
            threading.Thread(target=_reap, args=(bridge,), name="mcp-bridge-reaper", daemon=True).start()

    def close(self) -> None:
        for key in list(self._live):
            self._stop(key, "serve is stopping", wait=True)


def _reap(bridge: _Bridge) -> None:
    """Wait for a stopping bridge (it stops its server first), killing it after 10 s."""
    try:
        bridge.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        bridge.proc.kill()
        bridge.proc.wait()
    bridge.log.close()
