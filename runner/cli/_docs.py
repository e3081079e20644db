"""The command reference in docs/commands.md, generated from click's ``--help`` of every command.

docs/commands.md holds a cog block that calls :func:`render_commands_markdown`; regenerate it
with ``cog -r docs/commands.md`` (``python -m runner.cli._docs`` prints the generated part).
The help is rendered at a fixed width with the program name ``runner``, so the text depends on
nothing but the code. The leading underscore keeps this module out of command discovery.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

WIDTH = 80


def _contexts(command: click.Command, ctx: click.Context) -> Iterator[click.Context]:
    """``ctx`` and the context of every command below it, depth first, in listing order."""
    yield ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = sub.context_class(sub, info_name=name, parent=ctx, **sub.context_settings)
            yield from _contexts(sub, sub_ctx)


def command_contexts() -> list[click.Context]:
    """A context for ``runner`` and each of its commands and groups, as the real CLI builds them."""
    from runner.cli import cli

    root = cli.context_class(
        cli, info_name="runner", terminal_width=WIDTH, max_content_width=WIDTH, **cli.context_settings
    )
    return list(_contexts(cli, root))


def render_commands_markdown() -> str:
    """A heading per command path (``runner jobs list``) and its ``--help`` in a fenced block."""
    parts = []
    for ctx in command_contexts():
        depth = ctx.command_path.count(" ")
        heading = "#" * (depth + 3)
        parts.append(f"{heading} `{ctx.command_path}`\n\n```text\n{ctx.get_help().rstrip()}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    click.echo(render_commands_markdown(), nl=False)
