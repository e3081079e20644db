"""The credential pool: a provider's API keys, with state shared by every process through runner.db.

One row per (provider, fingerprint) in the ``credentials`` table; the raw key never leaves the
process that read it from the environment. Every read-then-write is one ``BEGIN IMMEDIATE``
transaction, so two workers never pick from a stale view of cooldowns.

A ``CredentialPool`` is the ``KeySource`` of one run for one provider:

- ``current()`` keeps the run's key (sticky, so provider prompt caches stay warm) while it is
  usable, else picks one by the provider's strategy; when every key is cooling it waits for the
  soonest one if that fits the run's remaining time and ``max_wait``, else raises
  ``ModelError(reason="credentials_exhausted")``; when every key is dead it raises at once
  (``credentials_dead``), naming the fingerprints.
- ``failed()`` turns an HTTP error into a cooldown (``runner.agent.cooldowns.classify``) and answers
  ``ROTATE``: rotations never use the chat client's retry budget.

Every selection change, cooldown, wait and death is a run event (``emit``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from runner.agent.cooldowns import KeyVerdict, classify
from runner.agent.keys import Action, Credential
from runner.agent.profiles import ErrorKind, error_message
from runner.config.machine import Cooldowns
from runner.config.refs import resolve_key
from runner.config.schedules import format_duration
from runner.errors import ModelError, UsageError
from runner.events import Credential as Info
from runner.events import CredentialsWait, Emit, Event, no_events
from runner.safety.redact import Redactor
from runner.store import Store, keys
from runner.store.keys import KeyFailure, KeyRow, KeyStatus

if TYPE_CHECKING:
    from runner.config.machine import Config, Provider

MIN_WAIT = 0.25  # never spin: a wait for a cooling key is at least this long


def ts_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def iso_ts(text: str | None) -> float:
    return datetime.fromisoformat(text).timestamp() if text else 0.0


def usable(row: KeyRow, now: float) -> bool:
    return row.status is not KeyStatus.DEAD and iso_ts(row.cooldown_until) <= now


def describe(row: KeyRow, now: float) -> str:
    """``fingerprint (label): state`` for error messages; never the key."""
    what = f"{row.fingerprint} ({row.label})"
    code = f"HTTP {row.last_error_code}" if row.last_error_code else "no error"
    if row.status is KeyStatus.DEAD:
        return f"{what}: dead after {code}"
    left = iso_ts(row.cooldown_until) - now
    if left > 0:
        return f"{what}: cooling {format_duration(max(1.0, left))} after {code}"
    return f"{what}: ok"


def sync(store: Store, provider: str, creds: Sequence[Credential], *, now: float | None = None) -> None:
    """Make sure each key has a row (by fingerprint); keep labels and config order current."""
    keys.sync(store, provider, [(c.fingerprint, c.label) for c in creds], ts_iso(time.time() if now is None else now))


def sync_config(store: Store, config: Config, *, now: float | None = None) -> None:
    """Rows for every configured key whose value is set, so ``creds list`` shows keys not yet used."""
    for name, provider in config.providers.items():
        creds = []
        for i, ref in enumerate(provider.api_keys):
            label, value = resolve_key(ref, i)
            if value:
                creds.append(Credential(label, value))
        if creds:
            sync(store, name, _unique(creds), now=now)


@dataclass(frozen=True)
class CredentialState:
    """One row of ``runner creds list``."""

    provider: str
    label: str
    fingerprint: str
    status: KeyStatus  # cooling only while the cooldown lasts
    cooldown_until: str | None
    cooldown_left_s: float
    request_count: int
    success_count: int
    last_used_at: str | None
    last_error_code: int | None
    last_error_message: str | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def list_credentials(store: Store, *, now: float | None = None) -> list[CredentialState]:
    now = time.time() if now is None else now
    out = []
    for row in keys.all_keys(store):
        left = max(0.0, iso_ts(row.cooldown_until) - now)
        dead = row.status is KeyStatus.DEAD
        out.append(
            CredentialState(
                provider=row.provider,
                label=row.label,
                fingerprint=row.fingerprint,
                status=KeyStatus.DEAD if dead else (KeyStatus.COOLING if left > 0 else KeyStatus.OK),
                cooldown_until=row.cooldown_until if left > 0 else None,
                cooldown_left_s=round(left, 3),
                request_count=row.request_count,
                success_count=row.success_count,
                last_used_at=row.last_used_at,
                last_error_code=row.last_error_code,
                last_error_message=row.last_error_message,
            )
        )
    return out


def reset(
    store: Store, *, fingerprint: str | None = None, provider: str | None = None, everything: bool = False
) -> int:
    """Clear cooldowns, dead marks and strikes (counts stay). Returns how many rows were reset."""
    if sum(x is not None and x is not False for x in (fingerprint, provider, everything)) != 1:
        raise UsageError("creds reset: give exactly one of FINGERPRINT, --provider P or --all")
    return keys.reset(store, fingerprint=fingerprint, provider=provider)


def _unique(creds: Sequence[Credential]) -> list[Credential]:
    seen: dict[str, Credential] = {}
    for cred in creds:
        seen.setdefault(cred.fingerprint, cred)
    return list(seen.values())


class CredentialPool:
    """A ``KeySource`` over one provider's keys, for one run. State lives in runner.db."""

    def __init__(
        self,
        store: Store,
        provider: str,
        creds: Sequence[Credential],
        *,
        strategy: str = "fill_first",
        cooldowns: Cooldowns | None = None,
        max_wait: float = 120.0,
        may_wait: bool = True,
        emit: Emit | None = None,
        deadline: float | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ):
        if not creds:
            raise ValueError("a credential pool needs at least one key")
        self.store = store
        self.provider = provider
        self.creds = {c.fingerprint: c for c in _unique(creds)}
        self.strategy = strategy
        if cooldowns is None:
            cooldowns = Cooldowns()
        self.rules = cooldowns
        self.max_wait = max_wait
        self.may_wait = may_wait
        self.emit: Emit = emit or no_events
        self.deadline = deadline
        self.clock, self.monotonic, self.sleep = clock, monotonic, sleep
        self.rng = rng or random.Random()
        self.redact = Redactor(self.values(), include_env=False)
        self._sticky: str | None = None
        self._why_rotate = ""
        self._waited = 0.0  # seconds spent waiting for keys since the last success
        self._last: dict[str, tuple[ErrorKind | None, str]] = {}  # fingerprint: this run's last failure of it
        sync(store, provider, list(self.creds.values()), now=clock())

    def attach(self, *, emit: Emit | None = None, deadline: float | None = None) -> None:
        """Give the pool the run's event sink and its deadline (``time.monotonic()`` based)."""
        if emit is not None:
            self.emit = emit
        self.deadline = deadline

    def values(self) -> list[str]:
        return [c.value for c in self.creds.values()]

    # -- KeySource ------------------------------------------------------------------------
    def current(self) -> Credential | None:
        while True:
            now = self.clock()
            chosen, rows = self._select(now)
            if chosen is not None:
                previous, self._sticky = self._sticky, chosen.fingerprint
                if previous is None:
                    self.emit(Event.CREDENTIAL_SELECTED, self._info(chosen, strategy=self.strategy))
                elif previous != self._sticky:
                    info = self._info(chosen, from_=previous, reason=self._why_rotate or "not usable")
                    self.emit(Event.CREDENTIAL_ROTATED, info)
                self._why_rotate = ""
                return self.creds[chosen.fingerprint]
            self._wait_or_raise(rows, now)

    def succeeded(self, cred: Credential | None) -> None:
        self._waited = 0.0
        if cred is None:
            return
        keys.count_success(self.store, self.provider, cred.fingerprint)

    def failed(
        self, cred: Credential | None, status: int, headers: Mapping[str, str], body: str, *, kind: ErrorKind | None = None
    ) -> Action:
        if cred is None or cred.fingerprint not in self.creds:
            return Action.FAIL
        now = self.clock()
        message = self.redact(error_message(body))[:300]
        verdicts: list[KeyVerdict] = []

        def decide(row: KeyRow) -> KeyFailure:
            verdict = classify(status, headers, body, row, self.rules, now, kind=kind)
            verdicts.append(verdict)
            until = ts_iso(now + verdict.seconds) if verdict.seconds > 0 else row.cooldown_until
            return KeyFailure(
                verdict.status, until, status, message, ts_iso(now), verdict.auth_strikes, verdict.rate_limit_strikes
            )

        failure = keys.record_failure(self.store, self.provider, cred.fingerprint, decide)
        self._last[cred.fingerprint] = (kind, f"HTTP {status}: {message}")
        verdict, until = verdicts[0], failure.cooldown_until
        self._report(cred, status, verdict, until, message)
        return Action.ROTATE

    # -- internals ------------------------------------------------------------------------
    def _select(self, now: float) -> tuple[KeyRow | None, list[KeyRow]]:
        """One transaction: read the provider's rows, keep or pick a key, count the request."""

        def pick(rows: list[KeyRow]) -> tuple[KeyRow, bool] | None:
            ok = [r for r in rows if usable(r, now)]
            if not ok:
                return None
            sticky = next((r for r in ok if r.fingerprint == self._sticky), None)
            return (sticky, False) if sticky else (self._pick(ok), True)

        return keys.choose(self.store, self.provider, set(self.creds), pick, ts_iso(now))

    def _pick(self, ok: list[KeyRow]) -> KeyRow:
        if self.strategy == "random":
            return self.rng.choice(ok)
        if self.strategy == "least_used":
            return min(ok, key=lambda r: (r.request_count, r.position))
        if self.strategy == "round_robin":
            return min(ok, key=lambda r: (r.selected_at or "", r.position))
        return min(ok, key=lambda r: r.position)  # fill_first

    def _wait_or_raise(self, rows: list[KeyRow], now: float) -> None:
        said_keys = "; ".join(describe(r, now) for r in sorted(rows, key=lambda r: r.position))
        live = [r for r in rows if r.status is not KeyStatus.DEAD]
        if not live:
            raise ModelError(
                f"{self.provider}: every API key is dead (failed authentication again after its cooldown): {said_keys}. "
                f"Fix the keys, then: runner creds reset --provider {self.provider}",
                reason="credentials_dead",
            )
        soonest = min(live, key=lambda r: iso_ts(r.cooldown_until))
        free_at = iso_ts(soonest.cooldown_until)
        wait = max(MIN_WAIT, free_at - now)
        remaining = self.deadline - self.monotonic() if self.deadline is not None else float("inf")
        budget = self.max_wait - self._waited
        if self.may_wait and wait <= budget and wait <= remaining:
            waiting = CredentialsWait(self.provider, round(wait, 3), soonest.fingerprint, said_keys)
            self.emit(Event.CREDENTIALS_WAIT, waiting)
            self.sleep(wait)
            self._waited += wait
            return
        if not self.may_wait:
            why = "a fallback provider follows, so this one does not wait"
        elif wait > budget:
            why = f"longer than max_wait ({self.max_wait:g}s{', part already spent' if self._waited else ''})"
        else:
            why = f"longer than the run's remaining time ({max(0.0, remaining):.0f}s)"

        reason, said = self._cause(live)
        hint = ""
        if reason in ("no_credit", "auth_failed"):
            fix = "add credits" if reason == "no_credit" else "fix the key"
            hint = f"; {fix}, then: runner creds reset --provider {self.provider}"
        raise ModelError(
            f"{self.provider}: {said}{'; ' if said else ''}all API keys are cooling down: {said_keys}; the first frees at "
            f"{ts_iso(free_at)} (in {format_duration(max(1.0, free_at - now))}), {why}{hint}",
            reason=reason,
        )

    def _cause(self, rows: list[KeyRow]) -> tuple[str, str]:
        """The run reason and the provider's own words for why no key is usable: this run's last
        failure of each key (else the key's stored last error). One kind for every key names it
        (``auth_failed``, ``no_credit``, ``rate_limited``); a mix is ``credentials_exhausted``."""
        kinds: set[ErrorKind | None] = set()
        said = ""
        for row in rows:
            kind, words = self._last.get(row.fingerprint, (None, ""))
            if not words and row.last_error_code:
                code = int(row.last_error_code)
                kind = {401: ErrorKind.BAD_KEY, 403: ErrorKind.BAD_KEY, 402: ErrorKind.NO_CREDIT, 429: ErrorKind.RATE_LIMIT}.get(code)
                words = f"HTTP {code}: {row.last_error_message or ''}".rstrip(": ")
            kinds.add(kind)
            said = said or words
        reasons = {ErrorKind.BAD_KEY: "auth_failed", ErrorKind.NO_CREDIT: "no_credit", ErrorKind.RATE_LIMIT: "rate_limited"}
        only = kinds.pop() if len(kinds) == 1 else None
        return reasons.get(only, "credentials_exhausted") if only else "credentials_exhausted", said

    def _report(self, cred: Credential, status: int, verdict: KeyVerdict, until: str | None, message: str) -> None:
        info = Info(self.provider, cred.label, cred.fingerprint, http_status=status, kind=verdict.kind, error=message)
        if verdict.kind == "retry_same":
            wait = self.rules.rate_limit_retry_s
            self.emit(Event.CREDENTIAL_RETRY, replace(info, wait_s=wait))
            self.sleep(wait)
            return
        self._why_rotate = f"{cred.fingerprint}: HTTP {status} ({verdict.kind})"
        if verdict.status is KeyStatus.DEAD:
            self.emit(Event.CREDENTIAL_DEAD, info)
        elif verdict.seconds > 0:
            self.emit(Event.CREDENTIAL_COOLDOWN, replace(info, seconds=round(verdict.seconds, 3), until=until))

    def _info(self, row: KeyRow, **extra: Any) -> Info:
        return Info(self.provider, row.label, row.fingerprint, **extra)


class ProviderChoice(Protocol):
    """The provider a run chose (``runner.run.model_choice.ModelChoice``): all a pool needs of it."""

    @property
    def provider_name(self) -> str: ...

    @property
    def provider(self) -> Provider: ...


class PoolFactory:
    """Builds one run's pools (one per provider of the job's model list), then attaches the
    run's event sink and deadline to all of them once the run row exists."""

    def __init__(self, open_store: Callable[[], Store], **pool_kwargs: Any):
        self.open_store = open_store
        self.pool_kwargs = pool_kwargs
        self.pools: list[CredentialPool] = []

    def __call__(self, choice: ProviderChoice, creds: list[Credential], *, may_wait: bool = True) -> CredentialPool:
        p = choice.provider
        pool = CredentialPool(
            self.open_store(),
            choice.provider_name,
            creds,
            strategy=p.strategy,
            cooldowns=p.cooldowns,
            max_wait=p.max_wait,
            may_wait=may_wait,
            **self.pool_kwargs,
        )
        self.pools.append(pool)
        return pool

    def attach(self, *, emit: Emit, deadline: float | None) -> None:
        for pool in self.pools:
            pool.attach(emit=emit, deadline=deadline)
