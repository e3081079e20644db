"""Finding skills and checking them: the SKILL.md rules, the catalog, the index for the prompt.

Sources, in precedence order (a name found twice keeps the first; the other is reported):
1. ``bundled``: the project's ``skills/`` (beside jobs.yaml). Read-only, never curated.
2. ``home``: ``RUNNER_HOME/skills``, written by the agent (``skill_manage``) or a person.
3. ``extra``: folders from config ``skills.dirs``. Read-only, never curated.

A skill is a folder holding ``SKILL.md``, either directly in a source or one level down in a
category folder (``<source>/<category>/<name>/SKILL.md``). Anything invalid is reported with its
reasons and skipped; loading never raises for a bad skill.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from runner.skills import SUPPORT_DIRS, SkillPaths
from runner.skills.scan import Scanner, scan_skill_text

if TYPE_CHECKING:
    from runner.context import Settings

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_SKILL_MD = 100_000
MAX_FILE_BYTES = 1024 * 1024
INDEX_DESCRIPTION = 200
PLATFORMS = {
    "linux": "linux",
    "macos": "darwin",
    "darwin": "darwin",
    "osx": "darwin",
    "windows": "win32",
    "win32": "win32",
}
_OPEN = re.compile(r"---[ \t]*\r?\n")
_CLOSE = re.compile(r"^---[ \t]*(?:\r?\n|\Z)", re.MULTILINE)
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Source:
    kind: str  # bundled | home | extra
    root: Path

    @property
    def writable(self) -> bool:
        return self.kind == "home"


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


@dataclass(frozen=True)
class Invalid:
    name: str  # the folder name
    source: str
    path: Path
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Catalog:
    skills: dict[str, Skill] = field(default_factory=dict)
    invalid: tuple[Invalid, ...] = ()
    unavailable: tuple[Skill, ...] = ()  # valid, but not for this platform

    def get(self, name: str) -> Skill | None:
        return self.skills.get(name)


# -- the SKILL.md rules ---------------------------------------------------------------------
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
        meta = yaml.load(block, Loader=_Loader)
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


def check_skill_md(
    text: str,
    *,
    folder: str | None = None,
    scanner: Scanner = scan_skill_text,
    source: str = "",
    path: Path | None = None,
    category: str | None = None,
) -> tuple[Skill | None, list[str]]:
    """Check SKILL.md text against the rules and the scan. ``category`` is the default category."""
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
    own_category = meta.get("category")
    if own_category is not None and (
        not isinstance(own_category, str) or not own_category.strip() or "\n" in own_category
    ):
        problems.append("'category' must be a one-line string")
    created_by = meta.get("created_by")
    if created_by is not None and not isinstance(created_by, str):
        problems.append("'created_by' must be a string")
    tags = _str_list(meta, "tags", problems)
    platforms = _str_list(meta, "platforms", problems)
    for p in platforms:
        if p.lower() not in PLATFORMS:
            problems.append(f"unknown platform {p!r} (use linux, macos, windows)")
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
        category=own_category.strip() if isinstance(own_category, str) else (category or "general"),
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


def support_files(folder: Path) -> tuple[tuple[str, ...], list[str]]:
    """(supporting files, problems) of a skill folder: only the allowed folders, sizes, no escapes."""
    files: list[str] = []
    problems: list[str] = []
    allowed = ", ".join(d + "/" for d in SUPPORT_DIRS)
    with os.scandir(folder) as it:
        top = sorted(it, key=lambda e: e.name)
    for entry in top:
        if entry.name == "SKILL.md" or entry.name.startswith("."):
            continue
        if entry.name not in SUPPORT_DIRS or not entry.is_dir(follow_symlinks=False):
            problems.append(f"{entry.name}: supporting files must be inside {allowed} (as real folders)")
            continue
        _walk(folder, entry.path, files, problems)
    return tuple(files), problems


def _walk(folder: Path, path: str, files: list[str], problems: list[str]) -> None:
    """Collect files under ``path``; symlinks are followed only when they stay inside ``folder``."""
    with os.scandir(path) as it:
        entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
    for entry in entries:
        rel = os.path.relpath(entry.path, folder).replace(os.sep, "/")
        if entry.is_symlink():
            real_root = os.path.realpath(folder)
            if not os.path.realpath(entry.path).startswith(real_root + os.sep):
                problems.append(f"{rel}: points outside the skill folder")
                continue
        if entry.is_dir():
            if not entry.is_symlink():
                _walk(folder, entry.path, files, problems)
            continue
        try:
            size = entry.stat().st_size
        except OSError as exc:
            problems.append(f"{rel}: cannot read: {exc.strerror}")
            continue
        if size > MAX_FILE_BYTES:
            problems.append(f"{rel}: {size:,} bytes; supporting files are at most {MAX_FILE_BYTES:,}")
            continue
        files.append(rel)


def read_skill(folder: Path, source: str, *, category: str | None = None) -> Skill | Invalid:
    """Load one skill folder, or say why it is invalid. ``category`` is the default category."""
    md = folder / "SKILL.md"
    try:
        if os.path.islink(md) and os.path.realpath(md) != os.path.join(os.path.realpath(folder), "SKILL.md"):
            return Invalid(folder.name, source, folder, ("SKILL.md points outside the skill folder",))
        with open(md, "rb") as fh:
            raw = fh.read(MAX_SKILL_MD * 4 + 1)
        if len(raw) > MAX_SKILL_MD * 4:
            return Invalid(folder.name, source, folder, (f"SKILL.md is larger than {MAX_SKILL_MD:,} characters",))
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Invalid(folder.name, source, folder, ("SKILL.md is not UTF-8 text",))
    except OSError as exc:
        return Invalid(folder.name, source, folder, (f"SKILL.md cannot be read: {exc.strerror}",))
    try:
        files, problems = support_files(folder)
    except OSError as exc:
        return Invalid(folder.name, source, folder, (f"cannot list the skill folder: {exc.strerror}: {exc.filename}",))
    skill, md_problems = check_skill_md(text, folder=folder.name, source=source, path=folder, category=category)
    if skill is None or problems:
        return Invalid(folder.name, source, folder, tuple(md_problems + problems))
    return replace(skill, files=files) if files else skill


def _list(path: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as it:
        return sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)


def _skill_folders(root: Path) -> Iterable[tuple[Path, bool]]:
    """(folder, nested) for every folder that holds a SKILL.md, plus top folders without one.

    A folder that cannot be listed raises OSError (the caller reports it)."""
    try:
        entries = _list(str(root))
    except FileNotFoundError:
        return
    for entry in entries:
        if not entry.is_dir():
            continue
        path = Path(entry.path)
        if os.path.exists(os.path.join(entry.path, "SKILL.md")):
            yield path, False
            continue
        nested = False
        if os.access(entry.path, os.R_OK | os.X_OK):
            for sub in _list(entry.path):
                if sub.is_dir() and not sub.name.startswith(".") and os.path.exists(os.path.join(sub.path, "SKILL.md")):
                    nested = True
                    yield Path(sub.path), True
        if not nested:
            yield path, False


def platform_ok(skill: Skill, platform: str = sys.platform) -> bool:
    if not skill.platforms:
        return True
    return any(PLATFORMS.get(p.lower()) == platform for p in skill.platforms)


def load_catalog(sources: Sequence[Source], *, platform: str = sys.platform) -> Catalog:
    skills: dict[str, Skill] = {}
    invalid: list[Invalid] = []
    unavailable: list[Skill] = []
    seen_roots: set[str] = set()
    for source in sources:
        real = os.path.realpath(source.root)
        if real in seen_roots:
            continue
        seen_roots.add(real)
        try:
            folders = list(_skill_folders(source.root))
        except OSError as exc:
            problem = f"cannot list {exc.filename or source.root}: {exc.strerror}"
            invalid.append(Invalid(source.root.name, source.kind, source.root, (problem,)))
            continue
        for folder, nested in folders:
            if not (folder / "SKILL.md").exists():
                invalid.append(Invalid(folder.name, source.kind, folder, ("no SKILL.md in this folder",)))
                continue
            item = read_skill(folder, source.kind, category=folder.parent.name if nested else None)
            if isinstance(item, Invalid):
                invalid.append(item)
            elif item.name in skills:
                first = skills[item.name]
                invalid.append(
                    Invalid(
                        item.name,
                        source.kind,
                        folder,
                        (f"name already taken by the {first.source} skill at {first.path}",),
                    )
                )
            elif not platform_ok(item, platform):
                unavailable.append(item)
            else:
                skills[item.name] = item
    return Catalog(skills=skills, invalid=tuple(invalid), unavailable=tuple(unavailable))


def sources_for(settings: Settings) -> list[Source]:
    """The skill sources of this project and machine, in precedence order."""
    out = [
        Source("bundled", settings.jobs_path.parent / "skills"),
        Source("home", SkillPaths.under(settings.home).root),
    ]
    base = Path(settings.config.path).parent if settings.config.path else settings.home
    for raw in settings.config.skills.dirs:
        out.append(Source("extra", (base / os.path.expanduser(raw)).resolve()))
    return out


# -- the index in the system prompt ---------------------------------------------------------
INDEX_HEAD = (
    "## Skills\n"
    "Skills are saved procedures for kinds of task. Before a task that one of these matches, read it "
    "with skill_view(name) and follow it; open its supporting files with skill_view(name, file)."
)
INDEX_MANAGE = (
    "When you work out a procedure worth reusing, or find a skill wrong or out of date, save it with "
    "skill_manage (create, or patch the part that was wrong)."
)


def build_index(skills: Iterable[Skill], *, can_manage: bool = False) -> str:
    """Name and one-line description of each skill, grouped by category (sorted, so stable)."""
    by_category: dict[str, list[Skill]] = {}
    for skill in skills:
        by_category.setdefault(skill.category, []).append(skill)
    parts = [INDEX_HEAD + (" " + INDEX_MANAGE if can_manage else "")]
    if not by_category:
        parts.append("(no skills yet)")
    for category in sorted(by_category):
        lines = [f"### {category}"]
        for skill in sorted(by_category[category], key=lambda s: s.name):
            lines.append(f"- {skill.name}: {_one_line(skill.description)}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= INDEX_DESCRIPTION else flat[: INDEX_DESCRIPTION - 3].rstrip() + "..."
