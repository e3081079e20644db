"""The provider families config.yaml's ``profile:`` names (their wire rules: runner/agent/profiles.py)."""

from __future__ import annotations

from enum import StrEnum


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
