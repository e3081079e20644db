"""``runner budget``: fleet spend today and this month, open reservations and the caps of ``budgets:``."""

from __future__ import annotations

from typing import Any

import click

from runner.cli._util import ago, echo_json, settings, table


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


@click.command("budget")
@click.option("--json", "as_json", is_flag=True)
def budget_command(as_json: bool) -> None:
    """Spend (settled runs) and reservations (runs in progress) today and this month, UTC, for the
    fleet, each provider and each job, next to the caps of config.yaml's `budgets:`."""
    from runner.run.budget import report

    s = settings()
    data = report(s.store, s.config)
    if as_json:
        echo_json(data)
        return
    click.echo(f"UTC day {data['day']}, month {data['month']}; default reservation {_usd(data['default_run_usd'])}")
    table(
        [_row(r) for r in data["scopes"]],
        ["SCOPE", "NAME", "TODAY", "RESERVED", "DAILY CAP", "MONTH", "RESERVED", "MONTHLY CAP"],
    )
    if not data["open"]:
        click.echo("no open reservations")
        return
    click.echo("open reservations:")
    table(
        [
            [o["run_id"], o["job"], ", ".join(o["providers"]), _usd(o["reserved_usd"]), ago(o["created_at"])]
            for o in data["open"]
        ],
        ["RUN", "JOB", "PROVIDERS", "RESERVED", "SINCE"],
    )


def _row(r: dict[str, Any]) -> list[str]:
    today, month = r["today"], r["month"]
    return [
        r["scope"],
        r["name"] or "-",
        _usd(today["spent_usd"]),
        _usd(today["reserved_usd"]),
        _usd(today["cap_usd"]),
        _usd(month["spent_usd"]),
        _usd(month["reserved_usd"]),
        _usd(month["cap_usd"]),
    ]


COMMANDS = [budget_command]
