"""The ``runner`` program's entry point (console script and ``python -m runner``): prepare the
process (``runner.safety.startup``), then parse the command line. Kept apart from ``runner.cli`` so the
preparation, which may re-execute the process, costs no click import."""

from __future__ import annotations

import sys

from runner.safety.startup import prepare_process


def main() -> None:
    args = sys.argv[1:]
    prepare_process(args)
    from runner.cli import main as cli_main

    cli_main(args)
