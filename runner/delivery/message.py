"""What a sink sends: one ``Message`` for a run's output or an alert, in every format a sink needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Message:
    """``payload`` is the JSON a webhook posts; ``subject``/``text`` are what people read (chat, email);
    ``key`` is the idempotency key (the run id, plus the alert's event)."""

    run_id: str
    key: str
    subject: str
    text: str
    payload: dict[str, Any] = field(default_factory=dict)

    def variables(self) -> dict[str, Any]:
        """What a webhook ``template`` sees: the payload's fields, plus ``subject``, ``text`` and ``payload``."""
        return {**self.payload, "subject": self.subject, "text": self.text, "payload": self.payload}


def capped(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, keeping the head and the tail (where errors are)."""
    if len(text) <= limit:
        return text
    marker = "\n[... cut ...]\n"
    head = (limit - len(marker)) // 3
    tail = limit - len(marker) - head
    return text[:head] + marker + text[-tail:]
