"""The store's dialect and address types (defined in ``runner.config.database``, which the
settings read without importing the store)."""

from runner.config.database import ENV, STORE_LOCK, Dialect, PgURL, Target, configured, parse, redact_url

__all__ = ["ENV", "STORE_LOCK", "Dialect", "PgURL", "Target", "configured", "parse", "redact_url"]
