"""runner: a scheduled batch automation runner for LLM agents."""

__version__ = "0.1.0"
