"""A run's ``ModelSource`` resolved into ``Models``: how to connect once the run row exists.

Resolving happens before the row is written (an unknown provider or a missing key is exit 2
with nothing left behind); connecting happens inside the run, with its event sink and deadline.
With a fallback list the row's ``model`` and the run's prices follow the provider that answered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.agent.auxiliary import Priced
from runner.agent.cassette import RecordingLLM, ReplayLLM, check_record_path
from runner.agent.credentials import PoolFactory
from runner.agent.fallback import FallbackLLM
from runner.agent.keys import KeySource
from runner.agent.loop import Pricing
from runner.agent.types import LLM, Message, Usage
from runner.config.jobfile import Job
from runner.run.model_choice import ModelChoice, build_client, choose, key_source
from runner.run.request import Given, ModelSource, Record, Replay
from runner.safety.redact import Redactor
from runner.settings import Settings
from runner.tools.context import Emit

if TYPE_CHECKING:
    from runner.agent.auxiliary import AuxiliaryModel
    from runner.config.model_options import ModelOptions

OnModel = Callable[[str], None]


@dataclass(frozen=True)
class Connected:
    """The run's model seam and the prices its answers cost."""

    llm: LLM
    pricing: Pricing
    auxiliary: AuxiliaryModel | None = None  # config.yaml's / the job's ``auxiliary:`` model, when set


class Models(Protocol):
    @property
    def secrets(self) -> tuple[str, ...]:
        """Key values: masked in events and kept out of the backend's env."""
        ...

    def connect(self, *, emit: Emit, deadline: float | None, redactor: Redactor, on_model: OnModel) -> Connected:
        """The model for this run; ``on_model`` hears when a fallback provider answered instead."""
        ...

    def auxiliary_model(self, *, emit: Emit) -> AuxiliaryModel | None:
        """config.yaml's / the job's ``auxiliary:`` model, a client of its own, for a call outside
        the loop (the smart-approval judge); None without one."""
        ...


@dataclass(frozen=True)
class Fixed:
    """One model seam known up front (a cassette, or the caller's own); free of charge."""

    llm: LLM
    secrets: tuple[str, ...] = ()

    def connect(self, *, emit: Emit, deadline: float | None, redactor: Redactor, on_model: OnModel) -> Connected:
        return Connected(self.llm, Pricing())

    def auxiliary_model(self, *, emit: Emit) -> AuxiliaryModel | None:
        return None  # a cassette or the caller's own model: no auxiliary provider


@dataclass(frozen=True)
class Providers:
    """The job's ``model:`` list: a credential pool per provider, a FallbackLLM over several."""

    job: str
    choices: tuple[ModelChoice, ...]
    sources: tuple[KeySource, ...]
    pools: PoolFactory  # attached to the run's emit and deadline when it connects
    record: Path | None
    secrets: tuple[str, ...]
    auxiliary: tuple[ModelChoice, KeySource] | None = None  # not when recording: the cassette must replay
    options: ModelOptions | None = None  # the job's model_options (over each provider's)
    idle_timeout: float | None = None

    @property
    def provider_names(self) -> tuple[str, ...]:
        """Every provider a run may call, each once: the model list's, then the auxiliary model's."""
        names = [c.provider_name for c in self.choices]
        if self.auxiliary is not None:
            names.append(self.auxiliary[0].provider_name)
        return tuple(dict.fromkeys(names))

    def connect(self, *, emit: Emit, deadline: float | None, redactor: Redactor, on_model: OnModel) -> Connected:
        self.pools.attach(emit=emit, deadline=deadline)
        chain = [
            (c.provider_name, build_client(c, k, emit=emit, options=self.options, idle_timeout=self.idle_timeout))
            for c, k in zip(self.choices, self.sources, strict=True)
        ]
        client: LLM = chain[0][1]
        pricing = self.choices[0].pricing
        if len(chain) > 1:
            fallback = FallbackLLM(chain, emit=emit)
            pricing = AnsweringPricing(chain=fallback, prices=tuple(c.pricing for c in self.choices))
            client = Watched(fallback, on_model)
        if self.record is not None:
            client = RecordingLLM(client, self.record, job=self.job, redact=redactor.redact_obj)
        return Connected(client, pricing, self._auxiliary(emit))

    def auxiliary_model(self, *, emit: Emit) -> AuxiliaryModel | None:
        return self._auxiliary(emit)

    def _auxiliary(self, emit: Emit) -> AuxiliaryModel | None:
        if self.auxiliary is None:
            return None

        choice, keys = self.auxiliary
        return Priced(build_client(choice, keys, emit=emit), choice.pricing, choice.provider_name)


def resolve(settings: Settings, job: Job, source: ModelSource) -> Models:
    """The models for ``source``; bad config (unknown provider, no key) raises here, before any row."""
    match source:
        case Given(llm):
            return Fixed(llm)
        case Replay(path):
            return Fixed(ReplayLLM(path))
        case Record(path):
            check_record_path(path)
            return _providers(settings, job, record=path)
    return _providers(settings, job, record=None)


def shipped_cassette(job: Job) -> Path | None:
    """A recording kept for the job (``cassettes/JOB.yaml`` or ``jobs/cassettes/JOB.yaml`` beside
    jobs.yaml), relative to the working folder when it lies below it: named when no model is set."""
    for folder in (job.base_dir / "cassettes", job.base_dir / "jobs" / "cassettes"):
        path = folder / f"{job.name}.yaml"
        if path.is_file():
            try:
                return path.relative_to(Path.cwd())
            except ValueError:
                return path
    return None


def _providers(settings: Settings, job: Job, *, record: Path | None) -> Providers:
    """A credential pool per provider of the job's list (shared state in runner.db)."""

    cassette = shipped_cassette(job)
    choices = tuple(choose(settings.config, ref, job=job.name, cassette=cassette) for ref in job.models)
    pools = PoolFactory(lambda: settings.store)
    last = len(choices) - 1  # only the last provider waits for a cooling key; the others hand over
    sources = tuple(key_source(c, job=job.name, pool_factory=pools, may_wait=i == last) for i, c in enumerate(choices))
    auxiliary = None
    ref = job.spec.auxiliary or settings.config.auxiliary
    if ref and record is None:
        aux = choose(settings.config, ref, job=job.name, key="auxiliary")
        auxiliary = (aux, key_source(aux, job=job.name, pool_factory=pools, may_wait=True))
        sources_all = (*sources, auxiliary[1])
    else:
        sources_all = sources
    secrets = tuple(v for keys in sources_all for v in keys.values())
    return Providers(
        job.name,
        choices,
        sources,
        pools,
        record,
        secrets,
        auxiliary,
        options=job.spec.model_options,
        idle_timeout=job.spec.idle_timeout,
    )


class _Chain(LLM, Protocol):
    """A model seam that says which provider of its list answered last (``FallbackLLM``)."""

    index: int


@dataclass(frozen=True)
class AnsweringPricing(Pricing):
    """Prices a reply at the rates of the fallback chain's provider that gave it.

    The loop prices each reply right after ``complete`` returns, when ``chain.index`` is the
    provider that answered.
    """

    chain: _Chain | None = None
    prices: tuple[Pricing, ...] = ()

    def cost(self, usage: Usage) -> float:
        if self.chain is None:
            return super().cost(usage)
        return self.prices[self.chain.index].cost(usage)


class Watched:
    """An LLM that reports its model to ``on_model`` when it changes (a fallback took over)."""

    def __init__(self, inner: _Chain, on_model: OnModel):
        self.inner, self.on_model = inner, on_model
        self.model = inner.model

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        max_tokens: int | None = None,
    ) -> Message:
        reply = self.inner.complete(messages, tools, timeout=timeout, max_tokens=max_tokens)
        if self.inner.model != self.model:
            self.model = self.inner.model
            self.on_model(self.model)
        return reply
