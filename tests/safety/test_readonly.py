"""``runner.safety.shell.readonly.read_only``: which terminal commands need no workdir checkpoint
first. Only plain readers whose output goes to the tool result or /dev/null; anything else (and
anything it cannot read) counts as a command that may change files."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.safety.shell.readonly import read_only

READS = [
    "ls",
    "ls -la sub",
    "cat 'a b.txt'",
    "cat f | grep -n x | wc -l",
    "grep -r TODO . > /dev/null 2>&1",
    "git status --short",
    "git log -3 --stat",
    "find . -name '*.py'",
    "head -c 100 f; tail -n 3 f",
    "cd sub && ls",
    "echo $(ls)",
    "cat <(ls)",
    "if test -f x; then cat x; fi",
    "cat <<EOF\nhello\nEOF",
    "rg -n foo",
]
CHANGES = [
    "rm f",
    "echo x > g",
    "echo x >> g",
    "cat a > b",
    "ls | tee out",
    "touch x",
    "mkdir d",
    "chmod -x s.sh",
    "cp a b",
    "sed -i s/a/b/ f",
    "sed -n 'w out' f",
    "python3 x.py",
    "./script.sh",
    "bin/tool",
    "X=1 cat f",
    "$CMD f",
    "echo $(rm x)",
    "tee >(cat) f",
    "find . -delete",
    "find . -exec rm {} +",
    "git commit -m x",
    "git diff --output=patch",
    "git -C other status",
    "rg --pre ./conv foo",
    "f() { rm x; }; f",
    "for f in *; do cat $f; done",
    "> f",
    "ls; rm x",
    "sort -o f f",
    "unparseable ( (",
]


@pytest.mark.parametrize("command", READS)
def test_readers_need_no_checkpoint(command: str) -> None:
    assert read_only(command)


@pytest.mark.parametrize("command", CHANGES)
def test_anything_else_may_change_files(command: str) -> None:
    assert not read_only(command)


def test_a_huge_line_is_not_examined() -> None:
    assert not read_only("ls " + "a" * 20_000)


@settings(max_examples=300)
@given(st.text(max_size=200))
def test_never_raises(text: str) -> None:
    assert read_only(text) in (True, False)


@settings(max_examples=200)
@given(st.sampled_from([r for r in READS if "<<" not in r]), st.sampled_from(["rm x", "echo y > z", "touch q"]))
def test_a_writer_anywhere_in_the_line_counts(reader: str, writer: str) -> None:
    # (a here-document is left out: `EOF; rm x` would be a line of its body, as in bash)
    assert not read_only(f"{reader}; {writer}") and not read_only(f"{writer} && {reader}")
