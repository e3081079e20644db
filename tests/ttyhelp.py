"""`runner` on a real pseudo-terminal: its controlling terminal and its stdin, stdout and stderr."""

from __future__ import annotations

import os
import pty
import select
import sys
import time
from typing import Any


def run_on_a_tty(project: Any, *args: str, reply: tuple[bytes, bytes] | None = None) -> tuple[int, str]:
    """Run ``runner ARGS`` in ``project`` on a pty; with ``reply=(prompt, answer)`` type ANSWER once
    PROMPT shows. Returns the exit code and everything the terminal showed."""
    pid, fd = pty.fork()
    if pid == 0:  # child
        os.chdir(project.root)
        os.execve(sys.executable, [sys.executable, "-m", "runner", *args], project.env())
    out, deadline, answered = b"", time.time() + 60, reply is None
    while time.time() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        if not answered and reply is not None and reply[0] in out:
            os.write(fd, reply[1])
            answered = True
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
