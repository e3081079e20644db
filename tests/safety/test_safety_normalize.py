"""Normalisation: the spellings a terminal or the shell treat as the same command."""

from __future__ import annotations

import pytest

from runner.safety.shell import classify
from runner.safety.shell.normalize import decode_ansi_c, normalize


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("rm\x1b[31m -rf /\x1b[0m", "rm -rf /"),  # CSI colour codes
        ("\x1b]0;title\x07ls", "ls"),  # OSC window title
        ("\x1b]8;;https://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC hyperlink with ST
        ("r\x00m -rf /", "rm -rf /"),  # NUL
        ("ls\r\n", "ls\n"),  # CRLF
        ("rm -r\\\nf /", "rm -rf /"),  # line continuation
        ("ｒｍ　－ｒｆ　／", "rm -rf /"),  # fullwidth letters and ideographic spaces
        ("r\u200bm\u200d -rf /", "rm -rf /"),  # zero-width space and joiner
        ("ls -la", "ls -la"),
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    "command",
    [
        "rm\x1b[31m -rf /",
        "r\x00m -rf /",
        "rm -r\\\nf /",
        "sudo \\\nrm -rf /",
        "ｒｍ　－ｒｆ　／",
        "\ufeffrm -rf /",
        "echo x\r\nrm -rf /",
    ],
)
def test_obfuscated_spellings_are_hardline(command: str) -> None:
    assert classify(command).level == "hardline"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (r"\x72\x6d", "rm"),
        (r"\162\155", "rm"),
        (r"\u0072m", "rm"),
        (r"a\nb", "a\nb"),
        (r"\'", "'"),
        (r"\q", r"\q"),  # unknown escapes stay, as in bash
        (r"\cA", "\x01"),
    ],
)
def test_decode_ansi_c(body: str, expected: str) -> None:
    assert decode_ansi_c(body) == expected
