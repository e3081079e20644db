"""Pick the provider and model for a job and build the chat client for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.agent.anthropic import AnthropicClient
from runner.agent.auxiliary import Priced
from runner.agent.keys import Credential, KeySource, StaticKeys
from runner.agent.llm import ChatClient
from runner.agent.loop import Pricing
from runner.agent.profiles import profile_for
from runner.config.jobfile import Job
from runner.config.refs import resolve_key
from runner.errors import ConfigError
from runner.events import Emit, no_events

if TYPE_CHECKING:
    from runner.agent.auxiliary import AuxiliaryModel
    from runner.config.machine import Config, Provider
    from runner.config.model_options import ModelOptions

NO_MODEL = (
    "no model is configured for job {job}: set OPENAI_API_KEY (and OPENAI_BASE_URL for another "
    "OpenAI-compatible endpoint), or add a 'providers:' entry to {config}; "
    "or try the job offline with {replay}"
)


@dataclass(frozen=True)
class ModelChoice:
    provider_name: str
    provider: Provider
    model: str

    @property
    def native(self) -> bool:
        """Whether the provider speaks Anthropic's Messages API (not chat completions)."""

        return profile_for(self.provider.base_url, self.provider.profile).native

    @property
    def pricing(self) -> Pricing:
        """The provider's prices; on Anthropic's API, unset cache prices are Anthropic's own ratios
        (a cache read 0.1x the input price, a cache write 1.25x)."""
        p = self.provider.pricing
        cached, written = p.cached_input_per_mtok, p.cache_write_per_mtok
        if self.native:
            cached = p.input_per_mtok * 0.1 if cached is None else cached
            written = p.input_per_mtok * 1.25 if written is None else written
        return Pricing(p.input_per_mtok, p.output_per_mtok, cached, written)


def split_ref(config: Config, ref: str) -> tuple[str, str]:
    return config.split_model_ref(ref)


def choose(config: Config, ref: str, *, job: str, key: str = "model", cassette: Path | None = None) -> ModelChoice:
    """``default`` / ``NAME`` (a provider), ``NAME/model``, or ``org/model`` on the default provider;
    ``key``: the setting ``ref`` came from, for messages (``model``, ``auxiliary``); ``cassette``: a
    recording shipped for the job, named in the message when no model is configured at all."""
    name, model = split_ref(config, ref)
    provider = config.providers.get(name)
    if provider is None:
        if name == "default" and not config.providers:
            replay = f"`runner run-job {job} --replay {cassette}`" if cassette else "--replay CASSETTE"
            raise ConfigError(NO_MODEL.format(job=job, config=config.path or "config.yaml", replay=replay))
        known = ", ".join(sorted(config.providers)) or "(none)"
        if name != ref.partition("/")[0]:
            raise ConfigError(
                f"job {job}: {key}: {ref!r} names no provider, and as a model id it needs a 'default' "
                f"provider; configured: {known}"
            )
        raise ConfigError(f"job {job}: {key}: unknown provider {name!r}; configured: {known}")
    return ModelChoice(name, provider, model or provider.model)


def credentials(choice: ModelChoice, *, job: str) -> list[Credential]:
    creds = []
    missing = []
    for i, ref in enumerate(choice.provider.api_keys):
        label, value = resolve_key(ref, i)
        if value:
            creds.append(Credential(label, value))
        else:
            missing.append(label)
    if choice.provider.api_keys and not creds:
        raise ConfigError(
            f"job {job}: provider {choice.provider_name!r}: none of its API keys is set "
            f"(missing: {', '.join(missing)}); set OPENAI_API_KEY or fix 'api_keys:' in config.yaml"
        )
    return creds


def key_source(choice: ModelChoice, *, job: str, **kwargs: Any) -> KeySource:
    creds = credentials(choice, job=job)
    factory: Callable[..., KeySource] | None = kwargs.pop("pool_factory", None)
    if factory is not None and creds:  # even one key goes through the pool: cooldowns are shared
        return factory(choice, creds, **kwargs)
    return StaticKeys(creds[0] if creds else None)


def build_client(
    choice: ModelChoice,
    keys: KeySource,
    *,
    emit: Emit,
    options: ModelOptions | None = None,
    idle_timeout: float | None = None,
) -> Any:
    """The chat client for ``choice``: the provider's ``model_options`` under the job's ``options``;
    on Anthropic's Messages API (``profile: anthropic`` or its base URL) the native client."""

    p = choice.provider
    cls: type[ChatClient] = ChatClient
    extra: dict[str, Any] = {}
    if choice.native:
        cls, extra = AnthropicClient, {"cache": p.cache}
    return cls(
        base_url=p.base_url,
        model=choice.model,
        keys=keys,
        provider=choice.provider_name,
        request_timeout=p.request_timeout,
        max_retries=p.max_retries,
        retry_backoff=p.retry_backoff,
        headers=p.headers,
        emit=emit,
        idle_timeout=idle_timeout,
        stream=p.stream,
        options=p.model_options if options is None else options.over(p.model_options),
        max_tokens_field=p.max_tokens_field,
        profile=profile_for(p.base_url, p.profile, echo_reasoning=p.echo_reasoning),
        api_version=p.api_version,
        **extra,
    )


def context_budget(config: Config, job: Job) -> int:
    """Tokens the conversation may fill before pruning: ``context_budget:``, else 60% of the window."""
    if job.spec.context_budget:
        return job.spec.context_budget
    provider = config.providers.get(split_ref(config, job.models[0])[0])
    window = provider.context_window if provider is not None else 128_000
    return int(window * 0.6)


def side_model(config: Config, *, purpose: str) -> AuxiliaryModel:
    """The auxiliary model outside a run (the Curator's consolidation pass): config.yaml's
    ``auxiliary:``, else the ``default`` provider, priced at its rates; keys straight from config
    (no pool); ``purpose`` names it in messages."""

    choice = choose(config, config.auxiliary or "default", job=purpose, key="auxiliary")
    client = build_client(choice, key_source(choice, job=purpose), emit=no_events)
    return Priced(client, choice.pricing, choice.provider_name)
