"""The ``runner`` command line.

Commands live one module per group in this package (``runner/cli/*.py``); each module
defines ``COMMANDS``, a list of click commands or groups. They are discovered from this
folder, so there is no hand-kept list to drift. Modules keep heavy imports inside the
command bodies so ``runner --help`` and ``runner jobs list`` stay fast.

Errors: a ``RunnerError`` becomes one line on stderr and its ``exit_code`` (2 for bad input,
1 for a failed run); click usage errors exit 2; Ctrl-C exits 130; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path
from typing import Any

import click

from runner import __version__
from runner.errors import RunnerError


class RunnerGroup(click.Group):
    """Top-level group whose subcommands are discovered from this package.

    A command line names one command, so ``get_command`` first imports only the module named
    like it (``run-job`` -> ``run.py``, ``jobs`` -> ``jobs.py``); when that module does not define
    it (``doctor`` lives in ``backend.py``), every module is imported, as for ``--help``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._imported: set[str] = set()
        self._all = False

    def _import(self, name: str) -> None:
        if name in self._imported:
            return
        self._imported.add(name)
        module = importlib.import_module(f"{__name__}.{name}")
        for command in getattr(module, "COMMANDS", []):
            self.add_command(command)

    def _load(self) -> None:
        if self._all:
            return
        self._all = True
        for name in _module_names():
            self._import(name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        guess = cmd_name.partition("-")[0]
        if not self._all and guess in _module_names():
            self._import(guess)
            command = super().get_command(ctx, cmd_name)
            if command is not None:
                return command
        self._load()
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> object:
        """Turn deliberate errors into one line and an exit code, here, at the edge."""
        try:
            return super().invoke(ctx)
        except RunnerError as exc:
            for line in str(exc).splitlines() or [type(exc).__name__]:
                click.echo(f"error: {line}", err=True)
            raise click.exceptions.Exit(exc.exit_code) from None
        except (KeyboardInterrupt, click.Abort):
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(130) from None


def _module_names() -> list[str]:
    """The command modules of this package (``_``-prefixed helpers are not)."""
    found = pkgutil.iter_modules([str(Path(__file__).parent)])
    return sorted(m.name for m in found if not m.name.startswith("_"))


@click.group(cls=RunnerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--jobs", "jobs_path", type=click.Path(dir_okay=False), help="jobs.yaml to use")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="config.yaml to use (else $RUNNER_CONFIG, else config.yaml beside jobs.yaml, else RUNNER_HOME's)",
)
@click.option("--home", "home", type=click.Path(file_okay=False), help="state folder (RUNNER_HOME)")
# the version written in runner/__init__.py, not looked up by distribution name (runner-agents on the
# package index; an unrelated "runner" distribution installed beside it must not answer)
@click.version_option(version=__version__, prog_name="runner")
@click.pass_context
def cli(ctx: click.Context, jobs_path: str | None, config_path: str | None, home: str | None) -> None:
    """Scheduled batch automation runner for LLM agents."""
    from runner.settings import Settings

    ctx.obj = Settings.from_options(jobs=jobs_path, config=config_path, home=home)


def main(argv: list[str] | None = None) -> None:
    if argv is None:  # the program through an older console script: prepare as runner.entry does
        from runner.safety.startup import prepare_process

        argv = sys.argv[1:]
        prepare_process(argv)
    try:
        cli.main(args=argv, prog_name="runner")
    except BrokenPipeError:  # `runner runs list | head`
        sys.stderr.close()
        sys.exit(0)
