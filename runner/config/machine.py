"""config.yaml: providers, keys, defaults for the machine. Keys come from env vars, never jobs.yaml."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from runner.config import yamlio
from runner.config.database import parse
from runner.config.families import Family
from runner.config.jobs import Duration, SinkItem
from runner.config.mcp import McpServer
from runner.config.model_options import MaxTokensField, ModelOptions
from runner.config.refs import SERVER_NAME
from runner.config.schedules import parse_timezone
from runner.config.strict import Strict
from runner.errors import ConfigError, UsageError
from runner.host import secrets


class ProviderPricing(Strict):
    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    cached_input_per_mtok: float | None = None  # cached prompt tokens; unset: input_per_mtok (anthropic: 0.1x)
    cache_write_per_mtok: float | None = None  # prompt tokens written to the cache; unset: input (anthropic: 1.25x)


class Cooldowns(Strict):
    auth_s: float = 300.0
    quota_s: float = 86400.0
    rate_limit_s: float = 60.0
    rate_limit_max_s: float = 3600.0
    rate_limit_retry_s: float = 1.0  # a 429 without a reset header: retry the same key once after this


class Provider(Strict):
    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4.1-mini"
    api_keys: list[str] = Field(default_factory=list)
    strategy: Literal["fill_first", "round_robin", "random", "least_used"] = "fill_first"
    pricing: ProviderPricing = Field(default_factory=ProviderPricing)
    context_window: int = 128_000
    request_timeout: float = 120.0
    max_retries: int = Field(3, ge=0, le=20)
    retry_backoff: float = Field(1.0, ge=0)
    max_wait: float = 120.0
    cooldowns: Cooldowns = Field(default_factory=Cooldowns)
    headers: dict[str, str] = Field(default_factory=dict)
    stream: bool = True  # responses arrive as server-sent events
    max_tokens_field: MaxTokensField = "auto"
    model_options: ModelOptions = Field(default_factory=ModelOptions)
    # the provider family's wire rules (runner/agent/profiles.py); unset: read from base_url
    profile: Family | None = None
    api_version: str | None = None  # Azure OpenAI's api-version query (e.g. 2024-10-21)
    echo_reasoning: bool | None = None  # send a turn's reasoning back as reasoning_content; None: the profile decides
    cache: bool = True  # anthropic: cache_control breakpoints on the system prompt, tools and last message

    @field_validator("api_keys")
    @classmethod
    def _keys_are_refs(cls, keys: list[str]) -> list[str]:
        for k in keys:
            if not isinstance(k, str) or not k:
                raise ValueError("api_keys entries must be 'env:NAME' or a literal key")
        return keys


class ServeConfig(Strict):
    max_parallel: int = Field(4, ge=1)
    shutdown_grace: float = Field(30.0, ge=0)
    heartbeat_s: float = Field(5.0, gt=0)
    kill_grace: float = Field(5.0, ge=0)  # SIGTERM -> SIGKILL for a timed-out or replaced run
    lease_s: float = Field(10.0, gt=0)  # the scheduler lease: a standby takes over this long after the leader died
    # script-only runs (agent: false) one worker process takes before it is replaced; 1: a process per run
    worker_max_runs: int = Field(100, ge=1)
    # the warm forkserver stops after this long without a worker or a run due within 30 s (and starts
    # again 30 s before the next); null: it runs as long as serve
    forkserver_idle_s: float | None = Field(60.0, gt=0)


class ExecutorConfig(Strict):
    """``executor:``: where serve's runs execute: ``local`` (its own worker processes) or ``celery``
    (``runner worker`` processes on any machine, through the broker; docs/distributed.md)."""

    type: Literal["local", "celery"] = "local"
    broker: str | None = None  # redis://HOST:PORT/DB (or env:NAME)
    heartbeat_s: float = Field(2.0, gt=0)  # a worker writes its runs' heartbeat this often
    lost_after_s: float = Field(20.0, gt=0)  # a run whose heartbeat is older is ``unknown`` (worker_lost)
    resend_s: float = Field(30.0, gt=0)  # a run no worker took this long after it was sent is sent again

    @model_validator(mode="after")
    def _broker(self) -> ExecutorConfig:
        if self.type == "celery" and not self.broker:
            raise ValueError("type celery needs broker (e.g. redis://127.0.0.1:6379/0)")
        if self.lost_after_s <= self.heartbeat_s:
            raise ValueError("lost_after_s must be longer than heartbeat_s")
        return self

    def broker_url(self) -> str:
        """The broker URL, ``env:NAME`` resolved."""
        value = self.broker or ""
        if value.startswith("env:"):
            resolved = secrets.getenv(value[4:])
            if not resolved:
                raise ConfigError(f"executor.broker: environment variable {value[4:]} is not set")
            return resolved
        return value


class CuratorConfig(Strict):
    enabled: bool = True
    interval_hours: float = 168
    min_idle_hours: float = 2
    stale_after_days: float = 30
    archive_after_days: float = 90
    suspect_after_failures: int = Field(3, ge=1)  # consecutive failed runs that make a skill suspect
    consolidate: bool = False  # a pass also asks the auxiliary model for a merge plan (runner curator apply)


class SkillsReviewConfig(Strict):
    """``skills_review:`` in config.yaml: the default for jobs without their own ``skills_review:``
    (``true`` / ``false`` is short for ``{enabled: ...}``), and when a review pass is worth it."""

    enabled: bool = False
    min_tool_calls: int = Field(5, ge=0)  # a run with fewer tool calls is not reviewed
    replays: bool = False  # review runs answered from a cassette too (else only with run-job --review)
    max_tokens: int = Field(2000, ge=100)  # the review reply's cap

    @model_validator(mode="before")
    @classmethod
    def _short(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value


class KanbanConfig(Strict):
    max_workers: int = Field(2, ge=1)
    lease_seconds: float = Field(300, gt=0)
    default_job: str | None = None
    poll_seconds: float = Field(1.0, gt=0)
    max_attempts: int = Field(3, ge=1)
    retry_backoff: float = Field(30.0, ge=0)


class SkillsConfig(Strict):
    dirs: list[str] = Field(default_factory=list)


class AlertsThrottle(Strict):
    """After the first alert of a failure streak, send every ``every``-th one, or one when
    ``min_interval`` has passed since the last sent; the rest are counted and reported."""

    every: int = Field(10, ge=1)
    min_interval: Duration = 3600.0


class DeliveryConfig(Strict):
    """HTTP sinks (webhook, slack, discord, telegram): attempts and backoff between them."""

    attempts: int = Field(3, ge=1, le=10)
    backoff: Duration = 10.0  # before the 2nd attempt; doubled each time
    max_backoff: Duration = 60.0  # also the cap on a 429's Retry-After
    timeout: Duration = 10.0


class SmtpConfig(Strict):
    host: str = "localhost"
    port: int = Field(25, ge=1, le=65535)
    user: str | None = None
    password: str | None = None  # env:NAME or a literal (then config.yaml must be chmod 600)
    from_: str = Field("runner@localhost", alias="from")
    starttls: bool = False
    ssl: bool = False
    timeout: Duration = 30.0


class TelegramConfig(Strict):
    bot_token: str = "env:TELEGRAM_BOT_TOKEN"
    base_url: str = "https://api.telegram.org"


SEARCH_URLS = {"brave": "https://api.search.brave.com/res/v1/web/search", "tavily": "https://api.tavily.com/search"}


class SearchConfig(Strict):
    """``search:``: the API behind the ``web_search`` tool (docs/delegation.md)."""

    provider: Literal["searxng", "brave", "tavily"] = "searxng"
    url: str | None = None  # searxng: the instance's base URL (required); brave/tavily: the API's default
    api_key: str | None = None  # brave/tavily: env:NAME (or a literal: then config.yaml must be chmod 600)
    timeout: Duration = 15.0

    @model_validator(mode="after")
    def _complete(self) -> SearchConfig:
        if self.provider == "searxng" and not self.url:
            raise ValueError("provider searxng needs url (the instance, e.g. http://127.0.0.1:8888)")
        if self.provider != "searxng" and not self.api_key:
            raise ValueError(f"provider {self.provider} needs api_key (e.g. env:{self.provider.upper()}_API_KEY)")
        if self.url is not None and not self.url.lower().startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        return self

    @property
    def endpoint(self) -> str:
        if self.provider == "searxng":
            return f"{(self.url or '').rstrip('/')}/search"
        return self.url or SEARCH_URLS[self.provider]
class RetentionConfig(Strict):
    """``retention:``: what `runner runs prune` and serve's daily pass remove. A run (with its events,
    approval audit, output file and transcript) goes when it is older than ``runs_older_than`` and
    is not among the newest ``keep_last`` runs of its job; runs that are queued or running, hold an
    open budget reservation or a pending approval, belong to an unfinished kanban task or are a
    job's newest success (``last_output``) are always kept."""

    runs_older_than: Duration | None = None  # e.g. 90d; None: serve prunes no runs
    keep_last: int = Field(20, ge=0)  # per job, whatever their age
    outputs: bool = True  # remove a pruned run's output file (RUNNER_HOME/outputs/JOB/RUN.md)
    transcripts: bool = True  # and its transcript (RUNNER_HOME/logs/runs/RUN.json)
    logs_older_than: Duration | None = None  # kanban attempt logs of finished tasks (RUNNER_HOME/logs/kanban)
    every: Duration = Field(86400.0, gt=0)  # how often serve applies it
    batch: int = Field(200, ge=1, le=10000)  # the most runs deleted per transaction by serve (the CLI: 2,000); one stops sooner at ~25 ms


class WebConfig(Strict):
    """``web:``: the dashboard (``runner web``, ``runner serve --web``; docs/web.md)."""

    bind: str = "127.0.0.1:9119"  # HOST:PORT; anything but loopback needs a token
    token: str | None = None  # env:NAME; else RUNNER_HOME/web-token (``runner web token``)
    read_only_token: str | None = None  # env:NAME; else RUNNER_HOME/web-token-readonly
    url: str | None = None  # how people reach the dashboard (https://runner.example.com): alerts link to it

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.lower().startswith(("http://", "https://")):
            raise ValueError(f"url {value!r} must start with http:// or https://")
        return value

    @field_validator("token", "read_only_token")
    @classmethod
    def _env_only(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("env:") or len(value) < 5):
            raise ValueError("must be env:NAME (or leave it out: runner web token writes RUNNER_HOME/web-token)")
        return value


class McpServeConfig(Strict):
    """``mcp_serve:``: ``runner mcp serve`` (docs/serve.md#runner-as-an-mcp-server)."""

    allow_approvals: bool = False  # expose answer_approval (never to the read-only token)


class Caps(Strict):
    """USD spend caps over a UTC day and a UTC month (None: no cap)."""

    daily_usd: float | None = Field(None, ge=0)
    monthly_usd: float | None = Field(None, ge=0)


class Budgets(Caps):
    """``budgets:``: fleet caps, a run's default reservation, and caps per provider and per job."""

    default_run_usd: float | None = Field(None, gt=0)  # reserved by a job without budget.max_cost_usd
    providers: dict[str, Caps] = Field(default_factory=dict)
    jobs: dict[str, Caps] = Field(default_factory=dict)


class Config(Strict):
    timezone: str = "UTC"
    providers: dict[str, Provider] = Field(default_factory=dict)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    curator: CuratorConfig = Field(default_factory=CuratorConfig)
    kanban: KanbanConfig = Field(default_factory=KanbanConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    alerts: list[SinkItem] = Field(default_factory=list)
    alerts_throttle: AlertsThrottle = Field(default_factory=AlertsThrottle)
    # a run waiting on a manual approval: these sinks are told once per request; None (unset): the
    # sinks its failure alerts go to (the job's on_failure:, else alerts:); false or []: nobody
    alerts_waiting: list[SinkItem] | Literal[False] | None = None
    delivery: DeliveryConfig = Field(default_factory=DeliveryConfig)
    smtp: SmtpConfig | None = None
    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    search: SearchConfig | None = None
    auxiliary: str | None = None  # PROVIDER[/MODEL] for side calls (context summaries)
    skills_review: SkillsReviewConfig = Field(default_factory=SkillsReviewConfig)
    budgets: Budgets = Field(default_factory=Budgets)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    log_format: Literal["text", "json"] | None = None  # serve's log lines; None: text (RUNNER_LOG_FORMAT wins)
    web: WebConfig = Field(default_factory=WebConfig)
    mcp_serve: McpServeConfig = Field(default_factory=McpServeConfig)
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)
    tools_dirs: list[str] = Field(default_factory=list)  # operator tool folders (relative: to config.yaml's)
    # the store: sqlite:///PATH or postgresql://user@host/name (RUNNER_DATABASE_URL wins); default RUNNER_HOME/runner.db
    database: str | None = None
    path: str | None = None

    def split_model_ref(self, ref: str) -> tuple[str, str]:
        """(provider name, model or "") of a jobs.yaml ``model:`` entry.

        ``NAME`` is a provider; ``NAME/model`` is a provider and its model only when NAME names a
        configured provider; otherwise a text with a slash is a model id for the ``default``
        provider (``meta-llama/Llama-3.1-8B-Instruct``)."""
        if ref in self.providers:
            return ref, ""
        name, slash, model = ref.partition("/")
        if slash and name in self.providers:
            return name, model
        if slash and name and model:
            return "default", ref
        return ref, ""

    @field_validator("mcp_servers")
    @classmethod
    def _server_names(cls, value: dict[str, McpServer]) -> dict[str, McpServer]:
        for name in value:
            if not SERVER_NAME.match(name):
                raise ValueError(f"server name {name!r} must match {SERVER_NAME.pattern}")
        return value

    @field_validator("database")
    @classmethod
    def _database(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse(value, what="database")
            except UsageError as exc:
                raise ValueError(str(exc).removeprefix("database: ")) from None
        return value

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        parse_timezone(value)
        return value


def _env_provider(environ: dict[str, str]) -> Provider | None:
    keys: list[str] = []
    if environ.get("OPENAI_API_KEY"):
        keys.append("env:OPENAI_API_KEY")
    for i, _ in enumerate(k for k in environ.get("OPENAI_API_KEYS", "").split(",") if k.strip()):
        keys.append(f"envlist:OPENAI_API_KEYS:{i}")
    base_url = environ.get("OPENAI_BASE_URL")
    if not keys and not base_url:
        return None
    data: dict[str, Any] = {"api_keys": keys}
    if base_url:
        data["base_url"] = base_url
    if environ.get("RUNNER_MODEL"):
        data["model"] = environ["RUNNER_MODEL"]
    return Provider(**data)


def load_config(path: Path, environ: dict[str, str] | None = None) -> Config:
    """Load config.yaml (absent is fine) and add the env fallback provider ``default``."""
    env = dict(secrets.environ() if environ is None else environ)
    data: dict[str, Any] = {}
    if path.exists():
        loaded = yamlio.load_file(path)
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        data = loaded or {}
    try:
        config = Config(**data, path=str(path))
    except ValidationError as exc:
        raise ConfigError([f"{path}: {_loc(e['loc'])}: {e['msg']}" for e in exc.errors()]) from None
    if path.exists() and has_literal_keys(config):
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UsageError(f"{path} holds literal API keys and is readable by others; run: chmod 600 {path}")
    if "default" not in config.providers:
        fallback = _env_provider(env)
        if fallback is not None:
            providers = dict(config.providers)
            providers["default"] = fallback
            config = config.model_copy(update={"providers": providers})
    elif not config.providers["default"].api_keys and env.get("OPENAI_API_KEY"):
        providers = dict(config.providers)
        providers["default"] = providers["default"].model_copy(update={"api_keys": ["env:OPENAI_API_KEY"]})
        config = config.model_copy(update={"providers": providers})
    return config


def has_literal_keys(config: Config) -> bool:
    if any(not k.startswith(("env:", "envlist:")) for p in config.providers.values() for k in p.api_keys):
        return True
    password = config.smtp.password if config.smtp else None
    token = config.telegram.bot_token
    search_key = config.search.api_key if config.search else None
    literal = [v for v in (password, search_key) if v and not v.startswith("env:")]
    return bool(literal) or not token.startswith("env:")


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)
