"""Provider profiles: what each provider family needs on the wire, in one place.

A ``Profile`` says, for one family of chat APIs (OpenAI, Azure OpenAI, Gemini, Anthropic,
Mistral, DeepSeek, Moonshot/Kimi, Zhipu/GLM, Groq, OpenRouter, Together, Fireworks, vLLM,
llama.cpp, Ollama, LM Studio, TGI):

- which fields of an assistant turn go back on the next request: unknown fields the provider
  sent (Gemini's ``extra_content.google.thought_signature`` on a tool call, OpenRouter's
  ``reasoning_details``) are kept and echoed verbatim unless the profile drops them;
- whether the turn's reasoning is sent back, and under which name (Kimi and GLM require
  ``reasoning_content`` on assistant tool-call turns; DeepSeek rejects it);
- the tool-call id rule (Mistral takes 9 letters and digits: ids made by another provider are
  renamed, the same way in the call and in its answer, when a run falls back to Mistral);
- how the key is sent (Azure: ``api-key``; the rest: ``Authorization: Bearer``) and Azure's
  ``api-version`` query;
- what an error means (``ErrorKind``): a bad key, no credit, moderation, a content filter, a
  rate limit, an overload, a bad request.

The profile is chosen from the base URL (``profile_for``) and can be named per provider in
config.yaml (``profile: gemini``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit


class Family(StrEnum):
    OPENAI = "openai"
    AZURE = "azure"
    GEMINI = "gemini"
    ANTHROPIC = "anthropic"
    MISTRAL = "mistral"
    DEEPSEEK = "deepseek"
    MOONSHOT = "moonshot"
    ZHIPU = "zhipu"
    GROQ = "groq"
    OPENROUTER = "openrouter"
    TOGETHER = "together"
    FIREWORKS = "fireworks"
    VLLM = "vllm"
    LLAMACPP = "llamacpp"
    OLLAMA = "ollama"
    LMSTUDIO = "lmstudio"
    TGI = "tgi"
    GENERIC = "generic"  # any other OpenAI-compatible server


class ToolIds(StrEnum):
    ANY = "any"  # ids are echoed as the model made them
    ALNUM9 = "alnum9"  # exactly 9 characters a-z, A-Z, 0-9 (Mistral)


class Auth(StrEnum):
    BEARER = "bearer"  # Authorization: Bearer KEY
    API_KEY = "api-key"  # api-key: KEY (Azure OpenAI)
    X_API_KEY = "x-api-key"  # x-api-key: KEY (Anthropic)


@dataclass(frozen=True)
class Profile:
    family: Family
    reasoning_field: str | None = None  # send a turn's reasoning back under this name; None: never
    drop_fields: frozenset[str] = frozenset()  # assistant-turn fields the provider rejects
    tool_ids: ToolIds = ToolIds.ANY
    auth: Auth = Auth.BEARER
    native: bool = False  # not the chat-completions protocol (Anthropic's Messages API)

    @property
    def name(self) -> str:
        return str(self.family)


PROFILES: dict[Family, Profile] = {
    family: Profile(family)
    for family in Family
}
PROFILES[Family.AZURE] = Profile(Family.AZURE, auth=Auth.API_KEY)
PROFILES[Family.ANTHROPIC] = Profile(Family.ANTHROPIC, auth=Auth.X_API_KEY, native=True)
PROFILES[Family.MISTRAL] = Profile(Family.MISTRAL, tool_ids=ToolIds.ALNUM9)
PROFILES[Family.MOONSHOT] = Profile(Family.MOONSHOT, reasoning_field="reasoning_content")
PROFILES[Family.ZHIPU] = Profile(Family.ZHIPU, reasoning_field="reasoning_content")
PROFILES[Family.DEEPSEEK] = Profile(Family.DEEPSEEK, drop_fields=frozenset({"reasoning_content", "reasoning"}))

HOSTS: tuple[tuple[str, Family], ...] = (
    ("api.openai.com", Family.OPENAI),
    (".openai.azure.com", Family.AZURE),
    (".cognitiveservices.azure.com", Family.AZURE),
    (".services.ai.azure.com", Family.AZURE),
    ("generativelanguage.googleapis.com", Family.GEMINI),
    ("aiplatform.googleapis.com", Family.GEMINI),
    ("api.anthropic.com", Family.ANTHROPIC),
    ("api.mistral.ai", Family.MISTRAL),
    ("api.deepseek.com", Family.DEEPSEEK),
    ("api.moonshot.ai", Family.MOONSHOT),
    ("api.moonshot.cn", Family.MOONSHOT),
    ("open.bigmodel.cn", Family.ZHIPU),
    ("api.z.ai", Family.ZHIPU),
    ("api.groq.com", Family.GROQ),
    ("openrouter.ai", Family.OPENROUTER),
    ("api.together.xyz", Family.TOGETHER),
    ("api.together.ai", Family.TOGETHER),
    ("api.fireworks.ai", Family.FIREWORKS),
)
PORTS = {11434: Family.OLLAMA, 1234: Family.LMSTUDIO}


def family_of(base_url: str) -> Family:
    """The family a base URL belongs to: by host, then by a local server's usual port, then by a
    path Azure or Gemini alone use; else ``generic``."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    for suffix, family in HOSTS:
        if host.endswith(suffix) if suffix.startswith(".") else host == suffix or host.endswith("." + suffix):
            return family
    if "/openai/deployments/" in parts.path:
        return Family.AZURE
    if parts.path.rstrip("/").endswith("/v1beta/openai"):
        return Family.GEMINI
    try:
        port = parts.port
    except ValueError:
        port = None
    return PORTS.get(port or 0, Family.GENERIC)


def profile_for(base_url: str, name: str | None = None) -> Profile:
    """The profile named in config.yaml (``profile:``), else the one the base URL implies."""
    return PROFILES[Family(name) if name else family_of(base_url)]


# -- messages as each provider takes them ------------------------------------------------------

RUNNER_FIELDS = frozenset({"reasoning", "refusal", "anthropic_thinking"})  # runner's own keys of an assistant turn


def wire_messages(messages: Sequence[Mapping[str, Any]], profile: Profile) -> list[dict[str, Any]]:
    """The conversation as this provider takes it: runner's own keys out (a turn's ``reasoning``
    goes back under the profile's ``reasoning_field``, if any), the provider's own fields kept
    unless dropped, tool-call ids renamed where the provider has an id rule."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "assistant":
            sent = {k: v for k, v in m.items() if k not in RUNNER_FIELDS and k not in profile.drop_fields}
            if profile.reasoning_field and m.get("reasoning") and profile.reasoning_field not in sent:
                sent[profile.reasoning_field] = m["reasoning"]
            if profile.tool_ids is ToolIds.ALNUM9 and sent.get("tool_calls"):
                sent["tool_calls"] = [{**c, "id": tool_id(str(c.get("id", "")), profile)} for c in sent["tool_calls"]]
            out.append(sent)
        elif m.get("role") == "tool" and profile.tool_ids is ToolIds.ALNUM9:
            out.append({**m, "tool_call_id": tool_id(str(m.get("tool_call_id", "")), profile)})
        else:
            out.append(dict(m))
    return out


_ALNUM9 = re.compile(r"[A-Za-z0-9]{9}")
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def tool_id(original: str, profile: Profile) -> str:
    """``original`` as this provider takes a tool-call id: unchanged when it already fits, else a
    stable rename (the same original always gives the same id, in the call and in its answer)."""
    if profile.tool_ids is ToolIds.ANY or _ALNUM9.fullmatch(original):
        return original
    digest = int.from_bytes(hashlib.sha256(original.encode()).digest()[:8], "big")
    chars = []
    for _ in range(9):
        digest, i = divmod(digest, len(_ALPHABET))
        chars.append(_ALPHABET[i])
    return "".join(chars)
