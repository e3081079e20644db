"""The shadow git repository that holds a workdir's checkpoints (``runner.run.checkpoints``).

One repository per workdir, ``RUNNER_HOME/checkpoints/<16 hex of sha256(workdir path)>``, used
as ``GIT_DIR`` with the workdir as ``GIT_WORK_TREE`` and an index file of the caller's own (one
per run; a rollback's are temporary). So git never writes into the workdir except when a
rollback restores it; it never reads or writes the workdir's own ``.git`` (git skips every
``.git`` entry); and it runs with no system or global configuration: no hooks, filters, user
excludes or reflogs. The workdir's ``.gitignore`` files apply; ``info/exclude`` of the shadow
lists what the run may not read (RUNNER_HOME, config.yaml when inside the workdir).

A snapshot asks git which paths differ from the index (``ls-files -m -d -o``: git's stat cache
makes an unchanged tree a few milliseconds), checks their sizes, updates only those entries and
writes the tree; a new commit only when the tree changed. Nothing here runs ``git gc`` but
``prune`` (``runner runs prune``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.errors import CheckpointError

GIT_TIMEOUT = 120.0  # seconds one git command may take (a stuck disk fails the checkpoint, not the run)
SHOWN = 50  # paths named in one event (ignored, over the cap, skipped); the count says the rest
REF_PREFIX = "refs/runner/runs/"
BULK = 256  # paths in one snapshot from which new objects go into one pack, not a file each
CONFIG = """\
[core]
\trepositoryformatversion = 0
\tbare = false
\tautocrlf = false
\tfilemode = true
\tsymlinks = true
\tignorecase = false
\tquotepath = false
\tfsmonitor = false
\tlogallrefupdates = false
[gc]
\tauto = 0
"""  # no reflogs (a pruned run's objects really go); gc never on the hot path


def folder_of(home: Path, workdir: Path) -> Path:
    """Where the shadow repository of ``workdir`` lives."""
    return home / "checkpoints" / hashlib.sha256(str(workdir).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Caps:
    max_bytes: int  # the workdir's snapshotted files together (else no checkpoint)
    max_file_bytes: int  # one file (else it is left out and named)


@dataclass(frozen=True)
class Snapshot:
    commit: str
    tree: str
    files: int
    bytes: int
    changed: int | None  # paths that differ from the previous snapshot of this index (None: the first)
    oversize: tuple[str, ...] = ()  # "path (N MB)"
    skipped: tuple[str, ...] = ()  # "path: why" (unreadable, not a file, a repository of its own)


@dataclass(frozen=True)
class Restored:
    written: int
    deleted: int
    untouched: tuple[str, ...]  # in the target but now a file the undo checkpoint does not hold


class Shadow:
    """The shadow repository of one workdir (created on first use)."""

    def __init__(self, home: Path, workdir: Path, git_dir: Path | None = None):
        self.workdir = Path(os.path.realpath(workdir))
        self.git_dir = git_dir or folder_of(home, self.workdir)

    def index_of(self, run_id: str) -> Path:
        """The index file of a run's snapshots (removed when the run ends)."""
        return self.git_dir / "indexes" / run_id

    # -- set-up -----------------------------------------------------------------------------------
    def ensure(self, exclude: Iterable[str] = ()) -> None:
        """Create the repository if missing (atomically: a second run may be at it too) and write
        ``info/exclude``."""
        if not (self.git_dir / "HEAD").exists():
            self.git_dir.parent.mkdir(parents=True, exist_ok=True)
            fresh = Path(tempfile.mkdtemp(prefix=".new-", dir=self.git_dir.parent))
            try:
                self._git_at(fresh, "init", "-q", "--bare", str(fresh))
                (fresh / "config").write_text(CONFIG)
                (fresh / "workdir").write_text(f"{self.workdir}\n")
                try:
                    fresh.rename(self.git_dir)
                except OSError:
                    if not (self.git_dir / "HEAD").exists():
                        raise
            finally:
                shutil.rmtree(fresh, ignore_errors=True)
        (self.git_dir / "indexes").mkdir(exist_ok=True)
        lines = "".join(f"{line}\n" for line in exclude)
        path = self.git_dir / "info" / "exclude"
        try:
            same = path.read_text() == lines
        except FileNotFoundError:
            same = False
        if not same:
            path.parent.mkdir(exist_ok=True)
            tmp = path.with_name(f".exclude-{os.getpid()}")
            tmp.write_text(lines)
            tmp.replace(path)

    def _git_at(self, git_dir: Path, *args: str) -> None:
        env = _env(git_dir, self.workdir, None)
        del env["GIT_WORK_TREE"], env["GIT_DIR"]  # init and config of a repository not yet in place
        _run(["git", *args], env, None, os.fspath(git_dir))

    # -- git --------------------------------------------------------------------------------------
    def git(self, *args: str, index: Path | None = None, data: bytes | None = None) -> bytes:
        """Run ``git ARGS`` on this repository and work tree; its stdout. CheckpointError on failure."""
        return _run(["git", *args], _env(self.git_dir, self.workdir, index), data, os.fspath(self.workdir))

    def has(self, commit: str) -> bool:
        try:
            self.git("cat-file", "-e", f"{commit}^{{commit}}")
        except CheckpointError:
            return False
        return True

    def ignored(self, index: Path) -> list[str]:
        """What the workdir's .gitignore files (and ``info/exclude``) keep out, folders as one entry."""
        out = self.git("ls-files", "-z", "-o", "-i", "--exclude-standard", "--directory", index=index)
        return [_text(p) for p in out.split(b"\0") if p]

    def diff(self, old: str, new: str, max_bytes: int) -> tuple[str, bool]:
        """``git diff`` between two checkpoints (text; binary files named), cut at ``max_bytes``."""
        out = self.git("diff", "--no-color", "--no-ext-diff", "--no-renames", "--stat", "-p", old, new)
        return out[:max_bytes].decode("utf-8", "replace"), len(out) > max_bytes

    # -- restore ----------------------------------------------------------------------------------
    def restore(self, current: str, target: str) -> Restored:
        """Make the workdir's files those of ``target`` where they are those of ``current`` (a
        checkpoint of the workdir as it is now): changed files written back, files ``current``
        has and ``target`` does not deleted, files ``target`` has and ``current`` does not
        recreated, unless such a path is taken now by a file ``current`` does not hold (ignored,
        over the cap): that one is left as it is and named. Files neither holds are not touched."""
        rows = self.git("diff-tree", "-r", "-z", "--no-renames", "--name-status", current, target).split(b"\0")
        pairs = list(zip(rows[0::2], rows[1::2], strict=False))
        added = [p for s, p in pairs if s == b"A"]
        going = {p for s, p in pairs if s == b"D"}
        untouched = [p for p in added if self._taken(p, going)]
        tree = f"{target}^{{tree}}"
        with tempfile.TemporaryDirectory(prefix="restore-", dir=self.git_dir) as tmp:
            if untouched:
                index = Path(tmp) / "target"
                self.git("read-tree", tree, index=index)
                self.git("update-index", "--force-remove", "-z", "--stdin", index=index, data=_lines(untouched))
                tree = self.git("write-tree", index=index).decode().strip()
            index = Path(tmp) / "index"
            self.git("read-tree", current, index=index)
            self.git("read-tree", "--reset", "-u", tree, index=index)
        kept = set(untouched)
        written = sum(1 for s, p in pairs if s != b"D" and p not in kept)
        deleted = sum(1 for s, _ in pairs if s == b"D")
        return Restored(written, deleted, tuple(_text(p) for p in untouched))

    def _taken(self, path: bytes, going: set[bytes]) -> bool:
        """Is ``path`` (or a folder above it) taken now by a file or link the restore would not
        remove (``going``: what the current checkpoint holds and the target does not)? A folder
        where the target has a file is taken unless everything in it is going (git would
        delete the folder with whatever else it holds)."""
        root = os.fsencode(self.workdir)
        parts = path.split(b"/")
        for i in range(1, len(parts) + 1):
            here = b"/".join(parts[:i])
            try:
                mode = os.lstat(os.path.join(root, here)).st_mode
            except FileNotFoundError:
                return False
            if not stat.S_ISDIR(mode):
                return here not in going
        for folder, _dirs, names in os.walk(os.path.join(root, path)):
            for name in names:
                if os.path.relpath(os.path.join(folder, name), root) not in going:
                    return True
        return False

    # -- retention --------------------------------------------------------------------------------
    def runs(self) -> list[str]:
        out = self.git("for-each-ref", "--format=%(refname)", REF_PREFIX)
        return [line.removeprefix(REF_PREFIX) for line in out.decode().split()]

    def forget(self, run_ids: Sequence[str]) -> None:
        """Drop the runs' refs, then let git drop what nothing refers to any more (objects younger
        than an hour stay: a run writing meanwhile may not have referred to them yet)."""
        if not run_ids:
            return
        self.git("update-ref", "--stdin", data="".join(f"delete {REF_PREFIX}{r}\n" for r in run_ids).encode())
        self.git("gc", "--quiet", "--prune=1.hour.ago")


@dataclass
class Snapshotter:
    """Snapshots of one workdir through one index file (a run's), each a commit on ``ref``."""

    shadow: Shadow
    index: Path
    ref: str
    caps: Caps
    _sizes: dict[bytes, int] = field(default_factory=dict)  # what the index holds: path -> bytes
    tree: str | None = None
    commit: str | None = None

    def take(self, message: str) -> Snapshot:
        try:
            return self._take(message)
        except CheckpointError:
            self.discard()  # the index may be half updated: the next snapshot starts afresh
            raise

    def discard(self) -> None:
        self.index.unlink(missing_ok=True)
        self._sizes = {}

    def _take(self, message: str) -> Snapshot:
        git, index = self.shadow.git, self.index
        listed = git("ls-files", "-z", "-m", "-d", "-o", "--exclude-standard", index=index)
        paths = list(dict.fromkeys(p for p in listed.split(b"\0") if p))
        sizes = dict(self._sizes)
        update: list[bytes] = []
        drop: list[bytes] = []  # held by the index but no longer snapshotted
        oversize: list[str] = []
        skipped: list[str] = []
        root = os.fsencode(self.shadow.workdir)
        for path in paths:
            why = None
            if path.endswith(b"/"):
                why = "a git repository of its own (not snapshotted)"
            else:
                try:
                    st = os.lstat(os.path.join(root, path))
                except FileNotFoundError:
                    update.append(path)  # --remove takes it out of the index
                    sizes.pop(path, None)
                    continue
                except OSError as exc:
                    why = f"cannot be read ({exc.strerror})"
                else:
                    if stat.S_ISREG(st.st_mode) and st.st_size > self.caps.max_file_bytes:
                        oversize.append(f"{_text(path)} ({st.st_size / 1e6:.1f} MB)")
                    elif stat.S_ISREG(st.st_mode) and not os.access(os.path.join(root, path), os.R_OK):
                        why = "cannot be read (permission denied)"
                    elif not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                        why = "not a file"
                    else:
                        update.append(path)
                        sizes[path] = st.st_size
                        continue
            if why is not None:
                skipped.append(f"{_text(path)}: {why}")
            if sizes.pop(path, None) is not None:
                drop.append(path)
        if any(os.path.basename(p) == b".gitignore" for p in paths) and self._sizes:
            ignored = git("ls-files", "-z", "-c", "-i", "--exclude-standard", index=index)
            for path in (p for p in ignored.split(b"\0") if p and p in sizes):
                drop.append(path)
                sizes.pop(path)
        total = sum(sizes.values())
        if total > self.caps.max_bytes:
            raise CheckpointError(
                f"the workdir's files come to {total / 1e6:.1f} MB, over checkpoint_max_mb "
                f"({self.caps.max_bytes / 1e6:.0f} MB)",
                final=True,
            )
        if len(update) > BULK and not self.shadow.runs():
            # the workdir's first snapshot ever: its objects straight into one pack (5,000 files:
            # about 3x faster than a file each); later runs find most objects there and only hash
            bulk = ("-c", "core.bigFileThreshold=1", "-c", "pack.compression=1", "add", "-A")
            git(*bulk, "--pathspec-from-file=-", "--pathspec-file-nul", index=index, data=_lines(update))
        elif update:
            git("update-index", "--add", "--remove", "--replace", "-z", "--stdin", index=index, data=_lines(update))
        if drop:
            git("update-index", "--force-remove", "-z", "--stdin", index=index, data=_lines(drop))
        tree = git("write-tree", index=index).decode().strip()
        changed: int | None = None
        if tree == self.tree and self.commit is not None:
            commit, changed = self.commit, 0
        else:
            parent = ("-p", self.commit) if self.commit else ()
            commit = git("commit-tree", tree, *parent, "-m", message).decode().strip()
            git("update-ref", self.ref, commit)
            if self.tree is not None:
                diff = git("diff-tree", "-r", "-z", "--no-renames", "--name-only", self.tree, tree)
                changed = sum(1 for p in diff.split(b"\0") if p)
        self._sizes, self.tree, self.commit = sizes, tree, commit
        return Snapshot(commit, tree, len(sizes), total, changed, tuple(oversize), tuple(skipped))


def _env(git_dir: Path, workdir: Path, index: Path | None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": os.fspath(git_dir),
        "LC_ALL": "C",
        "GIT_DIR": os.fspath(git_dir),
        "GIT_WORK_TREE": os.fspath(workdir),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_LITERAL_PATHSPECS": "1",  # a path given is that path, never a pattern
        "GIT_AUTHOR_NAME": "runner",
        "GIT_AUTHOR_EMAIL": "runner@localhost",
        "GIT_COMMITTER_NAME": "runner",
        "GIT_COMMITTER_EMAIL": "runner@localhost",
    }
    if index is not None:
        env["GIT_INDEX_FILE"] = os.fspath(index)
    return env


def _run(argv: list[str], env: dict[str, str], data: bytes | None, cwd: str) -> bytes:
    try:
        proc = subprocess.run(
            argv, input=data, env=env, cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT, check=False
        )
    except FileNotFoundError as exc:
        if exc.filename == "git":
            raise CheckpointError("git is not installed: checkpoints need git on this machine", final=True) from None
        raise CheckpointError(f"git {argv[1]}: {exc.strerror}: {exc.filename}") from None
    except subprocess.TimeoutExpired:
        raise CheckpointError(f"git {argv[1]} took more than {GIT_TIMEOUT:.0f}s") from None
    except OSError as exc:
        raise CheckpointError(f"git {argv[1]}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit code {proc.returncode}"]
        raise CheckpointError(f"git {argv[1]}: {lines[-1]}")
    return proc.stdout


def _lines(paths: Iterable[bytes]) -> bytes:
    return b"".join(p + b"\0" for p in paths)


def _text(path: bytes) -> str:
    return path.decode("utf-8", "replace")


Keep = Callable[[list[str]], set[str]]


def prune(home: Path, keep: Keep) -> int:
    """Forget the checkpoints of runs the ledger no longer has (``keep(ids)`` names those it
    still has), in every shadow repository of ``home``; the number of runs forgotten."""
    root = home / "checkpoints"
    if not root.is_dir():
        return 0
    forgotten = 0
    for git_dir in sorted(p for p in root.iterdir() if (p / "HEAD").exists()):
        named = git_dir / "workdir"
        shadow = Shadow(home, Path(named.read_text().strip() if named.exists() else "/"), git_dir)
        ids = shadow.runs()
        indexes = sorted((git_dir / "indexes").glob("*")) if (git_dir / "indexes").is_dir() else []
        live = keep(sorted({*ids, *(p.name for p in indexes)}))
        for index in indexes:  # left by a run that was killed
            if index.name not in live:
                index.unlink(missing_ok=True)
        gone = [r for r in ids if r not in live]
        shadow.forget(gone)
        forgotten += len(gone)
    return forgotten
