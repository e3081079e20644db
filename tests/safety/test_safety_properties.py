"""Properties of ``classify`` over generated input and over the corpora."""

from __future__ import annotations

import shlex
import subprocess

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.safety.shell import Verdict, classify
from runner.safety.shell.braces import brace_expand
from tests.safety.corpus import load

HARDLINE = load("hardline")
DANGEROUS = load("dangerous")
BENIGN = load("benign")
LEVELS = ("safe", "dangerous", "hardline")
RANK = {level: i for i, level in enumerate(LEVELS)}
INTERNAL_ERROR = "internal classifier error: failing closed"

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text made of the characters the tokenizer treats specially, so generated input reaches
# quoting, substitution, here-document and redirection code instead of plain words.
shellish = st.text(alphabet=st.sampled_from(list("ab rm-f/ $(){}[]'\"\\`|&;<>\n#=~*!\t0123")), max_size=80)
fragments = st.lists(st.sampled_from(HARDLINE + DANGEROUS + BENIGN + ("$(", ")", "'", '"', "<<E", "\nE\n", "\\")))


def _valid(verdict: Verdict) -> None:
    assert verdict.level in LEVELS
    assert INTERNAL_ERROR not in verdict.reasons
    assert (verdict.level == "safe") == (verdict.reasons == ())
    assert all(isinstance(s, str) for s in verdict.segments + verdict.flagged)


@SETTINGS
@given(st.text())
def test_any_text_gives_a_valid_verdict(text: str) -> None:
    _valid(classify(text))


@SETTINGS
@given(shellish)
def test_shell_like_text_gives_a_valid_verdict(text: str) -> None:
    _valid(classify(text))


@SETTINGS
@given(fragments)
def test_spliced_corpus_fragments_give_a_valid_verdict(parts: list[str]) -> None:
    _valid(classify(" ".join(parts)))


def _then(command: str, more: str) -> str:
    """``command`` followed by ``more`` as a separate command. A multi-line entry may end
    in a here-document delimiter, which must stay alone on its line."""
    return f"{command}\n{more}" if "\n" in command else f"{command}; {more}"


@SETTINGS
@given(st.sampled_from(BENIGN))
def test_appending_rm_rf_root_to_a_benign_command_is_hardline(command: str) -> None:
    assert classify(_then(command, "rm -rf /")).level == "hardline"


@SETTINGS
@given(st.sampled_from(BENIGN), st.sampled_from(HARDLINE + DANGEROUS))
def test_a_benign_prefix_never_lowers_the_level(prefix: str, command: str) -> None:
    combined = classify(_then(prefix, command)).level
    assert RANK[combined] >= RANK[classify(command).level]


# sudo only applies to the first simple command: "sudo x=rm; $x -rf /" really is harmless
# ($x is unset afterwards), so entries that begin with an assignment are not wrapped.
@SETTINGS
@given(st.sampled_from([c for c in HARDLINE if "=" not in c.split(" ")[0]]))
def test_sudo_keeps_hardline(command: str) -> None:
    assert classify(f"sudo {command}").level == "hardline"


@SETTINGS
@given(st.sampled_from(HARDLINE), st.sampled_from(["bash", "sh", "zsh", "dash"]))
def test_shell_dash_c_keeps_hardline(command: str, shell: str) -> None:
    assert classify(f"{shell} -c {shlex.quote(command)}").level == "hardline"


@SETTINGS
@given(st.sampled_from(HARDLINE))
def test_command_substitution_keeps_hardline(command: str) -> None:
    # the newline lets a trailing here-document delimiter stand on its own line
    assert classify(f"$({command}\n)").level == "hardline"


@SETTINGS
@given(st.sampled_from(HARDLINE))
def test_nested_wrappers_keep_hardline(command: str) -> None:
    wrapped = f"sudo -u root env X=1 bash -c {shlex.quote(f'echo start; {command}')}"
    assert classify(wrapped).level == "hardline"


# ---------------------------------------------------------------- executing wrappers (issue 13)

# Each wraps one command string so that it runs; {q} is the command shell-quoted. Wrapping
# never lowers the class of what is wrapped, whatever the wrapper hides it in.
STRING_WRAPPERS = (
    "bash -c {q}",
    "env -S {q}",
    "eval {q}",
    "script -qc {q} /dev/null",
    "find . -exec sh -c {q} \\;",
    "git -c core.pager={q} log",
    "git -c core.fsmonitor={q} status",
    "tar -xf a.tar --to-command={q}",
    "tar --checkpoint=1 --checkpoint-action=exec={q} -cf a.tar .",
    "rsync -e {q} a host:b",
    "man -P {q} ls",
    "sh <<< {q}",
    "source <(printf '%s\\n' {q})",
    "xargs -I{{}} sh -c '{{}}' <<< {q}",
    "GIT_SSH_COMMAND={q} git fetch",
    'c={q}; eval "$c"',
    # issue 29: the body of an alias or function runs where the name is used
    "alias x={q}; x",
    'f() {{ eval "$1"; }}; f {q}',
    "x; alias x={q}",
    "printf '%s\\n' {q} | at now",
    "batch <<< {q}",
    "parallel ::: {q}",
    "parallel sh -c ::: {q}",
    "tmux new -d {q}",
    "hyperfine {q}",
    "docker run --rm -v /:/host alpine sh -c {q}",
    "echo {q} > job.sh; crontab <<< '@reboot sh job.sh'",
)
PREFIX_WRAPPERS = ("timeout 10", "timeout --signal=KILL 5", "nice -n 19", "nohup", "stdbuf -oL", "setsid -f",
                   "ionice -c3", "chrt -i 0", "command", "exec", "time")  # fmt: skip


def test_a_multi_line_command_in_any_string_wrapper_keeps_its_level() -> None:
    """Every multi-line corpus command in every wrapper, exhaustively: wrappers that read their input
    line by line (``xargs -I``) once let a multi-line payload fail to parse and fall to dangerous."""
    lowered = [
        wrapper.format(q=shlex.quote(command))
        for command in HARDLINE + DANGEROUS
        if "\n" in command
        for wrapper in STRING_WRAPPERS
        if RANK[classify(wrapper.format(q=shlex.quote(command))).level] < RANK[classify(command).level]
    ]
    assert lowered == []


@SETTINGS
@given(st.sampled_from(HARDLINE + DANGEROUS), st.sampled_from(STRING_WRAPPERS))
def test_a_string_wrapper_never_lowers_the_level(command: str, wrapper: str) -> None:
    wrapped = wrapper.format(q=shlex.quote(command))
    assert RANK[classify(wrapped).level] >= RANK[classify(command).level], wrapped


@SETTINGS
@given(st.sampled_from([c for c in HARDLINE if "=" not in c.split(" ")[0]]), st.sampled_from(PREFIX_WRAPPERS))
def test_a_prefix_wrapper_keeps_hardline(command: str, wrapper: str) -> None:
    assert classify(f"{wrapper} {command}").level == "hardline"


@SETTINGS
@given(st.sampled_from(HARDLINE))
def test_a_script_written_then_run_keeps_hardline(command: str) -> None:
    script = f"printf '%s\\n' {shlex.quote(command)} > job.sh"
    assert classify(f"{script}; bash job.sh").level == "hardline"
    assert classify(f"{script} && chmod +x job.sh && ./job.sh").level == "hardline"


_SINGLE_LINE = [c for c in HARDLINE if "\n" not in c and "$" not in c]


@SETTINGS
@given(st.sampled_from(_SINGLE_LINE))
def test_a_makefile_or_test_file_written_then_run_keeps_hardline(command: str) -> None:
    """issue 29: ``make`` runs a Makefile's recipes, ``pytest`` imports test files."""
    recipe = shlex.quote(f"all:\n\t{command}\n")
    assert classify(f"printf '%s' {recipe} > Makefile; make").level == "hardline"
    if command.isascii() and command.isprintable():  # else repr() escapes what the classifier folds
        program = shlex.quote(f"import os\nos.system({command!r})\n")
        assert classify(f"printf '%s' {program} > test_x.py; pytest -q").level == "hardline"
    assert classify(f"printf '%s\\n' {shlex.quote(command)} > a; cp a b.sh; sh b.sh").level == "hardline"


# ---------------------------------------------------------------- brace expansion (issue 13)

_brace_word = st.text(alphabet="ab01,{}.", min_size=1, max_size=12)


@SETTINGS
@given(_brace_word)
def test_brace_expansion_matches_bash(word: str) -> None:
    """Generated from the characters ``a b 0 1 , { } .`` only, so the word is inert: bash
    just prints it. Bash drops words that expand to nothing, and printf with no argument
    prints one empty line."""
    out = subprocess.run(["bash", "-c", 'printf "%s\\n" ' + word], capture_output=True, text=True, check=True)
    expected = out.stdout.split("\n")[:-1]
    mine = [w for w in brace_expand(word) if w]
    assert mine == expected or (mine == [] and expected == [""])


_path_part = st.sampled_from(["/", "tmp", "etc", "x", "{", "}", ",", "..", "~", "usr", "/bin"])


@SETTINGS
@given(st.lists(_path_part, min_size=1, max_size=8))
def test_brace_expanded_rm_is_as_severe_as_its_worst_expansion(parts: list[str]) -> None:
    word = "".join(parts)
    expansions = [w for w in brace_expand(word) if w]
    if not expansions:
        return
    worst = max(RANK[classify(f"rm -rf {shlex.quote(e)}").level] for e in expansions)
    assert RANK[classify(f"rm -rf {word}").level] == worst


def test_brace_expansion_above_the_cap_fails_closed() -> None:
    verdict = classify("echo " + "{a,b}" * 13)  # 8192 words
    assert verdict.level == "dangerous"
    assert verdict.reasons[-1].endswith("failing closed")
    assert classify("mkfs.ext4 " + "{,}" * 13 + "/dev/sda1").level == "hardline"


# ---------------------------------------------------------------- containers (issue 29)

_abs_path = st.lists(st.sampled_from(["/", "etc", "usr", "x", "..", "*", "tmp", "/bin"]), min_size=1, max_size=6).map(
    lambda parts: "/" + "".join(parts)
)


@SETTINGS
@given(_abs_path, st.sampled_from(["/h", "/host", "/mnt/root"]))
def test_a_command_on_a_mount_of_root_is_as_severe_as_on_the_host(path: str, target: str) -> None:
    """With ``-v /:TARGET`` the container's TARGET/p is the host's /p."""
    on_host = classify(f"rm -rf {shlex.quote(path)}").level
    inside = classify(f"docker run --rm -v /:{target} alpine rm -rf {shlex.quote(target + path)}").level
    assert RANK[inside] >= max(RANK[on_host], RANK["dangerous"])
