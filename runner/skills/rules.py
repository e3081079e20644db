"""The SKILL.md rules: frontmatter, required and optional fields, names, supporting-file paths.

``check_skill_md`` is the one check every SKILL.md passes, whether it is loaded from disk or
written through ``skill_manage``: frontmatter with ``name`` (``^[a-z0-9][a-z0-9._-]*$``, at most
64) and ``description`` (at most 1,024 characters); optional ``version``, ``tags``, ``category``,
``platforms``; a non-empty body; at most 100,000 characters; and nothing the content scan flags
(``quick_scan`` on load; the full ``scan_skill_text`` before a write and before a view).

Skills written for Hermes load as they are: ``platforms:`` may name messaging surfaces (``cli``,
``telegram``, ``discord``, ...) besides operating systems; only the OS names (``linux``,
``macos``/``darwin``/``osx``, ``windows``/``win32``) filter, the others are kept and shown.
``metadata.hermes.tags`` and ``metadata.hermes.category`` (or ``metadata.category``) are read when
the top-level ``tags`` / ``category`` are absent; other keys (``author``, ``license``,
``prerequisites``, ...) are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runner.config.yamlio import BoundedLoader
from runner.skills import SUPPORT_DIRS
from runner.skills.scan import Scanner, quick_scan

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_SKILL_MD = 100_000
MAX_FILE_BYTES = 1024 * 1024
PLATFORMS = {
    "linux": "linux",
    "macos": "darwin",
    "darwin": "darwin",
    "osx": "darwin",
    "windows": "win32",
    "win32": "win32",
}
# Platform names that are not an OS: the surfaces Hermes talks through. Accepted, shown, never a filter.
MESSAGING = frozenset(
    [
        "cli",
        "api",
        "web",
        "webhook",
        "cron",
        "acp",
        "telegram",
        "discord",
        "slack",
        "whatsapp",
        "signal",
        "email",
        "sms",
        "matrix",
        "mattermost",
        "homeassistant",
        "weixin",
        "wechat",
        "wecom",
        "dingtalk",
        "feishu",
        "lark",
        "qq",
        "imessage",
        "bluebubbles",
        "teams",
        "line",
    ]
)
_OPEN = re.compile(r"---[ \t]*\r?\n")
_CLOSE = re.compile(r"^---[ \t]*(?:\r?\n|\Z)", re.MULTILINE)


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    source: str
    path: Path  # the skill's folder
    text: str  # the whole SKILL.md
    body: str
    category: str = "general"  # from the frontmatter, else the category folder, else "general"
    tags: tuple[str, ...] = ()
    version: str | None = None
    platforms: tuple[str, ...] = ()
    created_by: str | None = None
    files: tuple[str, ...] = ()  # supporting files, relative to the folder


# -- parsing --------------------------------------------------------------------------------
def parse_frontmatter(text: str) -> tuple[dict[str, Any], str, list[str]]:
    """(frontmatter mapping, body, problems) of a SKILL.md text."""
    if text.startswith("\ufeff"):
        text = text[1:]
    opening = _OPEN.match(text)
    closing = _CLOSE.search(text, opening.end()) if opening else None
    if opening is None or closing is None:
        return {}, text, ["SKILL.md must start with a '---' YAML frontmatter block closed by '---'"]
    block, body = text[opening.end() : closing.start()], text[closing.end() :]
    meta = simple_frontmatter(block)
    if meta is not None:
        return meta, body, []
    try:
        meta = yaml.load(block, Loader=BoundedLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        return {}, body, [f"frontmatter is not valid YAML{where}: {getattr(exc, 'problem', exc)}"]
    if not isinstance(meta, dict):
        return {}, body, ["frontmatter must be a YAML mapping"]
    return meta, body, []


_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*):[ \t]+(\S.*?)[ \t]*")
_PLAIN = re.compile(r"[A-Za-z][^#:\[\]{},\"'`|>&*!%@\t]*")  # starts with a letter; no YAML syntax at all
_PLAIN_ITEM = re.compile(r"[A-Za-z][A-Za-z0-9 ._/+-]*")
_NOT_STR = re.compile(r"(?i)(y|n|yes|no|on|off|true|false|null|nan|inf)")


def _plain(value: str, pattern: re.Pattern[str]) -> str | None:
    """``value`` when YAML would read it as exactly this string, else None."""
    if pattern.fullmatch(value) and not _NOT_STR.fullmatch(value) and not value.endswith(":"):
        return value
    return None


def simple_frontmatter(block: str) -> dict[str, Any] | None:
    """Fast path for the usual frontmatter: one ``key: value`` per line, values plain strings,
    JSON-style double-quoted strings or flow lists of plain words. Anything else returns None
    and is left to the YAML parser, so the result always equals what YAML would give."""
    out: dict[str, Any] = {}
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _KEY_LINE.fullmatch(line)
        if match is None or match.group(1) in out:
            return None
        key, raw = match.group(1), match.group(2)
        value: Any
        if raw.startswith('"'):
            if not raw.endswith('"') or len(raw) < 2 or "\\" in raw or '"' in raw[1:-1]:
                return None
            value = raw[1:-1]
        elif raw.startswith("[") and raw.endswith("]"):
            inner = raw[1:-1].strip()
            items = [i.strip() for i in inner.split(",")] if inner else []
            value = [_plain(i, _PLAIN_ITEM) for i in items]
            if any(v is None for v in value):
                return None
        else:
            value = _plain(raw, _PLAIN)
            if value is None:
                return None
        out[key] = value
    return out


def check_name(name: Any) -> list[str]:
    if not isinstance(name, str) or not name:
        return ["frontmatter 'name' is required"]
    if len(name) > MAX_NAME:
        return [f"name is {len(name)} characters; at most {MAX_NAME}"]
    if not NAME_RE.match(name):
        return [f"name {name!r} must match {NAME_RE.pattern}"]
    return []


def _str_list(meta: dict[str, Any], key: str, problems: list[str]) -> tuple[str, ...]:
    value = meta.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.append(f"'{key}' must be a list of strings")
        return ()
    return tuple(value)


def platform_list(value: Any, problems: list[str]) -> tuple[str, ...]:
    """The ``platforms:`` names (a list, or one name as a string); OS names and messaging words."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v.strip() for v in items):
        problems.append("'platforms' must be a list of names")
        return ()
    out: list[str] = []
    for item in items:
        name = item.strip()
        if name.lower() not in PLATFORMS and name.lower() not in MESSAGING:
            problems.append(
                f"unknown platform {name!r} (an OS: linux, macos, windows; or a messaging name: cli, telegram, "
                "discord, slack, whatsapp, signal, email, ...)"
            )
        else:
            out.append(name)
    return tuple(out)


def os_platforms(platforms: tuple[str, ...]) -> tuple[str, ...]:
    """The ``sys.platform`` values the OS names among ``platforms`` stand for (empty: no OS filter)."""
    return tuple(dict.fromkeys(PLATFORMS[p.lower()] for p in platforms if p.lower() in PLATFORMS))


def hermes_metadata(meta: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """``metadata.hermes`` (with ``metadata.category`` as its category when it has none), or {}."""
    metadata = meta.get("metadata")
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        problems.append("'metadata' must be a mapping")
        return {}
    hermes = metadata.get("hermes")
    if hermes is not None and not isinstance(hermes, dict):
        problems.append("'metadata.hermes' must be a mapping")
        hermes = None
    out = dict(hermes or {})
    if "category" not in out and metadata.get("category") is not None:
        out["category"] = metadata["category"]
    return out


def _category(meta: dict[str, Any], hermes: dict[str, Any], problems: list[str]) -> str | None:
    """The frontmatter's ``category``, else ``metadata.hermes.category`` (None: the folder decides)."""
    for key, value in (("category", meta.get("category")), ("metadata.hermes.category", hermes.get("category"))):
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip() or "\n" in value:
            problems.append(f"'{key}' must be a one-line string")
            return None
        return value.strip()
    return None


def check_skill_md(
    text: str,
    *,
    folder: str | None = None,
    scanner: Scanner = quick_scan,
    source: str = "",
    path: Path | None = None,
    category: str | None = None,
) -> tuple[Skill | None, list[str]]:
    """Check SKILL.md text against the rules and ``scanner`` (the quick one unless told otherwise:
    loading checks every skill on every run). ``category`` is the default category."""
    problems: list[str] = []
    if len(text) > MAX_SKILL_MD:
        return None, [f"SKILL.md is {len(text):,} characters; at most {MAX_SKILL_MD:,}"]
    meta, body, problems = parse_frontmatter(text)
    if problems:
        return None, problems
    name = meta.get("name")
    problems.extend(check_name(name))
    if folder is not None and isinstance(name, str) and name != folder and not problems:
        problems.append(f"name {name!r} differs from its folder name {folder!r}")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.append("frontmatter 'description' is required (a non-empty string)")
    elif len(description) > MAX_DESCRIPTION:
        problems.append(f"description is {len(description):,} characters; at most {MAX_DESCRIPTION:,}")
    if not body.strip():
        problems.append("the body after the frontmatter is empty")
    version = meta.get("version")
    if version is not None and not isinstance(version, str | int | float):
        problems.append("'version' must be a string")
    created_by = meta.get("created_by")
    if created_by is not None and not isinstance(created_by, str):
        problems.append("'created_by' must be a string")
    hermes = hermes_metadata(meta, problems)
    own_category = _category(meta, hermes, problems)
    tags = _str_list(meta, "tags", problems) or _str_list(hermes, "tags", problems)
    platforms = platform_list(meta.get("platforms"), problems)
    problems.extend(str(f) for f in scanner(text, kind="markdown"))
    if problems:
        return None, problems
    assert isinstance(name, str) and isinstance(description, str)
    skill = Skill(
        name=name,
        description=description.strip(),
        source=source,
        path=path or Path(),
        text=text,
        body=body,
        category=own_category or category or "general",
        tags=tags,
        version=None if version is None else str(version),
        platforms=platforms,
        created_by=created_by,
    )
    return skill, []


def check_support_path(rel: str) -> str:
    """The normalized relative path of a supporting file; ValueError says why it is not allowed."""
    if not rel or rel.startswith(("/", "\\")) or "\\" in rel or "\x00" in rel:
        raise ValueError(f"file {rel!r} must be a relative path like references/notes.md")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"file {rel!r} must not contain empty, '.' or '..' parts")
    if len(parts) < 2 or parts[0] not in SUPPORT_DIRS:
        raise ValueError(f"file {rel!r} must be inside one of: {', '.join(d + '/' for d in SUPPORT_DIRS)}")
    return rel
