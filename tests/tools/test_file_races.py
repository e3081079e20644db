"""File tools against a symlink flipped by a background process and a hard-linked file: nothing
outside the workdir is read or written. Real local backend, real processes, real files."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runner.backends.base import BackendContext
from runner.backends.local import LocalBackend
from runner.tools import ToolError
from runner.tools.context import ToolContext
from runner.tools.files import confine, edit_file, list_dir, read_file, search_files, write_file

ROUNDS = 2000
FLIPPER = """
import os, shutil, sys
work, outside = sys.argv[1], sys.argv[2]
os.chdir(work)


def put(make):
    while True:
        try:
            make()
            return
        except OSError:  # a write_file in the window created a folder d: drop it and try again
            shutil.rmtree("d", ignore_errors=True)


flips = 0
while not os.path.exists("stop"):
    os.rename("d", "parked")
    put(lambda: os.symlink(outside, "d"))
    os.unlink("d")
    put(lambda: os.rename("parked", "d"))
    flips += 1
    if flips % 100 == 0:
        with open("flips.tmp", "w") as fh:
            fh.write(str(flips))
        os.replace("flips.tmp", "flips")
"""


@pytest.fixture
def box(tmp_path: Path) -> Iterator[tuple[ToolContext, Path, Path]]:
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    backend = LocalBackend(BackendContext(workdir=work, home=tmp_path))
    yield ToolContext(backend=backend), work, outside
    backend.close()


@pytest.fixture
def flipper(box: tuple[ToolContext, Path, Path]) -> Iterator[Path]:
    """``work/d`` flips between a real folder and a symlink to ``outside``, in another process."""
    _, work, outside = box
    (work / "d").mkdir()
    (work / "d" / "f.txt").write_text("inside\n")
    (outside / "f.txt").write_text("SECRET outside\n")
    proc = subprocess.Popen([sys.executable, "-c", FLIPPER, str(work), str(outside)])
    deadline = time.monotonic() + 10
    while not (work / "flips").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    yield work / "flips"
    (work / "stop").write_text("")
    try:
        assert proc.wait(timeout=10) == 0, "the flipper process failed (see its stderr)"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _flips(counter: Path) -> int:
    return int(counter.read_text())


def _rounds(seen_enough: Callable[[], bool], at_least: int = ROUNDS, seconds: float = 30.0) -> Iterator[int]:
    """Round numbers: ``at_least`` of them, then more until ``seen_enough()`` or ``seconds`` have
    passed (a busy machine may park the flipper on one side of the flip for a while)."""
    deadline = time.monotonic() + seconds
    for i in itertools.count():
        if i >= at_least and (seen_enough() or time.monotonic() > deadline):
            return
        yield i


def test_the_flipper_defeats_a_check_then_open_reader(box, flipper):
    """Control: the race is real. A reader that checks the real path, then opens by name (what the
    file tools did before) reads the outside file at least once in ROUNDS tries."""
    ctx, work, _ = box
    before = _flips(flipper)
    escapes: list[int] = []  # the tries that read the outside file
    tries = 0
    # until an escape; else at least 10 * ROUNDS tries and 2,000 flips meanwhile (on a loaded machine
    # the flipper may be parked for a while: those tries prove nothing), for up to 60 s
    for _ in _rounds(lambda: bool(escapes) or _flips(flipper) - before >= 2000, 10 * ROUNDS, seconds=60):
        if escapes:
            break
        tries += 1
        try:
            path = confine(ctx, "d/f.txt")
            if Path(path).read_text().startswith("SECRET"):
                escapes.append(tries)
        except (ToolError, OSError):
            continue
    flips = _flips(flipper) - before
    assert escapes, f"no escape in {tries} check-then-open reads over {flips} flips"


def test_reads_never_leave_the_workdir_while_a_symlink_flips(box, flipper):
    ctx, _, _ = box
    before = _flips(flipper)
    hits: Counter[str] = Counter()
    for _ in _rounds(lambda: bool(hits["inside"] and hits["refused"] and _flips(flipper) > before)):
        try:
            text = read_file({"path": "d/f.txt"}, ctx).text
        except ToolError:
            hits["refused"] += 1
            continue
        if "SECRET" in text:
            hits["escapes"] += 1
        elif "inside" in text:
            hits["inside"] += 1
    assert hits["escapes"] == 0
    assert hits["inside"] > 0 and hits["refused"] > 0  # both sides of the race were hit
    assert _flips(flipper) > before


def test_writes_never_leave_the_workdir_while_a_symlink_flips(box, flipper):
    ctx, work, outside = box
    before = _flips(flipper)
    hits: Counter[str] = Counter()
    for i in _rounds(lambda: bool(hits["written"] and _flips(flipper) > before)):
        try:
            write_file({"path": f"d/w{i}.txt", "content": "x"}, ctx)
            hits["written"] += 1
        except ToolError:
            continue
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]
    assert hits["written"] > 0 and _flips(flipper) > before


def test_search_and_list_never_leave_the_workdir_while_a_symlink_flips(box, flipper):
    ctx, _, _ = box
    hits: Counter[str] = Counter()
    for _ in _rounds(lambda: bool(hits["found"] and hits["listed"]), at_least=200):
        for call in (lambda: search_files({"pattern": "SECRET|inside"}, ctx), lambda: list_dir({"path": "d"}, ctx)):
            try:
                text = call().text
            except ToolError:
                continue
            assert "SECRET outside" not in text
            hits["found"] += "d/f.txt:1:inside" in text
            hits["listed"] += " f.txt" in text
    assert hits["found"] > 0 and hits["listed"] > 0


def test_a_hard_link_to_an_outside_file_is_refused(box):
    ctx, work, outside = box
    target = outside / "passwd"
    target.write_text("root:x:0:0\n")
    os.link(target, work / "innocent.txt")
    for call in (
        lambda: read_file({"path": "innocent.txt"}, ctx),
        lambda: edit_file({"path": "innocent.txt", "old_string": "root", "new_string": "toor"}, ctx),
        lambda: write_file({"path": "innocent.txt", "content": "owned\n"}, ctx),
    ):
        with pytest.raises(ToolError, match="has 2 hard links"):
            call()
    assert target.read_text() == "root:x:0:0\n"
    assert "no matches" in search_files({"pattern": "root"}, ctx).text
    assert "innocent.txt" in list_dir({}, ctx).text


def test_symlinks_that_stay_inside_still_work(box):
    ctx, work, outside = box
    (work / "v2").mkdir()
    (work / "v2" / "app.txt").write_text("version two\n")
    os.symlink("v2", work / "current")
    os.symlink(str(work / "v2" / "app.txt"), work / "abs-link.txt")
    os.symlink(str(outside), work / "v2" / "out")
    assert "version two" in read_file({"path": "current/app.txt"}, ctx).text
    assert "version two" in read_file({"path": "abs-link.txt"}, ctx).text
    assert "version two" in read_file({"path": "current/../v2/app.txt"}, ctx).text
    (outside / "x.txt").write_text("SECRET\n")
    with pytest.raises(ToolError, match="outside the job's workdir"):
        read_file({"path": "current/out/x.txt"}, ctx)
    assert "current/app.txt:1:version two" not in search_files({"pattern": "version"}, ctx).text  # links not followed
    assert "v2/app.txt:1:version two" in search_files({"pattern": "version"}, ctx).text


def test_write_keeps_the_mode_and_replaces_a_symlink_instead_of_following_it(box):
    ctx, work, outside = box
    script = work / "run.sh"
    script.write_text("echo 1\n")
    script.chmod(0o750)
    write_file({"path": "run.sh", "content": "echo 2\n"}, ctx)
    assert script.read_text() == "echo 2\n" and (script.stat().st_mode & 0o777) == 0o750
    (outside / "t.txt").write_text("untouched\n")
    os.symlink("run.sh", work / "alias.sh")
    write_file({"path": "alias.sh", "content": "own file\n"}, ctx)
    assert not (work / "alias.sh").is_symlink() and script.read_text() == "echo 2\n"
    assert [p.name for p in work.iterdir() if p.name.endswith(".tmp")] == []


def test_a_fifo_is_refused_instead_of_blocking(box):
    ctx, work, _ = box
    os.mkfifo(work / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        read_file({"path": "pipe"}, ctx)
    assert "no matches" in search_files({"pattern": "x"}, ctx).text
