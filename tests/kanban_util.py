"""Helpers for the kanban tests: a board on the project's store, waiting, a dispatcher process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from runner.store.board import Board

FAST = {"max_workers": 2, "lease_seconds": 2, "poll_seconds": 0.1, "retry_backoff": 0}


def write_config(project: Any, **kanban: Any) -> None:
    """config.yaml with a fast kanban section (short lease, quick polls, no backoff) plus overrides."""
    values = {**FAST, **kanban}
    body = ", ".join(f"{k}: {v}" for k, v in values.items())
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(f"kanban: {{{body}}}\n")


@contextmanager
def board_of(project: Any) -> Iterator[Board]:
    store = project.open_store()
    board = Board(store)
    try:
        yield board
    finally:
        board.close()
        store.close()


def wait_for(check: Callable[[], Any], timeout: float = 20.0, every: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def status_of(project: Any, task_id: int) -> str:
    with board_of(project) as board:
        return board.get(task_id).status


@contextmanager
def dispatcher(project: Any, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``runner kanban dispatch`` as a real subprocess, stopped with SIGTERM at the end."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "kanban", "dispatch", *args],
        env=project.env(),
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def kinds(board: Board, task_id: int) -> list[str]:
    return [e["kind"] for e in board.events(task_id)]
