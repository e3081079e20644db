"""Workdir checkpoints (issue 33 item 3): a 5,000-file, 50 MB workdir in a temp folder.

Prints the medians of: the first checkpoint of a fresh shadow repository (target <= 2 s), a
checkpoint after 10 files changed (target <= 150 ms), a checkpoint of an unchanged tree, and the
first checkpoint of a later run of the same workdir (the objects are there already). Measured
through ``Checkpointer.before_mutation``, as the loop calls it (git processes included).

    python tests/bench/bench_checkpoints.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import pct, row  # noqa: I001 - the helper puts the repository on sys.path

from runner.events import Checkpoint, Event, Payload
from runner.run.checkpoints import MB, Checkpointer
from runner.run.shadow import Caps, Shadow

FILES = 5_000
TOTAL = 50 * MB
CHANGED = 10


def make_workdir(root: Path) -> list[Path]:
    """5,000 files in 50 folders, 50 MB together (sizes vary, some binary, a .gitignore)."""
    rng = random.Random(33)
    per = TOTAL // FILES
    paths = []
    for i in range(FILES):
        folder = root / f"pkg{i % 50:02d}"
        folder.mkdir(exist_ok=True)
        size = rng.randint(per // 2, per * 3 // 2)
        path = folder / (f"mod{i}.py" if i % 3 else f"data{i}.bin")
        path.write_bytes(os.urandom(size) if i % 3 == 0 else (b"x = %d\n" % i) * (size // 8))
        paths.append(path)
    (root / ".gitignore").write_text("*.log\n")
    return paths


def checkpointer(home: Path, workdir: Path, run_id: str) -> tuple[Checkpointer, list[Checkpoint]]:
    seen: list[Checkpoint] = []

    def emit(kind: Event, payload: Payload) -> None:
        if kind == Event.CHECKPOINT_FAILED:
            raise SystemExit(f"checkpoint failed: {payload}")
        if isinstance(payload, Checkpoint):
            seen.append(payload)

    caps = Caps(200 * MB, 10 * MB)
    return Checkpointer(Shadow(home, workdir), run_id, emit, caps), seen


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-ckpt-"))
    try:
        workdir = base / "work"
        workdir.mkdir()
        paths = make_workdir(workdir)
        size = sum(p.stat().st_size for p in paths)
        print(f"workdir: {len(paths):,} files, {size / MB:.1f} MB; {args.rounds} rounds")

        firsts = []
        for i in range(5):  # a fresh shadow repository each time
            home = base / f"home-first-{i}"
            ckpt, _ = checkpointer(home, workdir, f"first-{i}")
            firsts.append(timed(lambda c=ckpt: c.before_mutation(1, "terminal")))
            ckpt.close()
            shutil.rmtree(home)

        home = base / "home"
        ckpt, seen = checkpointer(home, workdir, "run-1")
        ckpt.before_mutation(1, "terminal")
        rng = random.Random(7)
        changed, same = [], []
        for step in range(2, 2 + args.rounds):
            for path in rng.sample(paths, CHANGED):
                with path.open("ab") as fh:
                    fh.write(b"# changed\n")
            changed.append(timed(lambda s=step: ckpt.before_mutation(s, "write_file")))
            assert seen[-1].changed == CHANGED, seen[-1]
        for step in range(100, 100 + args.rounds):
            same.append(timed(lambda s=step: ckpt.before_mutation(s, "terminal")))
            assert seen[-1].changed == 0
        ckpt.close()

        later = []
        for i in range(5):  # another run of the same workdir: a fresh index, the objects are there
            run, _ = checkpointer(home, workdir, f"run-{i + 2}")
            later.append(timed(lambda r=run: r.before_mutation(1, "terminal")))
            run.close()

        ms = 1000
        row("first checkpoint, fresh shadow repository (median of 5)", f"{statistics.median(firsts):.2f} s", "<= 2 s")
        row(f"checkpoint after {CHANGED} files changed: median", f"{statistics.median(changed) * ms:.0f} ms", "<= 150 ms")
        row(f"checkpoint after {CHANGED} files changed: p90", f"{pct(changed, 90) * ms:.0f} ms", "-")
        row("checkpoint of an unchanged tree: median", f"{statistics.median(same) * ms:.0f} ms", "-")
        row("first checkpoint of a later run (median of 5)", f"{statistics.median(later):.2f} s", "-")
        du = sum(f.stat().st_size for f in (home / "checkpoints").rglob("*") if f.is_file())
        row("shadow repository on disk after all rounds", f"{du / MB:.1f} MB", "-")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
