"""What the ``runner`` process does before its command line is parsed (no click import here):
a command that runs tools takes the secrets out of its environment block
(``runner.host.secrets``) and, like every command that holds keys, makes itself non-dumpable; a
process that runs one run becomes the subreaper of what its commands start (``runner.host.procs``). Only the real program calls this; tests call ``runner.cli.main(argv)``."""

from __future__ import annotations

import os

from runner.host.procs import become_subreaper, become_undumpable
from runner.host.secrets import ENV_FD, command_path, hide, runs_tools

ONE_RUN_COMMANDS = frozenset({("run-job",), ("kanban", "work")})
#: commands whose process holds keys besides the tool runners (``runner.host.secrets.TOOL_COMMANDS``)
KEY_HOLDERS = frozenset({("worker",), ("web",)})


def prepare_process(args: list[str]) -> None:
    path = command_path(args)
    if runs_tools(args) or ENV_FD in os.environ:
        from runner.safety.redact import is_token  # only commands that run tools look at values

        hide(args, is_token)
    if runs_tools(args) or ENV_FD in os.environ or path[:1] in KEY_HOLDERS:
        become_undumpable()  # no reading its memory or descriptors through /proc, no core dump
    if path[:1] in ONE_RUN_COMMANDS or path[:2] in ONE_RUN_COMMANDS:
        become_subreaper()
