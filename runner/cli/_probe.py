"""`runner doctor`'s provider checks: key variables set, base URL reachable, the model listed
(``GET /models``), and with ``--deep`` a one-token chat request. Each check is one result line.
The key goes where the provider's profile says (Azure's ``api-key``, Anthropic's ``x-api-key``),
with Azure's ``api-version``; Anthropic is asked at ``/v1/models`` and ``/v1/messages``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    detail: str


def probe_provider(name: str, provider: Any, models: set[str], *, deep: bool, environ: Any = None) -> ProbeResult:
    """Check provider ``name`` and the ``models`` jobs ask of it."""
    from runner.config.refs import resolve_key

    labels, key = [], None
    for i, ref in enumerate(provider.api_keys):
        label, value = resolve_key(ref, i, environ)
        if value is None:
            labels.append(label)
        elif key is None:
            key = value
    if labels:
        return ProbeResult(False, f"API key variable not set: {', '.join(labels)}")
    return _probe_http(provider, key, sorted(models | {provider.model}), deep=deep)


def _probe_http(provider: Any, key: str | None, models: list[str], *, deep: bool) -> ProbeResult:
    import httpx

    from runner.agent.llm import _split_query
    from runner.agent.profiles import Auth, profile_for
    from runner.host.tls import verify_for

    profile = profile_for(provider.base_url, provider.profile)
    base, query = _split_query(provider.base_url)
    if provider.api_version:
        query["api-version"] = provider.api_version
    if profile.native:  # the Messages API: {root}/v1/models, /v1/messages
        base = base.removesuffix("/v1") + "/v1"
    headers = dict(provider.headers)
    if key and profile.auth is Auth.API_KEY:
        headers["api-key"] = key
    elif key and profile.auth is Auth.X_API_KEY:
        headers.update({"x-api-key": key, "anthropic-version": "2023-06-01"})
    elif key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        with httpx.Client(
            headers=headers, params=query, timeout=PROBE_TIMEOUT_S, verify=verify_for(base)
        ) as http:
            listed = _listed_models(http, base)
            if deep:
                return _one_token(http, base, models[0], listed, native=profile.native)
    except httpx.HTTPError as exc:
        return ProbeResult(False, f"{base} unreachable: {type(exc).__name__}: {exc}"[:300])
    if isinstance(listed, ProbeResult):
        return listed
    if listed is None:
        return ProbeResult(True, f"{base} reachable (no /models list; use --deep to try {models[0]})")
    missing = [m for m in models if m not in listed]
    if missing:
        return ProbeResult(False, f"{base}: model {', '.join(missing)} not listed by /models ({len(listed)} models)")
    return ProbeResult(True, f"{base}: {', '.join(models)} listed")


def _listed_models(http: Any, base: str) -> set[str] | ProbeResult | None:
    """Model ids of ``GET /models``; None when the endpoint does not exist; a failed result for 401/403/5xx."""
    response = http.get(f"{base}/models")
    if response.status_code in (401, 403):
        return ProbeResult(False, f"{base}: the API key was refused (HTTP {response.status_code})")
    if response.status_code in (404, 405, 501):
        return None
    if response.status_code >= 400:
        return ProbeResult(False, f"{base}/models: HTTP {response.status_code}")
    try:
        return {str(m.get("id")) for m in response.json().get("data", []) if isinstance(m, dict)}
    except (ValueError, AttributeError):
        return None


def _one_token(http: Any, base: str, model: str, listed: Any, *, native: bool = False) -> ProbeResult:
    if isinstance(listed, ProbeResult):
        return listed
    body = {"model": model, "messages": [{"role": "user", "content": "Reply with OK."}], "max_tokens": 1}
    response = http.post(f"{base}/messages" if native else f"{base}/chat/completions", json=body)
    if response.status_code != 200:
        return ProbeResult(False, f"{base}: a one-token request to {model} got HTTP {response.status_code}")
    return ProbeResult(True, f"{base}: {model} answered a one-token request")
