"""Runs past one machine: the Celery executor, ``runner worker``, lost-worker recovery (docs/distributed.md)."""
