"""``run-job``'s validated snapshot of jobs.yaml and config.yaml: a run without pydantic.

Importing pydantic and building the job and config models is about a third of a one-turn
``run-job`` (~0.12 s of ~0.33 s). After a full validation, ``attach`` writes the validated models
in their plain form (``runner.config.plain``) to ``RUNNER_HOME/cache/run-<hash of the two
paths>.json`` with a key over everything that validation read:

* the bytes of jobs.yaml and of config.yaml (or its absence), and config.yaml's mode (a file
  with literal keys must not be readable by others);
* what ``load_config`` takes from the environment: ``OPENAI_BASE_URL`` and ``RUNNER_MODEL``, and
  whether ``OPENAI_API_KEY`` is set and how many ``OPENAI_API_KEYS`` entries there are (never a
  key's value);
* runner's own source files (``listing.code_stamp``), pydantic's install and the Python version.

The next ``run-job`` with the same key thaws the snapshot instead of validating, then runs every
job through ``jobfile.check_job``, the checks beyond the schema (schedule, prompt template,
pre_run script, workdir, backend, toolsets, ``context_from``), exactly as a full validation
does: a deleted template or script is refused on both paths. Any other difference (a stale,
unreadable or malformed snapshot) means a full validation, which reports errors as always and
writes a new snapshot. ``run-job`` runs on the plain form after a full validation too, so the
two paths run the same objects.

The snapshot holds no secret. When the validated files hold one (a literal key in config.yaml,
a token or a secret-named entry the run's redactor would mask, a webhook whose URL, headers or
signing secret carry one), no snapshot is written: those runs validate in full every time. Keep
secrets in the environment (``env:NAME``) for the fast start.

The snapshot is as trusted as jobs.yaml: a run's tools may not write ``RUNNER_HOME``
(``runner.safety.control``), the file is 0600 in a 0700 folder, and the tamper check at the end
of a run covers it too (``Used.tampered``): the snapshot this run read or wrote, found with its
own key but other content, ends the run ``tampered`` and is removed, so the next run validates in
full. (A snapshot with another key is another process's legitimate one.)
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.config.jobfile import JobsFile, OwnNames, check_jobs
from runner.config.plain import Unfreezable, freeze, thaw

if TYPE_CHECKING:
    from runner.config.machine import Config

VERSION = 1


class Settings(Protocol):
    """What ``attach`` needs of ``runner.settings.Settings``; ``config`` and ``jobs`` are its
    cached properties, which ``attach`` fills."""

    home: Path
    jobs_path: Path
    config_path: Path
    config_given: bool
    snapshot: Used | None

    def own_tool_names(self) -> set[str]: ...

    @property
    def config(self) -> Config: ...

    @property
    def jobs(self) -> JobsFile: ...


@dataclass(frozen=True)
class Used:
    """The snapshot a run read or wrote: its file, key and the sha256 of its bytes."""

    path: Path
    key: str
    digest: str

    def tampered(self) -> bool:
        """Whether the file now holds other content under the same key (then it is removed)."""
        try:
            data = self.path.read_bytes()
            same_key = json.loads(data).get("key") == self.key
        except (OSError, ValueError, AttributeError):
            return False  # gone or replaced by another process: nothing of this run's
        if not same_key or hashlib.sha256(data).hexdigest() == self.digest:
            return False
        self.path.unlink(missing_ok=True)
        return True


class Source(Enum):
    """Where ``attach`` got the settings from."""

    SNAPSHOT = "snapshot"  # thawed from a current snapshot, no pydantic
    VALIDATED = "validated"  # validated in full, snapshot written, plain form attached
    SECRET = "secret"  # validated in full, plain form attached, no snapshot: the files hold a secret
    FULL = "full"  # validated in full, left as pydantic models (not snapshotable, or no key)


def snapshot_file(settings: Settings) -> Path:
    pair = f"{settings.jobs_path.resolve()}\0{settings.config_path.resolve()}"
    return settings.home / "cache" / f"run-{hashlib.sha256(pair.encode()).hexdigest()[:16]}.json"


def key(settings: Settings) -> str:
    """The hash of everything a full validation of the two files reads (OSError: jobs.yaml unreadable)."""
    from runner import secrets
    from runner.config.listing import files_key

    h = hashlib.sha256()
    h.update(f"{VERSION}\0{sys.version}\0{settings.jobs_path.resolve()}\0".encode())
    h.update(files_key(settings.jobs_path, settings.config_path).encode())  # both files and runner's code
    try:
        h.update(f"\0mode {settings.config_path.stat().st_mode}".encode())
    except FileNotFoundError:
        h.update(b"\0(no config.yaml)")
    env = secrets.environ()
    facts = {
        "OPENAI_BASE_URL": env.get("OPENAI_BASE_URL"),
        "RUNNER_MODEL": env.get("RUNNER_MODEL"),
        "OPENAI_API_KEY": bool(env.get("OPENAI_API_KEY")),
        "OPENAI_API_KEYS": sum(1 for k in env.get("OPENAI_API_KEYS", "").split(",") if k.strip()),
    }
    h.update(json.dumps(facts, sort_keys=True).encode())
    h.update(_pydantic_stamp().encode())
    return h.hexdigest()


def _pydantic_stamp() -> str:
    """pydantic's installed version file (its path, size and mtime), found without importing it."""
    from importlib.util import find_spec

    spec = find_spec("pydantic")
    if spec is None or spec.origin is None:
        return "(no pydantic)"
    version = Path(spec.origin).with_name("version.py")
    st = version.stat()
    return f"{version}:{st.st_size}:{st.st_mtime_ns}"


def attach(settings: Settings) -> Source:
    """Give ``settings`` its validated ``config`` and ``jobs`` in plain form: from a current
    snapshot, else by a full validation (ConfigError/UsageError as always) that writes one."""
    if settings.config_given and not settings.config_path.exists():
        return Source.FULL  # the full path reports the missing --config file
    try:
        wanted = key(settings)
    except OSError:
        return Source.FULL  # jobs.yaml unreadable: the full path says so
    path = snapshot_file(settings)
    found = _read(path, wanted)
    if found is not None:
        config, specs, digest = found
        own = OwnNames(settings.own_tool_names)
        _attach(settings, config, check_jobs(settings.jobs_path, specs, default_tz=config.timezone, own=own))
        settings.snapshot = Used(path, wanted, digest)
        return Source.SNAPSHOT
    config_model, jobs_model = settings.config, settings.jobs  # the full validation
    try:
        tree = {"config": freeze(config_model), "jobs": {n: freeze(j.spec) for n, j in jobs_model.jobs.items()}}
    except Unfreezable:
        return Source.FULL
    secret = holds_secret(config_model, tree)
    if not secret and key(settings) == wanted:  # (and the files did not change while validated)
        written = _write(path, {"version": VERSION, "key": wanted, **tree})
        settings.snapshot = Used(path, wanted, written) if written else None
    plain_jobs = {n: replace(j, spec=thaw(tree["jobs"][n])) for n, j in jobs_model.jobs.items()}
    _attach(settings, thaw(tree["config"]), JobsFile(path=jobs_model.path, jobs=plain_jobs))
    return Source.SECRET if secret else Source.VALIDATED


def holds_secret(config: Config, tree: dict[str, Any]) -> bool:
    """Whether the validated files hold something a snapshot must not copy into RUNNER_HOME."""
    from runner.config.machine import has_literal_keys
    from runner.config.sinks import label, parse_sink
    from runner.safety.redact import Redactor

    if has_literal_keys(config) or any(
        not v.startswith("env:") for s in config.mcp_servers.values() for v in s.headers.values()
    ):
        return True
    parts = [tree["config"], *tree["jobs"].values()]
    for item in _sinks(parts):
        sink = parse_sink(item)
        if sink.secret or sink.headers or label(sink) != (f"{sink.kind}:{sink.target}" if sink.target else sink.kind):
            return True
    text = "\n".join(_user_text(parts))
    return Redactor()(text) != text


SINK_FIELDS = ("deliver", "on_failure", "alerts")


def _sinks(tree: Any) -> list[Any]:
    """The sink entries (``deliver``, ``on_failure``, ``alerts``) of a frozen tree, thawed."""
    if isinstance(tree, list):
        return [s for v in tree for s in _sinks(v)]
    if not isinstance(tree, dict):
        return []
    if "m" in tree:
        found: list[Any] = []
        for name, v in tree["f"].items():
            found += [thaw(item) for item in v] if name in SINK_FIELDS and isinstance(v, list) else _sinks(v)
        return found
    inner = tree["d"].values() if "d" in tree else tree["t"]
    return [s for v in inner for s in _sinks(v)]


def _user_text(tree: Any) -> list[str]:
    """The text the operator wrote into a frozen tree: every value, and each entry of a mapping
    with its key (``password: x`` is a secret where ``x`` alone is not); runner's own field
    names are left out (``max_tokens_field: auto`` is not a token)."""
    if isinstance(tree, str):
        return [tree]
    if isinstance(tree, list):
        return [s for v in tree for s in _user_text(v)]
    if not isinstance(tree, dict):
        return []
    if "m" in tree:
        return [s for v in tree["f"].values() for s in _user_text(v)]
    if "t" in tree:
        return _user_text(tree["t"])
    entries = tree["d"]
    pairs = [json.dumps({k: v}) for k, v in entries.items() if not isinstance(v, dict)]
    return pairs + [k for k in entries] + [s for v in entries.values() for s in _user_text(v)]


def _read(path: Path, wanted: str) -> tuple[Any, dict[str, Any], str] | None:
    """The thawed config and job specs of the snapshot at ``path`` and the sha256 of its bytes,
    if it is well formed and has the key ``wanted`` (a malformed one is stale, not an error)."""
    try:
        data = path.read_bytes()
        doc = json.loads(data)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != VERSION or doc.get("key") != wanted:
        return None
    if not isinstance(doc.get("jobs"), dict) or "config" not in doc:
        return None
    try:
        specs = {name: thaw(tree) for name, tree in doc["jobs"].items()}
        return thaw(doc["config"]), specs, hashlib.sha256(data).hexdigest()
    except (ValueError, TypeError):
        return None


def _write(path: Path, doc: dict[str, Any]) -> str:
    """Write the snapshot; the sha256 of its bytes, or "" when it could not be written (a full
    disk or a read-only home costs the next run a full validation, nothing else)."""
    from runner.atomic import write_private

    text = json.dumps(doc, separators=(",", ":"))
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(path, text)
    except OSError:
        return ""
    return hashlib.sha256(text.encode()).hexdigest()


def _attach(settings: Settings, config: Any, jobs: JobsFile) -> None:
    vars(settings)["config"] = config  # the cached_property slots of Settings
    vars(settings)["jobs"] = jobs
