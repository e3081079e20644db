"""References that config files write instead of values, read without pydantic: ``api_keys``
entries (``env:NAME``, ``envlist:NAME:I`` or a literal key) and the ``mcp:SERVER[/TOOL]`` names of
a job's ``toolsets:``."""

from __future__ import annotations

import re

from runner.host import secrets

SERVER_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]|_(?!_)){0,31}$")  # no "__": it separates prefixed names
PREFIX = "mcp:"


def resolve_key(ref: str, index: int = 0, environ: dict[str, str] | None = None) -> tuple[str, str | None]:
    """Return (label, value) for the ``index``-th ``api_keys`` entry; value None when its env var is unset."""
    env = secrets.environ() if environ is None else environ
    if ref.startswith("env:"):
        name = ref[4:]
        return name, env.get(name) or None
    if ref.startswith("envlist:"):
        _, name, position = ref.split(":")
        items = [k.strip() for k in env.get(name, "").split(",") if k.strip()]
        i = int(position)
        return f"{name}[{i}]", items[i] if i < len(items) else None
    return f"config[{index}]", ref


def parse_ref(item: str) -> tuple[str, str | None]:
    """``mcp:SERVER`` -> (SERVER, None); ``mcp:SERVER/TOOL`` -> (SERVER, TOOL); ValueError if malformed."""
    body = item[len(PREFIX) :]
    server, slash, tool = body.partition("/")
    if not SERVER_NAME.match(server):
        raise ValueError(f"{item!r}: the server name must match {SERVER_NAME.pattern}")
    if slash and not tool:
        raise ValueError(f"{item!r}: name a tool after the slash (mcp:SERVER/TOOL) or drop it (mcp:SERVER)")
    return server, (tool if slash else None)


def is_ref(item: str) -> bool:
    return item.startswith(PREFIX)
