"""One error base for everything runner raises on purpose.

Each subclass also subclasses the matching builtin, so callers that only know Python's
exceptions still catch them. The CLI maps ``exit_code`` to the process exit status and
prints ``str(error)`` as one line; anything that is not a RunnerError is a bug and keeps
its traceback. ``reason`` is the word a failed run's ledger row stores (``runs.reason``); each
subclass names its own, an instance may override it (``ModelError``).
"""

from __future__ import annotations


class RunnerError(Exception):
    """Base of all deliberate runner errors."""

    exit_code = 1
    reason: str = "error"


class UsageError(RunnerError, ValueError):
    """Bad input from the person: arguments, job names, files. Exit code 2."""

    exit_code = 2
    reason = "usage"


class ConfigError(UsageError):
    """jobs.yaml or config.yaml is invalid. Carries every problem found, one per line."""

    reason = "config"

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class TemplateError(UsageError):
    """A prompt template is missing, broken or uses an undefined variable."""

    reason = "template"


class BackendError(RunnerError, OSError):
    """The terminal backend itself failed (daemon down, host unreachable, image missing)."""

    reason = "backend"


class ModelError(RunnerError, RuntimeError):
    """The model provider refused or failed in a way retries did not fix."""

    reason = "model_error"

    def __init__(self, message: str, *, reason: str = "model_error", status: int | None = None):
        super().__init__(message)
        self.reason = reason
        self.status = status


class CassetteError(RunnerError, RuntimeError):
    """A replay cassette is missing, invalid or exhausted."""

    reason = "cassette"


class StoreError(RunnerError, RuntimeError):
    """The store could not be opened, migrated or written: runner.db (disk full, I/O error, a
    corrupt page) or a run's files under RUNNER_HOME (outputs, transcripts). Exit 1: a fault."""

    reason = "store_error"


class StoreStateError(StoreError):
    """runner.db cannot be used as it is (empty next to earlier runs, not a database, corrupt, not
    runner's, unreadable): nothing ran; the person restores a backup or moves the file aside. Exit 2."""

    exit_code = 2
    reason = "store_state"


class CheckpointError(RunnerError, RuntimeError):
    """A workdir checkpoint could not be taken or restored (git missing or failing, the shadow
    repository or the disk). A run records it and goes on; ``runs rollback`` ends with it (exit 1)."""

    reason = "checkpoint"

    def __init__(self, message: str, *, final: bool = False):
        super().__init__(message)
        self.final = final  # trying again in this run would not help (git missing, over the size cap)


class Tampered(RunnerError, PermissionError):
    """The run changed one of the runner's control files (jobs.yaml, config.yaml, ...)."""

    reason = "tampered"


class Blocked(RunnerError, PermissionError):
    """The job's ``pre_run`` is a command the approval policy does not let run."""

    reason = "blocked"


class ToolsUnavailable(RunnerError, RuntimeError):
    """An MCP server the job names (and config.yaml does not mark ``optional: true``) did not
    start: the run fails before its first model request."""

    reason = "tools_unavailable"


class AlreadyRunning(UsageError):
    """Another process holds an exclusive lock (e.g. a second ``runner serve``)."""

    reason = "alreadyrunning"


def failure_reason(exc: RunnerError) -> str:
    """The ``runs.reason`` of a run that ended with ``exc``: the run worker and serve's worker both use it."""
    return exc.reason
