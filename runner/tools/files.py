"""File tools that work through the job's backend, confined to the workdir (plus ``allow_paths``).

On the local backend every open walks the path beneath the roots with ``O_NOFOLLOW`` (see
runner/safety/beneath.py), so a symlink flipped by a background process or a hard link cannot lead outside;
search and list read the tree through directory fds too. Docker and SSH backends see the files
through their own shell (a Docker container sees only its mounts).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import shlex
import stat
import time
from collections.abc import Iterator
from typing import Any

from runner.backends.base import decode, truncate_text
from runner.errors import BackendError
from runner.safety.beneath import Escape, open_dir, open_file, read_beneath, write_beneath
from runner.safety.control import BLOCKED_LINE, audit_refusal
from runner.tools import Registry, ToolError, ToolResult
from runner.tools.context import ToolContext

READ_CAP_BYTES = 512 * 1024
DEFAULT_LINES = 2000
SEARCH_MAX = 100


def _str_arg(args: dict[str, Any], name: str, *, required: bool = True, default: str = "") -> str:
    value = args.get(name)
    if value is None:
        if required:
            raise ToolError(f"missing required argument {name!r}")
        return default
    if not isinstance(value, str):
        raise ToolError(f"argument {name!r} must be a string")
    return value


def _int_arg(args: dict[str, Any], name: str, default: int, minimum: int = 0) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ToolError(f"argument {name!r} must be an integer >= {minimum}")
    return value


def _roots(ctx: ToolContext) -> list[str]:
    roots = [ctx.workdir]
    for extra in ctx.allow_paths:
        roots.append(posixpath.normpath(posixpath.join(ctx.workdir, os.path.expanduser(extra))))
    return roots


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _realpath(ctx: ToolContext, path: str) -> str:
    if ctx.backend.is_local:
        try:
            return os.path.realpath(path)
        except OSError:  # a link vanished while realpath read it: the open beneath the roots decides
            return path
    result = ctx.backend.run(f"readlink -f -- {shlex.quote(path)} || echo {shlex.quote(path)}", timeout=30)
    lines = result.output.strip().splitlines()
    return lines[-1] if lines else path


def confine(ctx: ToolContext, raw: str) -> str:
    """Absolute backend path for ``raw``; ToolError if it leaves the workdir (lexically or by symlink)."""
    if not raw:
        raise ToolError("path is empty")
    path = posixpath.normpath(posixpath.join(ctx.workdir, raw))
    roots = _roots(ctx)
    if not _inside(path, roots):
        raise ToolError(f"path {raw!r} is outside the job's workdir {ctx.workdir}")
    real = _realpath(ctx, path)
    real_roots = [_realpath(ctx, r) for r in roots]
    if not _inside(real, real_roots):
        raise ToolError(f"path {raw!r} resolves (through a symlink) outside the job's workdir")
    return path


def _protected(ctx: ToolContext, tool: str, path: str, raw: str, *, write: bool) -> ToolResult | None:
    """The refusal when ``path`` is one of the runner's control files (written: any of them;
    read: RUNNER_HOME and config.yaml), with its audit row; None when the path is free."""
    if ctx.control is None:
        return None
    hit = ctx.control.write_hit(path) if write else ctx.control.read_hit(path)
    if hit is None:
        return None

    audit_refusal(ctx, f"{tool} {raw}", hit)
    return ToolResult(BLOCKED_LINE.format(path=raw), failed=True)


def _read_bytes(ctx: ToolContext, path: str, raw: str) -> bytes:
    try:
        if ctx.backend.is_local:
            return read_beneath(_roots(ctx), path, shown=raw)
        return ctx.backend.read_file(path)
    except Escape as exc:
        raise ToolError(f"path {raw!r}: {exc}") from None
    except FileNotFoundError:
        raise ToolError(f"no such file: {raw}") from None
    except IsADirectoryError:
        raise ToolError(f"{raw} is a directory; use list_dir") from None
    except BackendError:
        raise
    except OSError as exc:
        raise ToolError(f"cannot read {raw}: {exc.strerror or exc}") from None


def _write(ctx: ToolContext, path: str, data: bytes, raw: str) -> None:
    try:
        if ctx.backend.is_local:
            write_beneath(_roots(ctx), path, data, shown=raw, tmp_suffix=os.urandom(6).hex())
        else:
            ctx.backend.write_file(path, data)
    except Escape as exc:
        raise ToolError(f"path {raw!r}: {exc}") from None
    except IsADirectoryError:
        raise ToolError(f"{raw} is a directory") from None
    except BackendError:
        raise
    except OSError as exc:
        raise ToolError(f"cannot write {raw}: {exc.strerror or exc}") from None


def read_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = _str_arg(args, "path")
    offset = _int_arg(args, "offset", 1, minimum=1)
    limit = _int_arg(args, "limit", DEFAULT_LINES, minimum=1)
    path = confine(ctx, raw)
    if blocked := _protected(ctx, "read_file", path, raw, write=False):
        return blocked
    data = _read_bytes(ctx, path, raw)
    if b"\x00" in data[:8192]:
        raise ToolError(f"{raw} is a binary file ({len(data)} bytes); not shown")
    note = ""
    if len(data) > READ_CAP_BYTES and offset == 1 and limit == DEFAULT_LINES:
        note = f"\n[file is {len(data)} bytes; showing the start. Use offset/limit to read more.]"
    lines = decode(data).splitlines()
    chosen = lines[offset - 1 : offset - 1 + limit]
    body = "\n".join(f"{offset + i:>6}\t{line}" for i, line in enumerate(chosen))
    if offset - 1 + limit < len(lines):
        note += f"\n[lines {offset}-{offset + len(chosen) - 1} of {len(lines)}]"
    if not chosen:
        return ToolResult(f"(no lines at offset {offset}; the file has {len(lines)} lines)")
    return ToolResult(truncate_text(body, max(ctx.output_chars * 2, 8000)) + note)


def write_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = _str_arg(args, "path")
    content = _str_arg(args, "content")
    path = confine(ctx, raw)
    if blocked := _protected(ctx, "write_file", path, raw, write=True):
        return blocked
    data = content.encode("utf-8")
    _write(ctx, path, data, raw)
    return ToolResult(f"wrote {len(data)} bytes to {raw}")


def edit_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = _str_arg(args, "path")
    old = _str_arg(args, "old_string")
    new = _str_arg(args, "new_string")
    if not old:
        raise ToolError("old_string is empty; use write_file to create a file")
    path = confine(ctx, raw)
    if blocked := _protected(ctx, "edit_file", path, raw, write=True):
        return blocked
    text = decode(_read_bytes(ctx, path, raw))
    count = text.count(old)
    if count == 0:
        raise ToolError(f"old_string not found in {raw}; read the file and copy the text exactly")
    if count > 1:
        starts, pos = [], text.find(old)
        while pos != -1:
            starts.append(text.count("\n", 0, pos) + 1)
            pos = text.find(old, pos + 1)
        where = ", ".join(str(n) for n in starts[:10])
        raise ToolError(f"old_string matches {count} times in {raw} (lines {where}); add context to make it unique")
    _write(ctx, path, text.replace(old, new, 1).encode("utf-8"), raw)
    return ToolResult(f"edited {raw}: replaced 1 occurrence")


def search_files(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    pattern = _str_arg(args, "pattern")
    raw = _str_arg(args, "path", required=False, default=".")
    glob = _str_arg(args, "glob", required=False)
    path = confine(ctx, raw)
    if blocked := _protected(ctx, "search_files", path, raw, write=False):
        return blocked
    lines = (
        _search_local(ctx, path, raw, pattern, glob)
        if ctx.backend.is_local
        else _search_shell(ctx, path, pattern, glob)
    )
    prefix = ctx.workdir.rstrip("/") + "/"
    lines = [ln[len(prefix) :] if ln.startswith(prefix) else ln for ln in lines]
    if not lines:
        return ToolResult(f"no matches for {pattern!r} under {raw}")
    more = ""
    if len(lines) > SEARCH_MAX:
        lines, more = lines[:SEARCH_MAX], f"\n[more than {SEARCH_MAX} matches; narrow the pattern or path]"
    return ToolResult(truncate_text("\n".join(lines), ctx.output_chars) + more)


def _exclusions(ctx: ToolContext, path: str) -> str:
    """grep options that skip the unreadable control files under the searched folder."""
    if ctx.control is None:
        return ""
    out = []
    for hidden in ctx.control.unreadable_below(path):
        name = posixpath.basename(hidden)
        flag = "--exclude-dir" if os.path.isdir(hidden) else "--exclude"
        out.append(f"{flag}={shlex.quote(name)} ")
    return "".join(out)


def list_dir(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = _str_arg(args, "path", required=False, default=".")
    path = confine(ctx, raw)
    if blocked := _protected(ctx, "list_dir", path, raw, write=False):
        return blocked
    text = _list_local(ctx, path, raw) if ctx.backend.is_local else _list_shell(ctx, path, raw)
    return ToolResult(truncate_text(text, ctx.output_chars))


def _list_shell(ctx: ToolContext, path: str, raw: str) -> str:
    result = ctx.backend.run(f"ls -lA -- {shlex.quote(path)}", timeout=ctx.time_left(30))
    if result.exit_code != 0:
        raise ToolError(result.output.strip() or f"cannot list {raw}")
    return result.output.rstrip()


def _list_local(ctx: ToolContext, path: str, raw: str) -> str:
    """``ls -lA``-like lines (mode, links, size, mtime, name) read through a directory fd."""
    fd = _open_dir_or_error(ctx, path, raw)
    assert fd is not None
    try:
        rows = []
        for name in sorted(os.listdir(fd)):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(st.st_mtime))
            shown = name + ("/" if stat.S_ISDIR(st.st_mode) else "")
            if stat.S_ISLNK(st.st_mode):
                shown += f" -> {os.readlink(name, dir_fd=fd)}"
            rows.append(f"{stat.filemode(st.st_mode)} {st.st_nlink:>3} {st.st_size:>10} {when} {shown}")
    finally:
        os.close(fd)
    return f"total {len(rows)}\n" + "\n".join(rows)


def _open_dir_or_error(ctx: ToolContext, path: str, raw: str, *, file_ok: bool = False) -> int | None:
    """fd of the directory ``path``; None when it is a file and ``file_ok``; else ToolError."""
    try:
        return open_dir(_roots(ctx), path)
    except Escape as exc:
        raise ToolError(f"path {raw!r}: {exc}") from None
    except FileNotFoundError:
        raise ToolError(f"no such file or directory: {raw}") from None
    except NotADirectoryError:
        if file_ok:
            return None
        raise ToolError(f"{raw} is not a directory") from None
    except OSError as exc:
        raise ToolError(f"cannot open {raw}: {exc.strerror or exc}") from None


def _search_shell(ctx: ToolContext, path: str, pattern: str, glob: str) -> list[str]:
    include = f"--include={shlex.quote(glob)} " if glob else ""
    include += _exclusions(ctx, path)
    command = (
        f"grep -rnIE --exclude-dir=.git {include}-e {shlex.quote(pattern)} -- {shlex.quote(path)} "
        f"2>/dev/null | head -n {SEARCH_MAX + 1}"
    )
    result = ctx.backend.run(command, timeout=ctx.time_left(60))
    return [ln for ln in result.output.splitlines() if ln]


POSIX_CLASSES = {
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "alnum": "a-zA-Z0-9",
    "upper": "A-Z",
    "lower": "a-z",
    "space": r"\s",
    "blank": r" \t",
    "punct": r"!-/:-@\[-`{-~",
    "xdigit": "0-9A-Fa-f",
    "word": r"\w",
}
SEARCH_FILE_CAP = 16 * 1024 * 1024  # bytes of one file searched (grep has no cap; a run does not need one)


def _compile_ere(pattern: str) -> re.Pattern[str]:
    """A POSIX extended regex (what grep -E takes) as a Python one: the same syntax but for the
    ``[[:class:]]`` names, which are spelled out."""
    text = re.sub(r"\[:(\w+):\]", lambda m: POSIX_CLASSES.get(m.group(1), m.group(0)), pattern)
    try:
        return re.compile(text)
    except re.error as exc:
        raise ToolError(f"invalid pattern {pattern!r}: {exc}") from None


def _search_local(ctx: ToolContext, path: str, raw: str, pattern: str, glob: str) -> list[str]:
    """grep -rnIE in Python over directory fds: no symlink followed, hard-linked and binary
    files skipped; paths shown as grep shows them (absolute, the caller strips the workdir)."""
    regex = _compile_ere(pattern)
    out: list[str] = []
    for shown, fd in _files_under(ctx, path, raw, glob):
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(SEARCH_FILE_CAP)
        if b"\x00" in data[:8192]:
            continue
        for number, line in enumerate(decode(data).splitlines(), 1):
            if regex.search(line):
                out.append(f"{shown}:{number}:{line}")
                if len(out) > SEARCH_MAX:
                    return out
    return out


def _files_under(ctx: ToolContext, path: str, raw: str, glob: str) -> Iterator[tuple[str, int]]:
    """(shown path, open fd) of each regular, singly linked file under ``path`` (or ``path`` itself)."""
    top = _open_dir_or_error(ctx, path, raw, file_ok=True)
    if top is None:  # a single file
        fd = _open_one(ctx, path)
        if fd is not None:
            yield path, fd
        return
    hidden = set(ctx.control.unreadable_below(path)) if ctx.control is not None else set()

    def shown(dirpath: str, name: str) -> str:
        return posixpath.normpath(posixpath.join(path, dirpath, name))

    try:
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d != ".git" and shown(dirpath, d) not in hidden)
            for name in sorted(filenames):
                if (glob and not fnmatch.fnmatch(name, glob)) or shown(dirpath, name) in hidden:
                    continue
                try:
                    fd = open_file(dir_fd, name, name)
                except (Escape, OSError):
                    continue  # a symlink, a hard-linked file, a fifo that vanished...
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    continue
                yield shown(dirpath, name), fd
    finally:
        os.close(top)


def _open_one(ctx: ToolContext, path: str) -> int | None:
    parent, name = posixpath.split(path)
    try:
        fd = open_dir(_roots(ctx), parent)
    except (Escape, OSError):
        return None
    try:
        one = open_file(fd, name, name)
    except (Escape, OSError):
        return None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(one).st_mode):
        os.close(one)
        return None
    return one


_PATH = {"type": "string", "description": "path relative to the job's workdir"}


def register(registry: Registry) -> None:
    obj = {"type": "object", "additionalProperties": False}
    registry.tool(
        "read_file",
        "files",
        "Read a text file with line numbers (offset is 1-based, limit in lines).",
        {
            **obj,
            "properties": {"path": _PATH, "offset": {"type": "integer"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
        read_only=True,
    )(read_file)
    registry.tool(
        "write_file",
        "files",
        "Create or overwrite a text file.",
        {**obj, "properties": {"path": _PATH, "content": {"type": "string"}}, "required": ["path", "content"]},
    )(write_file)
    registry.tool(
        "edit_file",
        "files",
        "Replace one exact, unique occurrence of old_string with new_string.",
        {
            **obj,
            "properties": {"path": _PATH, "old_string": {"type": "string"}, "new_string": {"type": "string"}},
            "required": ["path", "old_string", "new_string"],
        },
    )(edit_file)
    registry.tool(
        "search_files",
        "files",
        "Search file contents with an extended regex (grep -E); skips .git and binaries.",
        {
            **obj,
            "properties": {
                "pattern": {"type": "string"},
                "path": _PATH,
                "glob": {"type": "string", "description": "file name filter, e.g. *.py"},
            },
            "required": ["pattern"],
        },
        read_only=True,
    )(search_files)
    registry.tool(
        "list_dir",
        "files",
        "List a directory.",
        {**obj, "properties": {"path": _PATH}},
        read_only=True,
    )(list_dir)
