"""``runner completion bash|zsh|fish``: the shell's completion script (click's own), which
completes commands, options, job names and run ids (``runner.cli._complete``)."""

from __future__ import annotations

import click

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_RUNNER_COMPLETE"


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL. Load it in the shell's start-up file:
    bash ``eval "$(runner completion bash)"`` (~/.bashrc), zsh ``eval "$(runner completion zsh)"``
    (~/.zshrc), fish ``runner completion fish > ~/.config/fish/completions/runner.fish``.
    It completes commands and options, job names (from jobs.yaml) and run ids (the newest 50)."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None  # click ships all three
    root = ctx.find_root().command
    click.echo(cls(root, {}, "runner", COMPLETE_VAR).source())


COMMANDS = [completion]
