"""``runner.run.shadow`` and ``runner.run.checkpoints`` in process, with real git and real files:
the bulk first snapshot gives the same tree as the entry-by-entry one, what is left out is named
(nested repositories, RUNNER_HOME inside the workdir), symlinks and a file replaced by a folder
come back, a file that now stands where the target had one is left alone, and git missing is a
recorded failure that stops the run's checkpoints."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from runner.events import Checkpoint, CheckpointFailed, Event, Payload
from runner.run.checkpoints import MB, Checkpointer, excluded
from runner.run.shadow import BULK, Caps, Shadow, Snapshotter

CAPS = Caps(100 * MB, 10 * MB)


def snapshotter(home: Path, work: Path, name: str = "r1") -> Snapshotter:
    shadow = Shadow(home, work)
    shadow.ensure()
    return Snapshotter(shadow, shadow.index_of(name), f"refs/runner/runs/{name}", CAPS)


def files(root: Path) -> dict[str, bytes]:
    out = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            out[path.relative_to(root).as_posix()] = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return out


def test_the_bulk_first_snapshot_is_the_same_tree_as_one_by_one(tmp_path: Path) -> None:
    work = tmp_path / "work"
    for i in range(BULK + 50):
        (work / f"d{i % 7}").mkdir(parents=True, exist_ok=True)
        (work / f"d{i % 7}" / f"f {i}.txt").write_text(f"{i}\n" * i)
    bulk = snapshotter(tmp_path / "a", work).take("first")
    assert bulk.files == BULK + 50 and bulk.changed is None
    first = snapshotter(tmp_path / "b", work)  # a second home: its first snapshot goes through the pack too
    slow = snapshotter(tmp_path / "a", work, "r2").take("again")  # a later run: refs exist, one by one
    assert slow.tree == bulk.tree == first.take("x").tree


def test_left_out_and_restored_things(tmp_path: Path) -> None:
    home = tmp_path / "home"
    work = tmp_path / "work"
    (work / "nested").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(work / "nested")], check=True)
    (work / "nested" / "x").write_text("x")
    (work / "state").mkdir()
    (work / "state" / "runner.db").write_text("db")
    (work / "link").symlink_to("target.txt")
    (work / "target.txt").write_text("t")
    (work / "thing").write_text("a file first")
    seen: list[Payload] = []
    shadow = Shadow(home, work)
    ckpt = Checkpointer(shadow, "r1", lambda k, p: seen.append(p), CAPS, exclude=excluded(shadow.workdir, [work / "state"]))
    ckpt.before_mutation(1, "terminal")
    [point] = seen
    assert isinstance(point, Checkpoint) and point.skipped == ["nested/: a git repository of its own (not snapshotted)"]
    assert point.ignored == ["state/"] and point.max_file_mb == 10
    (work / "thing").unlink()
    (work / "thing").mkdir()
    (work / "thing" / "inside").write_text("now a folder")
    (work / "link").unlink()
    ckpt.before_mutation(2, "terminal")
    ckpt.close()
    before = {k: v for k, v in files(work).items() if not k.startswith(("nested/", "state/"))}
    assert isinstance(seen[1], Checkpoint) and seen[1].changed == 3
    restored = shadow.restore(seen[2].id, point.id)  # type: ignore[union-attr]
    now = files(work)
    assert now["thing"] == b"a file first" and now["link"] == b"target.txt" and "thing/inside" not in now
    assert now["nested/x"] == b"x" and now["state/runner.db"] == b"db"  # never touched
    assert (restored.written, restored.deleted) == (2, 1) and before != now


def test_a_path_taken_by_a_file_no_checkpoint_holds_is_left_alone(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("old")
    snap = snapshotter(tmp_path / "home", work)
    first = snap.take("1")
    (work / "a.txt").unlink()
    (work / ".gitignore").write_text("a.txt\n")
    second = snap.take("2")
    (work / "a.txt").write_text("ignored now, written after")
    restored = snap.shadow.restore(second.commit, first.commit)
    assert restored.untouched == ("a.txt",) and (work / "a.txt").read_text() == "ignored now, written after"
    assert not (work / ".gitignore").exists()


def test_a_folder_holding_files_no_checkpoint_holds_is_left_alone(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "d").write_text("a file")
    snap = snapshotter(tmp_path / "home", work)
    first = snap.take("1")
    (work / "d").unlink()
    (work / "d").mkdir()
    (work / "d" / "x.log").write_text("ignored, keep me")
    (work / "d" / "held.txt").write_text("held")
    (work / ".gitignore").write_text("*.log\n")
    second = snap.take("2")
    restored = snap.shadow.restore(second.commit, first.commit)
    assert restored.untouched == ("d",) and (work / "d" / "x.log").read_text() == "ignored, keep me"


def test_without_git_the_run_records_one_failure_and_takes_no_more(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "work").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    seen: list[tuple[Event, Payload]] = []
    ckpt = Checkpointer(Shadow(tmp_path / "home", tmp_path / "work"), "r1", lambda k, p: seen.append((k, p)), CAPS)
    for step in (1, 2, 3):
        ckpt.before_mutation(step, "terminal")
    ckpt.close()
    [(kind, failure)] = seen
    assert kind == Event.CHECKPOINT_FAILED and isinstance(failure, CheckpointFailed)
    assert failure.gave_up and "git is not installed" in failure.error and failure.step == 1
