"""Secrets the runner holds in memory, never in its environment block.

``/proc/<pid>/environ`` shows the memory of the environment block a process was *started* with;
``os.environ`` changes and ``unsetenv`` do not touch it, and any command the agent runs as the
same user can read it (``cat /proc/$PPID/environ``). So a command that runs tools (``run-job``,
``serve``, ``kanban work``, ``kanban dispatch``) starts by moving the secret variables out: it
holds their values in ``_held``, removes them from ``os.environ`` and overwrites their values in
the block itself with NUL bytes (the block's bounds come from ``/proc/self/stat``), then reads
``/proc/self/environ`` back to check. Where that check fails (no ``/proc``, a kernel without the
bounds), it re-executes the same program with an environment without them, handing the values
over through an inherited memfd (a pipe where there is none) whose number is in
``RUNNER_SECRETS_FD``; the new process image reads them into ``_held`` and closes the fd.

Everything that reads a key goes through ``getenv`` / ``environ()`` (the process environment
plus the held secrets). Stdlib only: this runs before click is imported.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ENV_FD = "RUNNER_SECRETS_FD"
TOOL_COMMANDS = frozenset({("run-job",), ("serve",), ("kanban", "work"), ("kanban", "dispatch")})
_GLOBAL_WITH_VALUE = frozenset({"--jobs", "--config", "--home"})
_NAME = re.compile(
    r"(API_?KEYS?|APIKEY|TOKENS?|SECRETS?|PASSWORD|PASSWD|PRIVATE_KEY|CREDENTIALS?|ACCESS_KEY|AUTH|WEBHOOK(?:_URL)?)$"
    r"|^OPENAI_API_KEY",
    re.I,
)
_REF = re.compile(r"\benv(?:list)?:([A-Za-z_][A-Za-z0-9_]*)")

_held: dict[str, str] = {}


def getenv(name: str, default: str | None = None) -> str | None:
    """A variable's value: a held secret first, then the process environment."""
    value = _held.get(name)
    return value if value is not None else os.environ.get(name, default)


def environ() -> dict[str, str]:
    """The process environment with the held secrets added back (for reads, never for children)."""
    return {**os.environ, **_held}


def held() -> dict[str, str]:
    return dict(_held)


def install(values: Mapping[str, str]) -> None:
    """Hold ``values`` (a forked worker gets serve's secrets this way)."""
    _held.update(values)


def reset() -> None:
    _held.clear()


def is_secret_name(name: str, refs: frozenset[str] = frozenset()) -> bool:
    return name in refs or bool(_NAME.search(name))


def secret_vars(
    env: Mapping[str, str], refs: frozenset[str] = frozenset(), is_token: Callable[[str], bool] | None = None
) -> dict[str, str]:
    """The variables of ``env`` to keep out of an environment block: secret names, the names
    config.yaml refers to (``env:NAME``), and values ``is_token`` recognises (a key format)."""
    out: dict[str, str] = {}
    for name, value in env.items():
        if name == ENV_FD or not value:
            continue
        if is_secret_name(name, refs) or (is_token is not None and is_token(value)):
            out[name] = value
    return out


def command_path(args: Sequence[str]) -> tuple[str, ...]:
    """The command words of a ``runner`` argument list (``("kanban", "work")``); () for help."""
    words: list[str] = []
    i = 0
    while i < len(args) and len(words) < 2:
        arg = args[i]
        if arg in ("-h", "--help", "--version"):
            return ()
        i += 2 if arg in _GLOBAL_WITH_VALUE else 1
        if not arg.startswith("-"):
            words.append(arg)
    return () if "--help" in args or "-h" in args else tuple(words)


def runs_tools(args: Sequence[str]) -> bool:
    path = command_path(args)
    return path[:1] in TOOL_COMMANDS or path[:2] in TOOL_COMMANDS


def config_refs(args: Sequence[str], env: Mapping[str, str]) -> frozenset[str]:
    """Names config.yaml refers to with ``env:NAME`` / ``envlist:NAME`` (a text scan, no YAML)."""
    from runner.locations import config_location  # the rule Settings follows (stdlib only)

    home = _option(args, "--home") or env.get("RUNNER_HOME") or str(Path.home() / ".runner")
    jobs = _option(args, "--jobs") or env.get("RUNNER_JOBS") or "jobs.yaml"
    path, _ = config_location(_option(args, "--config"), Path(jobs), Path(home), env)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    return frozenset(_REF.findall(text))


def _option(args: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1 :]
    return None


def handoff(values: Mapping[str, str]) -> int:
    """An inheritable fd holding ``values`` (JSON), for a child that calls ``receive``."""
    payload = json.dumps(dict(values)).encode("utf-8")
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("runner-secrets")
        os.write(fd, payload)
        os.lseek(fd, 0, os.SEEK_SET)
    else:  # pragma: no cover - platforms without memfd
        fd, w = os.pipe()
        os.write(w, payload)
        os.close(w)
    os.set_inheritable(fd, True)
    return fd


def receive() -> None:
    """Take over the secrets handed to this process in ``RUNNER_SECRETS_FD``, if any."""
    raw = os.environ.pop(ENV_FD, None)
    if raw is None:
        return
    try:
        fd = int(raw)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        os.close(fd)
        values = json.loads(b"".join(chunks))
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"error: {ENV_FD}={raw}: cannot read the secrets handed over ({exc})\n")
        raise SystemExit(2) from None
    install({str(k): str(v) for k, v in values.items()})


def child_env(extra: Mapping[str, str] | None = None) -> tuple[dict[str, str], int | None]:
    """Environment and fd for a ``runner`` child that needs the held secrets (kanban workers):
    the process environment without secrets, plus the handoff fd (close it after the start)."""
    env = {**os.environ, **(extra or {})}
    if not _held:
        return env, None
    fd = handoff(_held)
    env[ENV_FD] = str(fd)
    return env, fd


def hide(args: Sequence[str], is_token: Callable[[str], bool] | None = None) -> None:
    """At the start of a command that runs tools: hold the secret variables in memory and blank
    them in the environment block (re-executing without them where blanking cannot be checked).
    Other commands only take over handed secrets."""
    if ENV_FD in os.environ:
        receive()
        return
    if not runs_tools(args):
        return
    found = secret_vars(os.environ, config_refs(args, os.environ), is_token)
    if not found:
        return
    if blank_in_block(found):
        install(found)
        for name in found:
            del os.environ[name]
        return
    reexec_without(found)


def blank_in_block(found: Mapping[str, str]) -> bool:
    """Overwrite the values of ``found`` in this process's environment block with NUL bytes (the
    memory ``/proc/self/environ`` shows); True when the block, read back, holds none of them.
    Single-threaded start-up only: nothing else reads the block meanwhile."""
    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end: stat fields 50 and 51
        block = Path("/proc/self/environ").read_bytes()
    except (OSError, IndexError, ValueError):
        return False
    if not start or end - start != len(block):  # not the block /proc/self/environ shows
        return False
    import ctypes

    offset = 0
    for entry in block.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and value and os.fsdecode(name) in found:
            ctypes.memset(start + offset + len(name) + 1, 0, len(value))
        offset += len(entry) + 1
    try:
        after = Path("/proc/self/environ").read_bytes()
    except OSError:
        return False
    return not any(os.fsencode(value) in after for value in found.values())


def reexec_without(found: Mapping[str, str]) -> None:
    """Re-execute this program with an environment without ``found``, handing the values to the
    new image through an inherited fd (``receive`` takes them)."""
    env = {k: v for k, v in os.environ.items() if k not in found}
    env[ENV_FD] = str(handoff(found))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, list(sys.orig_argv), env)
