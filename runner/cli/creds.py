"""``runner creds list | reset``: the credential pool's shared state (never a key, only fingerprints)."""

from __future__ import annotations

import click

from runner.cli._util import ago, echo_json, settings, table


@click.group("creds")
def creds_group() -> None:
    """API keys of each provider: status, cooldowns, usage (by fingerprint)."""


@creds_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def creds_list(as_json: bool) -> None:
    """List every key: provider, label, fingerprint, status, cooldown left, requests, last error."""
    from runner.agent.credentials import list_credentials, sync_config
    from runner.config.schedules import format_duration

    s = settings()
    sync_config(s.store, s.config)
    rows = list_credentials(s.store)
    if as_json:
        echo_json([r.as_dict() for r in rows])
        return
    if not rows:
        click.echo("no API keys configured (set OPENAI_API_KEY or 'api_keys:' in config.yaml)")
        return
    table(
        [
            [
                r.provider,
                r.label,
                r.fingerprint,
                r.status,
                format_duration(r.cooldown_left_s) if r.cooldown_left_s else "-",
                f"{r.success_count}/{r.request_count}",
                ago(r.last_used_at) or "-",
                f"HTTP {r.last_error_code}: {r.last_error_message or ''}"[:60] if r.last_error_code else "-",
            ]
            for r in rows
        ],
        ["PROVIDER", "LABEL", "FINGERPRINT", "STATUS", "COOLDOWN LEFT", "OK/REQUESTS", "LAST USED", "LAST ERROR"],
    )


@creds_group.command("reset")
@click.argument("fingerprint", required=False)
@click.option("--provider", help="reset every key of this provider")
@click.option("--all", "everything", is_flag=True, help="reset every key")
def creds_reset(fingerprint: str | None, provider: str | None, everything: bool) -> None:
    """Clear cooldowns and dead marks: one key (FINGERPRINT or a unique prefix), --provider P, or --all."""
    from runner.agent.credentials import reset, sync_config

    s = settings()
    sync_config(s.store, s.config)
    n = reset(s.store, fingerprint=fingerprint, provider=provider, everything=everything)
    click.echo(f"reset {n} key{'s' if n != 1 else ''}")


COMMANDS = [creds_group]
