"""The credential pool's shared state: one row per (provider, key fingerprint).

The raw key is never stored: a row is named by ``fingerprint`` (sha256, 12 hex chars) and the
``label`` it came from (``OPENAI_API_KEY``, ``OPENAI_API_KEYS[1]``, ``config[0]``).
"""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db["credentials"].create(
        {
            "provider": str,
            "fingerprint": str,
            "label": str,
            "position": int,
            "status": str,  # ok | cooling | dead
            "cooldown_until": str,
            "last_error_code": int,
            "last_error_message": str,
            "last_error_at": str,
            "request_count": int,
            "success_count": int,
            "last_used_at": str,
            "selected_at": str,  # when a run last picked this key (round_robin)
            "rate_limit_strikes": int,  # consecutive 429s since the last success
            "auth_strikes": int,  # auth failures since the last success
            "created_at": str,
        },
        pk=("provider", "fingerprint"),
        not_null={"label", "status", "created_at"},
        defaults={
            "status": "ok",
            "position": 0,
            "request_count": 0,
            "success_count": 0,
            "rate_limit_strikes": 0,
            "auth_strikes": 0,
        },
    )
