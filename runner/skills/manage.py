"""Changes to the writable skills in ``RUNNER_HOME/skills``: by the agent or by a person.

Every change is checked (the SKILL.md rules, supporting-file rules, ``scan_skill_text``) before
anything is written, and lands atomically (temp file or temp folder, then rename) under the
tree lock ``.tree.lock`` that the Curator also takes. Bundled and extra-folder skills are
read-only: a change to one is refused. Nothing here deletes a skill; ``archive`` moves it to
``.archive/<name>`` and ``restore`` moves it back, byte for byte.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from runner.clock import utcnow
from runner.skills import SkillError, SkillPaths, SkillRefused
from runner.skills.loader import Source
from runner.skills.rules import MAX_FILE_BYTES, check_name, check_skill_md, check_support_path, parse_frontmatter
from runner.skills.scan import Scanner, kind_for, scan_skill_text
from runner.skills.usage import UsageFile


@dataclass(frozen=True)
class Change:
    action: str
    name: str
    path: Path
    message: str


class SkillManager:
    """Writes to the home skills. ``actor`` is "agent" (skill_manage) or "person" (the CLI)."""

    def __init__(
        self,
        paths: SkillPaths,
        *,
        readonly: Sequence[Source] = (),
        actor: str = "agent",
        scanner: Scanner = scan_skill_text,
        clock: Callable[[], datetime] = utcnow,
    ):
        self.paths = paths
        self.readonly = [s for s in readonly if not s.writable]
        self.actor = actor
        self.scan = scanner
        self.clock = clock
        self.usage = UsageFile(paths)

    # -- checks ---------------------------------------------------------------------------
    def owner_elsewhere(self, name: str) -> Source | None:
        """The read-only source that holds a skill called ``name``, if any."""
        for source in self.readonly:
            if (source.root / name / "SKILL.md").exists():
                return source
            if source.root.is_dir():
                for category in os.scandir(source.root):
                    if category.is_dir() and os.path.exists(os.path.join(category.path, name, "SKILL.md")):
                        return source
        return None

    def _live(self, name: str) -> Path:
        problems = check_name(name)
        if problems:
            raise SkillError(problems[0])
        folder = self.paths.live(name)
        if (folder / "SKILL.md").is_file():
            return folder
        owner = self.owner_elsewhere(name)
        if owner is not None:
            raise SkillError(f"skill {name!r} is a {owner.kind} skill ({owner.root}) and read-only")
        if self.paths.archived(name).is_dir():
            raise SkillError(
                f"skill {name!r} is archived; a person can bring it back with: runner skills restore {name}"
            )
        raise SkillError(f"no skill {name!r} in {self.paths.root}")

    def _check_md(self, name: str, text: str, *, creating: bool = False) -> str:
        _, problems = check_skill_md(text, folder=name, scanner=self.scan)
        if problems:  # line numbers in the reasons match the text the caller sent
            raise SkillRefused(f"skill {name!r}: SKILL.md", problems)
        return self._mark(text, name, creating=creating)

    def _mark(self, text: str, name: str, *, creating: bool) -> str:
        """Skills the agent creates carry ``created_by: agent`` in their frontmatter; it stays."""
        if self.actor != "agent":
            return text
        meta, _, _ = parse_frontmatter(text)  # already checked
        by = meta.get("created_by")
        agent_made = creating or self.usage.get(name).created_by == "agent"
        if agent_made and by is None:
            return re.sub(r"\A(\ufeff?---[ \t]*\r?\n)", r"\1created_by: agent\n", text, count=1)
        if (agent_made and by != "agent") or (not agent_made and by == "agent"):
            raise SkillRefused(
                f"skill {name!r}: SKILL.md", [f"created_by is kept by runner; leave it as it was (found {by!r})"]
            )
        return text

    def _check_file(self, name: str, rel: str, content: str) -> bytes:
        data = content.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise SkillRefused(
                f"skill {name!r}: {rel}", [f"{len(data):,} bytes; supporting files are at most {MAX_FILE_BYTES:,}"]
            )
        findings = self.scan(content, kind=kind_for(rel))
        if findings:
            raise SkillRefused(f"skill {name!r}: {rel}", [str(f) for f in findings])
        return data

    def _support_path(self, folder: Path, rel: str) -> Path:
        try:
            rel = check_support_path(rel)
        except ValueError as exc:
            raise SkillRefused(f"skill {folder.name!r}", [str(exc)]) from None
        target = folder / rel
        real_root = os.path.realpath(folder)
        if not os.path.realpath(target).startswith(real_root + os.sep):
            raise SkillRefused(f"skill {folder.name!r}", [f"file {rel!r} resolves outside the skill folder"])
        return target

    # -- the actions ----------------------------------------------------------------------
    def create(self, name: str, content: str) -> Change:
        problems = check_name(name)
        if problems:
            raise SkillRefused(f"skill {name!r}", problems)
        with self.paths.changing_tree():
            if self.paths.live(name).exists():
                raise SkillError(f"skill {name!r} already exists; use edit or patch to change it")
            if self.paths.archived(name).exists():
                raise SkillError(
                    f"an archived skill is called {name!r}; pick another name (or ask a person to restore it)"
                )
            owner = self.owner_elsewhere(name)
            if owner is not None:
                raise SkillError(f"the name {name!r} is taken by a {owner.kind} skill; pick another name")
            text = self._check_md(name, content, creating=True)
            staging = Path(tempfile.mkdtemp(prefix=f".new-{name}-", dir=self.paths.root))
            (staging / "SKILL.md").write_text(text, encoding="utf-8")
            os.chmod(staging, 0o755)
            os.rename(staging, self.paths.live(name))
            self.usage.created(name, by=self.actor, now=self.clock())
        return Change("create", name, self.paths.live(name), f"created skill {name!r}")

    def edit(self, name: str, content: str) -> Change:
        with self.paths.changing_tree():
            folder = self._live(name)
            text = self._check_md(name, content)
            write_atomic(folder / "SKILL.md", text.encode("utf-8"))
            self.usage.bump([name], "patch", now=self.clock())
        return Change("edit", name, folder, f"replaced SKILL.md of {name!r} ({len(text):,} characters)")

    def patch(self, name: str, find: str, replace: str, file: str | None = None) -> Change:
        if not find:
            raise SkillRefused(f"skill {name!r}", ["'find' must be the exact text to replace (non-empty)"])
        with self.paths.changing_tree():
            folder = self._live(name)
            target = folder / "SKILL.md" if file in (None, "", "SKILL.md") else self._support_path(folder, file or "")
            rel = os.path.relpath(target, folder)
            try:
                old = target.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise SkillError(f"skill {name!r} has no file {rel}") from None
            count = old.count(find)
            if count != 1:
                why = "not found" if count == 0 else f"found {count} times; include more surrounding text"
                raise SkillRefused(f"skill {name!r}: {rel}", [f"'find' text {why}"])
            new = old.replace(find, replace, 1)
            data = self._check_md(name, new).encode("utf-8") if rel == "SKILL.md" else self._check_file(name, rel, new)
            write_atomic(target, data, mode=os.stat(target).st_mode & 0o777)
            self.usage.bump([name], "patch", now=self.clock())
        return Change("patch", name, target, f"patched {rel} of {name!r}")

    def write_file(self, name: str, file: str, content: str) -> Change:
        with self.paths.changing_tree():
            folder = self._live(name)
            target = self._support_path(folder, file)
            data = self._check_file(name, file, content)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not os.path.realpath(target.parent).startswith(os.path.realpath(folder) + os.sep):
                raise SkillRefused(f"skill {name!r}", [f"file {file!r} resolves outside the skill folder"])
            write_atomic(target, data, mode=0o755 if file.startswith("scripts/") else 0o644)
            self.usage.bump([name], "patch", now=self.clock())
        return Change("write_file", name, target, f"wrote {file} of {name!r} ({len(data):,} bytes)")

    def remove_file(self, name: str, file: str) -> Change:
        with self.paths.changing_tree():
            folder = self._live(name)
            target = self._support_path(folder, file)
            if not target.is_file():
                raise SkillError(f"skill {name!r} has no file {file}")
            target.unlink()
            parent = target.parent
            while parent != folder and not any(parent.iterdir()):
                parent.rmdir()
                parent = parent.parent
            self.usage.bump([name], "patch", now=self.clock())
        return Change("remove_file", name, target, f"removed {file} from {name!r}")

    def archive(self, name: str) -> Change:
        with self.paths.changing_tree():
            folder = self._live(name)
            record = self.usage.get(name)
            if record.pinned and self.actor == "agent":
                raise SkillError(f"skill {name!r} is pinned by a person; it stays")
            dest = self.paths.archived(name)
            if dest.exists():
                raise SkillError(f"{dest} already exists; move it away first")
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(folder, dest)
            self.usage.set_state(name, "archived", now=self.clock())
        return Change("archive", name, dest, f"archived {name!r} to {dest}")

    def restore(self, name: str) -> Change:
        with self.paths.changing_tree():
            src = self.paths.archived(name)
            if not (src / "SKILL.md").is_file():
                raise SkillError(f"no archived skill {name!r} in {self.paths.archive}")
            dest = self.paths.live(name)
            if dest.exists():
                raise SkillError(f"a skill {name!r} already exists in {self.paths.root}; move it away first")
            os.rename(src, dest)
            self.usage.set_state(name, "active", now=self.clock())
        return Change("restore", name, dest, f"restored {name!r} to {dest}")


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
