"""Sending things out: the sinks (webhook, Slack, Discord, Telegram, email, file, stdout) with
retries, and failure alerts with their per-job throttle."""
