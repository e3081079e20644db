"""The runner's control plane: the files that decide what a run may do, protected from the run.

What is protected, computed once per run (``protected_set``):

* written by nobody in the run: jobs.yaml, config.yaml, every input jobs.yaml refers to (prompt
  templates, ``pre_run`` scripts, the replayed cassette), the bundled and extra skill folders,
  and ``RUNNER_HOME`` (the ledger, the outputs, the credentials);
* not even read by the file tools: ``RUNNER_HOME`` and config.yaml.

Paths are compared both as written (normalised) and with symlinks resolved, so a link to
jobs.yaml is jobs.yaml. A backend that sees the workdir under another path (Docker's
``/workspace``) is mapped back to the host with ``seen_from``.

``Fingerprint`` is the defence in depth behind the checks: the protected files (not all of
``RUNNER_HOME``: jobs.yaml, config.yaml, the referenced files, the skill folders' SKILL.md and
the tools folders' Python files)
hashed at the start and the end of a run; a difference ends the run ``failed``/``tampered``.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.clock import iso, utcnow
from runner.events import Blocked, Event, Payload

if TYPE_CHECKING:
    from runner.safety.shell import Verdict

WRITES_CONTROL = "writes the runner's control files"
BLOCKED_LINE = "blocked: {path} is one of the runner's control files; find another way"
RELOAD_HOLD = "reload.hold"  # RUNNER_HOME/run/reload.hold: serve does not hot-reload while it exists

# commands that never write a file named in their arguments (redirects are checked apart)
_READ_ONLY = frozenset(
    {
        "cat", "less", "more", "head", "tail", "grep", "egrep", "fgrep", "rg", "wc", "ls", "stat", "file",
        "diff", "cmp", "md5sum", "sha1sum", "sha256sum", "sha512sum", "b2sum", "cksum", "test", "[", "echo",
        "printf", "readlink", "realpath", "basename", "dirname", "du", "tree", "nl", "od", "hexdump", "strings",
        "jq", "yamllint", "pwd", "true", "false", "cd", "pushd", "popd", "type", "which", "command",
    }
)  # fmt: skip
_GIT_READ_ONLY = frozenset({"status", "diff", "log", "show", "blame", "ls-files", "grep", "rev-parse", "cat-file"})
_FIND_ACTIONS = frozenset({"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"})
_COPIES = frozenset({"cp", "install", "ln", "rsync", "scp"})  # they write their destination only
_WRITE_OPS = frozenset({">", ">>", ">|", "<>", "&>", "&>>"})
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+|\$\(.*?\)|`[^`]*`")


def _norm(path: str) -> str:
    return posixpath.normpath(path) if path else path


@dataclass(frozen=True)
class ControlPlane:
    """The protected paths of one run (host paths, absolute), and how the backend sees the workdir."""

    files: tuple[str, ...] = ()  # write-protected files (and hashed)
    folders: tuple[str, ...] = ()  # write-protected folders
    unreadable: tuple[str, ...] = ()  # neither read nor written by the file tools (files or folders)
    skill_folders: tuple[str, ...] = ()  # their SKILL.md files are hashed
    tool_folders: tuple[str, ...] = ()  # the operator's tools folders: their *.py files are hashed
    workdir: str = ""  # the job's workdir on the host
    exempt: tuple[str, ...] = ()  # work areas inside a protected folder (RUNNER_HOME/workspaces: kanban tasks)
    backend_workdir: str = ""  # the same folder as the backend sees it ("" = the same path)

    # -- building ---------------------------------------------------------------------------
    def seen_from(self, backend_workdir: str) -> ControlPlane:
        """This plane for a backend that sees the host workdir at ``backend_workdir``."""
        same = _norm(backend_workdir) == _norm(self.workdir)
        return replace(self, backend_workdir="" if same else _norm(backend_workdir))

    def inside_workdir(self) -> tuple[Path, ...]:
        """The protected files and folders that lie inside the workdir (Docker mounts them read-only)."""
        if not self.workdir:
            return ()
        root = os.path.realpath(self.workdir)
        out = []
        for path in (*self.files, *self.folders):
            real = os.path.realpath(path)
            if real != root and _under(real, root) and os.path.exists(real):
                out.append(Path(real))
        return tuple(sorted(set(out)))

    # -- questions --------------------------------------------------------------------------
    def host_path(self, path: str, cwd: str | None = None) -> str:
        """``path`` as seen by the backend (relative to ``cwd`` or the workdir) as a host path."""
        base = cwd or self.backend_workdir or self.workdir
        full = _norm(posixpath.join(base, os.path.expanduser(path)))
        bw = self.backend_workdir
        if bw and _under(full, bw):
            full = _norm(posixpath.join(self.workdir, posixpath.relpath(full, bw)))
        return full

    def write_hit(self, path: str, cwd: str | None = None) -> str | None:
        """The protected path that writing ``path`` would touch, or None."""
        return _hit(self.host_path(path, cwd), self.files, (*self.folders, *self.unreadable), self.exempt)

    def read_hit(self, path: str, cwd: str | None = None) -> str | None:
        """The unreadable path that reading ``path`` would show, or None."""
        return _hit(self.host_path(path, cwd), (), self.unreadable, self.exempt)

    def unreadable_below(self, path: str) -> tuple[str, ...]:
        """Unreadable paths under the folder ``path`` (a search there must skip them), as host paths."""
        full = self.host_path(path)
        real = os.path.realpath(full)
        return tuple(u for u in self.unreadable if _under(u, full) or _under(os.path.realpath(u), real))

    def names_file(self, word: str) -> bool:
        """Does ``word`` end in the name of a protected file (``../x/jobs.yaml``, ``$D/jobs.yaml``)?"""
        base = posixpath.basename(word.rstrip("/"))
        return bool(base) and base in {posixpath.basename(f) for f in self.files}

    def command_writes(self, verdict: Verdict, cwd: str | None = None) -> tuple[str, ...]:
        """The segments of a classified command that write a protected path (a static check:
        redirect targets always; arguments of any command that is not read-only)."""
        return tuple(seg for seg in verdict.segments if self._segment_writes(seg, cwd))

    def _segment_writes(self, segment: str, cwd: str | None) -> bool:
        from runner.safety.shell.split import parse
        from runner.safety.shell.syntax import ParseBudget, ParseError

        try:
            script = parse(segment, ParseBudget(4 * len(segment) + 4096))
        except ParseError:
            return any(self.names_file(w) for w in segment.split())  # fail towards "writes"
        for pipeline in script.pipelines:
            for cmd in pipeline.commands:
                words = tuple(w.value for w in cmd.words)
                targets = [r.target.value for r in cmd.redirects if _writes(r.op, r.target.value)]
                if any(self._names(t, cwd) for t in targets):
                    return True
                if words and not _read_only(words) and any(self._names(w, cwd) for w in _written(words)):
                    return True
        return False

    def _names(self, word: str, cwd: str | None) -> bool:
        """Does ``word`` (a path, maybe with ``$VAR`` or globs, maybe ``--opt=PATH``) name a protected path?"""
        if not word or word == "-":
            return False
        candidates = [word]
        if word.startswith("-") and "=" in word:
            candidates.append(word.split("=", 1)[1])
        for cand in candidates:
            if self.names_file(cand):
                return True
            if _VARIABLE.search(cand) or any(c in cand for c in "*?["):
                if self._pattern_hit(cand, cwd):
                    return True
            elif self.write_hit(cand, cwd) is not None:
                return True
        return False

    def _pattern_hit(self, word: str, cwd: str | None) -> bool:
        import fnmatch

        pattern = _VARIABLE.sub("*", word)
        if not pattern.strip("*?[]/."):
            return False  # nothing literal to go on (`kill $PID`): the tamper check is the backstop
        full = self.host_path(pattern, cwd) if not pattern.startswith("*") else pattern
        parts = full.split("/")
        prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]  # the path, or a folder above it
        protected = (*self.files, *self.folders, *self.unreadable)
        if any(_under(full, e) for e in self.exempt):
            protected = self.files  # inside a work area only the named files are protected
        return any(fnmatch.fnmatchcase(p, pre) for p in protected for pre in prefixes if pre.strip("*/"))

    # -- hashing ----------------------------------------------------------------------------
    def hashed_files(self) -> tuple[str, ...]:
        """The files whose content a run checks at its end: the control files, each skill's
        SKILL.md, and every Python file of the operator's tools folders (a file that appears counts)."""
        out = dict.fromkeys(self.files)
        for folder in self.skill_folders:
            for pattern in ("*/SKILL.md", "*/*/SKILL.md"):
                for found in sorted(Path(folder).glob(pattern)):
                    out[str(found)] = None
        for folder in self.tool_folders:
            for found in sorted(Path(folder).glob("*.py")):
                out[str(found)] = None
        return tuple(out)

    def fingerprint(self) -> Fingerprint:
        return Fingerprint.of(self.hashed_files())


@dataclass(frozen=True)
class Fingerprint:
    """SHA-256 of each protected file ("-" when absent) at one moment."""

    digests: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, paths: Iterable[str]) -> Fingerprint:
        return cls(tuple((p, _digest(p)) for p in paths))

    def changed(self, later: Fingerprint) -> tuple[str, ...]:
        """Files whose content differs in ``later`` (or that appeared or vanished)."""
        before, after = dict(self.digests), dict(later.digests)
        return tuple(sorted(p for p in before.keys() | after.keys() if before.get(p, "-") != after.get(p, "-")))


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except FileNotFoundError:
        return "-"
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _hit(full: str, files: tuple[str, ...], folders: tuple[str, ...], exempt: tuple[str, ...] = ()) -> str | None:
    real = os.path.realpath(full)
    for cand in (full, real):
        for f in files:
            if cand == f or cand == os.path.realpath(f):
                return f
        if any(_under(cand, e) or _under(cand, os.path.realpath(e)) for e in exempt):
            continue  # a work area: only the files named above are protected there
        for d in folders:
            if _under(cand, d) or _under(cand, os.path.realpath(d)):
                return d
    return None


def _writes(op: str, target: str) -> bool:
    return op in _WRITE_OPS or (op == ">&" and not (target.isdigit() or target == "-"))


def _written(words: tuple[str, ...]) -> tuple[str, ...]:
    """The arguments a command may write: for copies and links only the destination (the last
    operand, or ``-t DIR``), for anything else every argument."""
    name = posixpath.basename(words[0])
    if name not in _COPIES:
        return words[1:]
    for i, word in enumerate(words[1:], start=1):
        if word in ("-t", "--target-directory") and i + 1 < len(words):
            return (words[i + 1],)
        if word.startswith("--target-directory="):
            return (word.partition("=")[2],)
    operands = [w for w in words[1:] if not w.startswith("-")]
    return tuple(operands[-1:])


def _read_only(words: tuple[str, ...]) -> bool:
    name = posixpath.basename(words[0])
    if name == "git":
        sub = next((w for w in words[1:] if not w.startswith("-")), "")
        return sub in _GIT_READ_ONLY
    if name == "find":
        return not any(w in _FIND_ACTIONS for w in words[1:])
    if name == "sed":
        return not any(w.startswith(("-i", "--in-place")) or (w.startswith("-") and "i" in w[1:]) for w in words[1:])
    return name in _READ_ONLY


class AuditTarget(Protocol):
    """What a refusal is recorded through (a tool's context)."""

    @property
    def run_id(self) -> str: ...

    @property
    def settings(self) -> Any: ...

    def emit(self, kind: Event, payload: Payload) -> None: ...


def audit_refusal(ctx: AuditTarget, what: str, hit: str) -> None:
    """A file tool refused a control file: an event and an ``approvals`` row (decided by ``control``)."""
    import json

    reason = f"touches the runner's control files ({hit})"
    ctx.emit(Event.BLOCKED, Blocked(what, hit, reason))
    if ctx.settings is None or not ctx.run_id:
        return
    ctx.settings.store.execute(
        "INSERT INTO approvals (run_id, ts, command, level, reasons, policy, decision, decided_by) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (ctx.run_id, iso(utcnow()), what, "control", json.dumps([reason]), None, "denied", "control"),
    )


def hold_path(home: Path) -> Path:
    """The reload hold a tampering run leaves: serve's hot reload waits for an operator."""
    return home / "run" / RELOAD_HOLD
