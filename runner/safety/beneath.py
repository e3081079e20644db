"""Opening files beneath the job's roots without races (the file tools on the local backend).

A path is walked one component at a time from a directory fd of its root: every directory is
opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to the previous one and the file itself with
``O_NOFOLLOW``, so a symlink swapped in between the check and the open makes the open fail
instead of leading outside. Symlinks that are there are followed by hand (``readlinkat``), at
most ``MAX_LINKS``, and only while they stay beneath a root; ``..`` never climbs above the root.
A regular file with more than one hard link is refused: the same inode may be a file outside
the workdir. The walk is what ``openat2(RESOLVE_BENEATH)`` does in the kernel, written with
calls every Linux has.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

MAX_LINKS = 40
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class Escape(Exception):
    """The path leaves the roots, holds a hard-linked file, or changed while it was being opened."""


@dataclass(frozen=True)
class Root:
    path: str  # as configured (lexical)
    real: str  # os.path.realpath of it

    @classmethod
    def of(cls, path: str) -> Root:
        return cls(posixpath.normpath(path), os.path.realpath(path))

    def relative(self, absolute: str) -> list[str] | None:
        """Components of ``absolute`` below this root, or None when it is not beneath it."""
        path = posixpath.normpath(absolute)
        for base in (self.real, self.path):
            if path == base:
                return []
            if path.startswith(base.rstrip("/") + "/"):
                return path[len(base.rstrip("/")) + 1 :].split("/")
        return None


def _where(roots: Sequence[Root], absolute: str) -> tuple[Root, list[str]]:
    best: tuple[Root, list[str]] | None = None
    for root in roots:
        parts = root.relative(absolute)
        if parts is not None and (best is None or len(parts) < len(best[1])):
            best = (root, parts)
    if best is None:
        raise Escape(f"{absolute} is outside the job's workdir")
    return best


class _Walk:
    """One walk: a stack of open directory fds from the root down."""

    def __init__(self, roots: Sequence[Root], absolute: str, create_dirs: bool):
        self.roots = roots
        self.create_dirs = create_dirs
        self.links = 0
        self.stack: list[int] = []
        root, self.todo = _where(roots, absolute)
        self._enter_root(root)

    def _enter_root(self, root: Root) -> None:
        self.close()
        self.stack = [os.open(root.real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]

    def close(self) -> None:
        while self.stack:
            os.close(self.stack.pop())

    def _follow(self, name: str, rest: list[str]) -> None:
        """``name`` (in the current directory) is a symlink: continue the walk at its target."""
        self.links += 1
        if self.links > MAX_LINKS:
            raise Escape("too many levels of symbolic links")
        target = os.readlink(name, dir_fd=self.stack[-1])
        if target.startswith("/"):
            root, parts = _where(self.roots, target)
            self._enter_root(root)
            self.todo = parts + rest
        else:
            self.todo = target.split("/") + rest

    def parent_of_last(self, follow_last: bool) -> tuple[int, str]:
        """Walk every component but the last (following it too when ``follow_last`` and it is a
        symlink); return (the parent directory's fd, the last name). The fd belongs to the walk."""
        while True:
            parts = [p for p in self.todo if p not in ("", ".")]
            if not parts:
                return self._last(".")
            head, rest = parts[0], parts[1:]
            if head == "..":
                if len(self.stack) == 1:
                    raise Escape("the path climbs above the job's workdir")
                os.close(self.stack.pop())
                self.todo = rest
                continue
            is_link = _is_link(head, self.stack[-1])
            if not rest:
                if is_link and follow_last:
                    self._follow(head, [])
                    continue
                return self.stack[-1], head
            if is_link:
                self._follow(head, rest)
                continue
            self.stack.append(self._open_dir(head))
            self.todo = rest

    def _last(self, name: str) -> tuple[int, str]:
        return self.stack[-1], name

    def _open_dir(self, name: str) -> int:
        try:
            return os.open(name, DIR_FLAGS, dir_fd=self.stack[-1])
        except FileNotFoundError:
            if not self.create_dirs:
                raise
        try:
            os.mkdir(name, 0o777, dir_fd=self.stack[-1])
        except FileExistsError:
            pass
        return os.open(name, DIR_FLAGS, dir_fd=self.stack[-1])


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


@contextmanager
def walk(
    roots: Sequence[str], absolute: str, *, follow_last: bool, create_dirs: bool = False
) -> Iterator[tuple[int, str]]:
    """(parent directory fd, last name) of ``absolute`` beneath one of ``roots``; Escape if it leaves them."""
    state = _Walk([Root.of(r) for r in roots], absolute, create_dirs)
    try:
        yield state.parent_of_last(follow_last)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and not isinstance(exc, NotADirectoryError):
            raise Escape("the path changed while it was being opened (a symlink appeared)") from None
        raise
    finally:
        state.close()


def _check_links(st: os.stat_result, shown: str) -> None:
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise Escape(f"{shown} has {st.st_nlink} hard links (the same file may be outside the workdir)")


def open_file(dir_fd: int, name: str, shown: str) -> int:
    """An fd for reading the regular file ``name`` in ``dir_fd`` (no symlink, one link only);
    OSError for anything but a regular file."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Escape(f"{shown} changed into a symlink while it was being opened") from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", shown)
        if not stat.S_ISREG(st.st_mode):  # a fifo would block, a device is not the workdir's
            raise OSError(errno.EINVAL, "not a regular file", shown)
        _check_links(st, shown)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_beneath(roots: Sequence[str], absolute: str, *, shown: str) -> bytes:
    with walk(roots, absolute, follow_last=True) as (dir_fd, name):
        fd = open_file(dir_fd, name, shown)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def write_beneath(roots: Sequence[str], absolute: str, data: bytes, *, shown: str, tmp_suffix: str) -> None:
    """Write ``data`` to ``absolute`` through a temporary sibling renamed over it (a symlink at
    the last component is replaced, not followed); missing directories are created."""
    with walk(roots, absolute, follow_last=False, create_dirs=True) as (dir_fd, name):
        if name in (".", ".."):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", shown)
        mode = 0o666
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", shown)
            _check_links(st, shown)
            mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else mode
        tmp = f".{name}.{tmp_suffix}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                if st is not None and stat.S_ISREG(st.st_mode):
                    os.fchmod(fh.fileno(), mode)  # keep the file's mode (open() applied the umask)
                fh.write(data)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise


def open_dir(roots: Sequence[str], absolute: str) -> int:
    """An fd of the directory ``absolute`` beneath ``roots`` (symlinks followed only beneath them)."""
    with walk(roots, absolute, follow_last=True) as (dir_fd, name):
        try:
            return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Escape(f"{absolute} changed into a symlink while it was being opened") from None
            raise
