"""The hot-reload watcher in process (runner.serve.watch): a jobs.yaml written while it is being
read is read again, never installed half-read with its new signature."""

from __future__ import annotations

import queue
import time
from pathlib import Path

from runner.config.jobs import load_jobs
from runner.serve.watch import JobsWatcher, Loaded

SMALL = "jobs:\n  first:\n    schedule: every 1h\n    agent: false\n    pre_run: 'true'\n"
# big enough that validating it takes a while (~0.4 s on 2 cores): the next write lands during the read
BIG = "jobs:\n" + "".join(f"  j{i}:\n    schedule: every 1h\n    agent: false\n    pre_run: 'true'\n" for i in range(2000))
FINAL = "jobs:\n  final:\n    schedule: every 1h\n    agent: false\n    pre_run: 'true'\n"


def test_a_write_during_the_read_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(SMALL)
    watcher = JobsWatcher(path, default_timezone="UTC", current=load_jobs(path), wake=lambda: None, interval=0.02)
    watcher.start()
    try:
        path.write_text(BIG)
        time.sleep(0.15)  # the watcher has seen BIG and is validating it
        path.write_text(FINAL)
        deadline = time.monotonic() + 20
        last: Loaded | None = None
        while time.monotonic() < deadline:
            try:
                last = watcher.results.get(timeout=0.2)
            except queue.Empty:
                continue
            if last.jobs is not None and "final" in last.jobs.jobs:
                break
        assert last is not None and last.jobs is not None
        assert list(last.jobs.jobs) == ["final"]  # the file as it is now, not the one read under it
    finally:
        watcher.stop()
