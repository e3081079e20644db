"""``runner init [DIR]``: a commented jobs.yaml, config.yaml and a sample job in an empty folder."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("init")
@click.argument("directory", default=".", type=click.Path(file_okay=True, path_type=Path))
def init(directory: Path) -> None:
    """Write a commented jobs.yaml and config.yaml and a sample job (`hello`, with a cassette
    that runs offline) into DIRECTORY, which must be empty or new (default: this folder)."""
    from runner.cli.scaffold import write_project

    written = write_project(directory)
    root = written[0].parent
    for path in written:
        click.echo(f"wrote {path.relative_to(root)}")
    steps = [] if root == Path.cwd() else [f"cd {directory}"]
    steps += [
        "runner jobs validate",
        "runner run-job hello --replay jobs/cassettes/hello.yaml   # offline",
        "OPENAI_API_KEY=sk-... runner run-job hello                # live model",
    ]
    click.echo("next:\n" + "\n".join(f"  {step}" for step in steps))


COMMANDS = [init]
