"""The cwd marker a command's wrapper prints at exit (runner.backends.base.split_marker), against the
per-nonce regex it replaced, on generated outputs: fake markers, other nonces, odd cwds."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from runner.backends.base import new_nonce, split_marker, wrap_command


def reference(output: str, nonce: str) -> tuple[str, str | None]:
    """The implementation before: a regex compiled for each nonce."""
    match = re.search(rf"\n?__RUNNER_CWD_{re.escape(nonce)}__(?P<cwd>[^\n]*)\n?$", output)
    if not match:
        return output, None
    return output[: match.start()], match.group("cwd") or None


NONCE = st.text("0123456789abcdef", min_size=12, max_size=12)
TEXT = st.lists(st.sampled_from([*"ab/_ \n", "__RUNNER_CWD_", "__"]), max_size=40).map("".join)
CWD = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=40)


@given(text=TEXT, nonce=NONCE, fake=NONCE, cwd=CWD, trailing=st.sampled_from(["", "\n"]))
def test_the_marker_line_at_the_end_is_split_off_as_before(text, nonce, fake, cwd, trailing):
    noise = text.replace("__RUNNER_CWD_", f"__RUNNER_CWD_{fake}__")  # fake markers in the command's output
    output = f"{noise}\n__RUNNER_CWD_{nonce}__{cwd}{trailing}"
    assert split_marker(output, nonce) == reference(output, nonce)


@given(text=TEXT, nonce=NONCE, other=NONCE)
def test_without_this_commands_marker_nothing_is_split(text, nonce, other):
    output = text.replace("__RUNNER_CWD_", f"__RUNNER_CWD_{other}__")
    if other != nonce:
        assert split_marker(output, nonce) == (output, None) == reference(output, nonce)


def test_a_real_wrapper_s_marker(tmp_path):
    import subprocess

    nonce = new_nonce()
    script = wrap_command("cd sub && echo hi", str(tmp_path), nonce)
    (tmp_path / "sub").mkdir()
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert split_marker(out, nonce) == ("hi\n", str(tmp_path / "sub"))
