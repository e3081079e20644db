"""Workdir checkpoints (issue 33 item 3): a 5,000-file, 50 MB workdir in a temp folder.

Prints the medians of: the first checkpoint of a fresh shadow repository (target <= 2 s), a
checkpoint after 10 files changed (target <= 150 ms), a checkpoint of an unchanged tree, and the
first checkpoint of a later run of the same workdir (the objects are there already). Measured
through ``Checkpointer.before_mutation``, as the loop calls it (git processes included).

Main before: the same figures from main before's tree (``_before.each_tree``). Floor: bare git on
the same workdir with a separate ``GIT_DIR``: ``git add -A``, ``git write-tree`` and
``git commit-tree`` (a fresh repository for the first checkpoint, the same one after the changes).

    python tests/bench/bench_checkpoints.py [--rounds 15] [--files 5000]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import each_tree  # noqa: E402
from _common import beside, pct, row  # noqa: E402

from runner.events import Checkpoint, Event, Payload  # noqa: E402
from runner.run.checkpoints import MB, Checkpointer  # noqa: E402
from runner.run.shadow import Caps, Shadow  # noqa: E402

FILES = 5_000
TOTAL = 50 * MB
CHANGED = 10


def make_workdir(root: Path, files: int = FILES) -> list[Path]:
    """5,000 files in 50 folders, 50 MB together (sizes vary, some binary, a .gitignore)."""
    rng = random.Random(33)
    per = TOTAL // FILES
    paths = []
    for i in range(files):
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


def git_floor(workdir: Path, git_dir: Path, paths: list[Path], rng: random.Random) -> tuple[float, float]:
    """Seconds of bare git: the first commit of the workdir into a fresh ``git_dir``, then a
    commit after CHANGED files changed."""
    env = {**os.environ, "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(workdir), "GIT_AUTHOR_NAME": "b",
           "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}

    def commit() -> None:
        subprocess.run(["git", "add", "-A"], env=env, check=True)
        tree = subprocess.run(["git", "write-tree"], env=env, check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run(["git", "commit-tree", tree, "-m", "c"], env=env, check=True, capture_output=True)

    subprocess.run(["git", "init", "-q", str(git_dir)], check=True, env={**env, "GIT_DIR": str(git_dir)})
    first = timed(commit)
    for path in rng.sample(paths, CHANGED):
        with path.open("ab") as fh:
            fh.write(b"# changed\n")
    return first, timed(commit)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--files", type=int, default=FILES, help="files in the workdir (about 10 KB each)")
    args = parser.parse_args()
    measured = each_tree("bench_checkpoints", "measure", args.rounds, args.files)
    here, before = measured["this tree"], measured.get("main before")
    print(f"workdir: {here['files']:,} files, {here['size'] / MB:.1f} MB; {args.rounds} rounds")
    firsts, changed, same, later = here["firsts"], here["changed"], here["same"], here["later"]
    ms = 1000
    row("first checkpoint, fresh shadow repository (median of 5)", f"{statistics.median(firsts):.2f} s", "<= 2 s")
    row(f"checkpoint after {CHANGED} files changed: median", f"{statistics.median(changed) * ms:.0f} ms", "<= 150 ms")
    row(f"checkpoint after {CHANGED} files changed: p90", f"{pct(changed, 90) * ms:.0f} ms", "-")
    row("checkpoint of an unchanged tree: median", f"{statistics.median(same) * ms:.0f} ms", "-")
    row("first checkpoint of a later run (median of 5)", f"{statistics.median(later):.2f} s", "-")
    row("shadow repository on disk after all rounds", f"{here['du'] / MB:.1f} MB", "-")
    what = "bare git add -A, write-tree, commit-tree"
    beside("first checkpoint, fresh repository", statistics.median(firsts), before and statistics.median(before["firsts"]),
           here["floor_first"], what, "<= 2 s", "s")
    beside(f"checkpoint after {CHANGED} files changed", statistics.median(changed) * ms,
           before and statistics.median(before["changed"]) * ms, here["floor_changed"] * ms, what, "<= 150 ms")


def measure(rounds: int, files: int) -> dict[str, object]:
    """Seconds of each checkpoint kind over a fresh workdir of ``files`` files, and the git floor's."""
    base = Path(tempfile.mkdtemp(prefix="bench-ckpt-"))
    try:
        workdir = base / "work"
        workdir.mkdir()
        paths = make_workdir(workdir, files)
        size = sum(p.stat().st_size for p in paths)

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
        for step in range(2, 2 + rounds):
            for path in rng.sample(paths, CHANGED):
                with path.open("ab") as fh:
                    fh.write(b"# changed\n")
            changed.append(timed(lambda s=step: ckpt.before_mutation(s, "write_file")))
            assert seen[-1].changed == CHANGED, seen[-1]
        for step in range(100, 100 + rounds):
            same.append(timed(lambda s=step: ckpt.before_mutation(s, "terminal")))
            assert seen[-1].changed == 0
        ckpt.close()

        later = []
        for i in range(5):  # another run of the same workdir: a fresh index, the objects are there
            run, _ = checkpointer(home, workdir, f"run-{i + 2}")
            later.append(timed(lambda r=run: r.before_mutation(1, "terminal")))
            run.close()

        du = sum(f.stat().st_size for f in (home / "checkpoints").rglob("*") if f.is_file())
        floors = [git_floor(workdir, base / f"git-{i}", paths, rng) for i in range(3)]
        return {
            "files": len(paths), "size": size, "firsts": firsts, "changed": changed, "same": same, "later": later,
            "du": du, "floor_first": statistics.median(f[0] for f in floors),
            "floor_changed": statistics.median(f[1] for f in floors),
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
