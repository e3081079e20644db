"""Project instructions from the workdir: the first of AGENTS.md, CLAUDE.md, .cursorrules."""

from __future__ import annotations

from runner.backends.base import Backend
from runner.events import ContextFile, Emit, Event, Findings
from runner.safety.injection import blocked_marker, scan

CONTEXT_FILES = ("AGENTS.md", "CLAUDE.md", ".cursorrules")
CONTEXT_FILE_CAP = 20_000


def load_context_file(backend: Backend, emit: Emit) -> str | None:
    """The first of AGENTS.md, CLAUDE.md, .cursorrules in the workdir, scanned for injection first."""

    for name in CONTEXT_FILES:
        try:
            data = backend.read_file(f"{backend.workdir.rstrip('/')}/{name}")
        except (FileNotFoundError, IsADirectoryError):
            continue
        text = data.decode("utf-8", errors="replace")
        findings = scan(text)
        if findings:
            emit(Event.CONTEXT_BLOCKED, Findings(name, [f.kind + ": " + f.excerpt for f in findings]))
            return blocked_marker(name, findings)
        if len(text) > CONTEXT_FILE_CAP:
            text = text[:CONTEXT_FILE_CAP] + f"\n[... {name} truncated at {CONTEXT_FILE_CAP} characters]"
        emit(Event.CONTEXT_FILE, ContextFile(name, len(text)))
        return f"Project instructions from {name} (the job's workdir):\n\n{text}"
    return None
