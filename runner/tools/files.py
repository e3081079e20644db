"""File tools that work through the job's backend, confined to the workdir (plus ``allow_paths``)."""

from __future__ import annotations

import os
import posixpath
import shlex
from typing import Any

from backends.base import decode, truncate_text
from runner.errors import BackendError
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
        return os.path.realpath(path)
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
    from runner.safety.control import BLOCKED_LINE, audit_refusal

    audit_refusal(ctx, f"{tool} {raw}", hit)
    return ToolResult(BLOCKED_LINE.format(path=raw), failed=True)


def _read_bytes(ctx: ToolContext, path: str, raw: str) -> bytes:
    try:
        return ctx.backend.read_file(path)
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
        ctx.backend.write_file(path, data)
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
    include = f"--include={shlex.quote(glob)} " if glob else ""
    include += _exclusions(ctx, path)
    command = (
        f"grep -rnIE --exclude-dir=.git {include}-e {shlex.quote(pattern)} -- {shlex.quote(path)} "
        f"2>/dev/null | head -n {SEARCH_MAX + 1}"
    )
    result = ctx.backend.run(command, timeout=ctx.time_left(60))
    lines = [ln for ln in result.output.splitlines() if ln]
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
    result = ctx.backend.run(f"ls -lA -- {shlex.quote(path)}", timeout=ctx.time_left(30))
    if result.exit_code != 0:
        raise ToolError(result.output.strip() or f"cannot list {raw}")
    return ToolResult(truncate_text(result.output.rstrip(), ctx.output_chars))


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
    )(search_files)
    registry.tool(
        "list_dir",
        "files",
        "List a directory.",
        {**obj, "properties": {"path": _PATH}},
    )(list_dir)
