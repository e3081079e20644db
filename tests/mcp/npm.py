"""MCP servers nobody here wrote, from the npm registry: where ``.ci/run`` installed them
(``/opt/runner-npm``, or ``$RUNNER_TEST_NPM``), else installed there now with npm; a test using
them is skipped, with the reason, only when npm cannot reach its registry."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGES = ("@modelcontextprotocol/server-filesystem", "@playwright/mcp")
BINARIES = ("mcp-server-filesystem", "playwright-mcp")
DEFAULT_PREFIX = "/opt/runner-npm"  # outside /tmp: a run's sandbox has a private /tmp
CHROMIUM = "/usr/bin/chromium"


def prefix() -> Path:
    return Path(os.environ.get("RUNNER_TEST_NPM") or DEFAULT_PREFIX)


def binary(name: str) -> Path:
    """The installed binary ``name`` (``BINARIES``), installing the packages first when missing."""
    path = prefix() / "node_modules" / ".bin" / name
    if path.exists():
        return path
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed (apt-get install nodejs npm)")
    try:
        res = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix()), *PACKAGES],
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm install timed out: the npm registry is unreachable")
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        if any(w in res.stderr for w in ("ENOTFOUND", "ECONNREFUSED", "ETIMEDOUT", "EAI_AGAIN", "network")):
            pytest.skip(f"npm registry unreachable: {last}")
        raise AssertionError(f"npm install failed: {res.stderr[-2000:]}")
    assert path.exists(), f"npm installed the packages but not {path}"
    return path
