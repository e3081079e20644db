"""Every command is documented in README.md; every file in a top-level folder has a README line."""

from pathlib import Path

import click

from runner.cli import cli
from tests.conftest import REPO

FOLDERS = ["runner", "backends", "jobs", "skills", "tests"]
IGNORED = {"__pycache__", "README.md", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}


def command_paths(group: click.Group, prefix: str = "runner") -> list[str]:
    ctx = click.Context(group)
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        path = f"{prefix} {name}"
        if isinstance(cmd, click.Group):
            out.extend(command_paths(cmd, path))
        else:
            out.append(path)
    return out


def test_every_command_is_in_the_readme():
    readme = (REPO / "README.md").read_text()
    missing = [p for p in command_paths(cli) if p not in readme]
    assert not missing, f"commands missing from README.md: {missing}"


def test_every_command_has_help():
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        assert cli.get_command(ctx, name).help, name


def test_each_top_level_folder_readme_names_its_files():
    problems = []
    for folder in FOLDERS:
        readme = REPO / folder / "README.md"
        if not readme.exists():
            problems.append(f"{folder}/README.md missing")
            continue
        text = readme.read_text()
        for entry in sorted(Path(REPO / folder).iterdir()):
            if entry.name in IGNORED or entry.name.startswith("."):
                continue
            label = entry.name + ("/" if entry.is_dir() else "")
            if f"`{label}`" not in text and f"`{entry.name}`" not in text:
                problems.append(f"{folder}/README.md does not mention {label}")
    assert not problems, "\n".join(problems)
