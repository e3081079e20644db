"""What the ``runner`` process does before its command line is parsed (no click import here):
a command that runs tools takes the secrets out of its environment block
(``runner.secrets``), and a process that runs one run becomes the subreaper of what its commands
start (``runner.procs``). Only the real program calls this; tests call ``runner.cli.main(argv)``."""

from __future__ import annotations

import os

ONE_RUN_COMMANDS = frozenset({("run-job",), ("kanban", "work")})


def prepare_process(args: list[str]) -> None:

    from runner.secrets import ENV_FD, command_path, hide, runs_tools

    if runs_tools(args) or ENV_FD in os.environ:
        from runner.safety.redact import is_token  # only commands that run tools look at values

        hide(args, is_token)
    path = command_path(args)
    if path[:1] in ONE_RUN_COMMANDS or path[:2] in ONE_RUN_COMMANDS:
        from runner.procs import become_subreaper

        become_subreaper()
