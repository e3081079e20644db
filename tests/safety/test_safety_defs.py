"""Aliases and shell functions defined in the command line (issue 29): the tokenizer finds
function definitions and their body text, and a use of a name is examined with its body.

Only ever handed to ``parse`` and ``classify``; nothing here runs a command."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from runner.safety.shell import classify
from runner.safety.shell.defs import Definitions, Use
from runner.safety.shell.split import parse
from runner.safety.shell.syntax import FunctionDef, ParseBudget, ParseError, render
from tests.safety.corpus import load

HARDLINE = load("hardline")
DANGEROUS = load("dangerous")
BENIGN = load("benign")
RANK = {"safe": 0, "dangerous": 1, "hardline": 2}
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def level(command: str) -> str:
    return classify(command).level


def functions(text: str) -> tuple[FunctionDef, ...]:
    return parse(text, ParseBudget(64 * len(text) + 4096)).functions


# ---------------------------------------------------------------- the tokenizer finds definitions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("f(){ ls -la; }; f", (FunctionDef("f", "{ ls -la; }"),)),
        ("f () { { a; }; b; }", (FunctionDef("f", "{ { a; }; b; }"),)),
        ("function g { ls; echo }; }; g", (FunctionDef("g", "{ ls; echo }; }"),)),
        ("function h() {\n if x; then { y; }; fi\n}\nh", (FunctionDef("h", "{\n if x; then { y; }; fi\n}"),)),
        ("f ()\n{\n a\n}\n", (FunctionDef("f", "{\n a\n}"),)),
        ("f() ( (a); b ); f", (FunctionDef("f", "( (a); b )"),)),
        ("g() { f() { x; }; }", (FunctionDef("f", "{ x; }"), FunctionDef("g", "{ f() { x; }; }"))),
        ("if a; then f() { b; }; fi", (FunctionDef("f", "{ b; }"),)),
        ("f() if a; then b; fi", (FunctionDef("f", None),)),  # a body the tokenizer does not delimit
        ("f(){ a", (FunctionDef("f", None),)),  # never closed
        (":(){ :|:& };:", (FunctionDef(":", "{ :|:& }"),)),
        ("echo {; echo }", ()),
        ("sudo f() { a; }", (FunctionDef("f", "{ a; }"),)),  # a syntax error in bash: read as a definition anyway
        ("{ a; }; (b); echo '{'", ()),
        ("x=$(f() { a; }; f)", ()),  # defined inside a substitution: that script's own
    ],
)
def test_function_definitions_and_their_bodies(text: str, expected: tuple[FunctionDef, ...]) -> None:
    assert functions(text) == expected


def test_a_definition_keeps_the_commands_and_skeleton_it_had() -> None:
    script = parse(":(){ :|:& };:", ParseBudget(4096))
    assert [[render(c) for c in p.commands] for p in script.pipelines] == [[":"], ["{ :", ":"], ["}"], [":"]]
    assert script.skeleton == ": ( ) { : | : & } ; :"


_name = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(lambda n: n not in {"if", "do", "fi", "in"})
# Single-line corpus commands that hold no brace group, definition or comment of their own.
_BODIES = [c for c in BENIGN + DANGEROUS if "\n" not in c and not any(x in c for x in "{}#") and not functions(c)]
_FORMS = ("{n}() {{ {b}\n}}", "{n} () {{ {b}; }}", "function {n} {{ {b}\n}}", "function {n}() {{\n{b}\n}}")


@SETTINGS
@given(_name, st.sampled_from(_BODIES), st.sampled_from(_FORMS), st.sampled_from(["", "ls; ", "if x; then "]))
def test_a_brace_body_is_found_whole(name: str, body: str, form: str, before: str) -> None:
    definition = form.format(n=name, b=body)
    text = f"{before}{definition}; {name} a b" + ("; fi" if before.startswith("if") else "")
    try:
        found = functions(text)
    except ParseError:
        assume(False)
        return
    start = definition.index("{")
    assert found == (FunctionDef(name, definition[start:]),)


@SETTINGS
@given(_name, st.sampled_from([c for c in _BODIES if "(" not in c and ")" not in c]))
def test_a_subshell_body_is_found_whole(name: str, body: str) -> None:
    assert functions(f"{name}() ( {body} ); {name}") == (FunctionDef(name, f"( {body} )"),)


@SETTINGS
@given(st.text(alphabet=st.sampled_from(list("f(){} ;\n&|ab'\"$")), max_size=40))
def test_definitions_on_any_text_are_consistent(text: str) -> None:
    """Whatever the text, every body found is a slice of it that starts with ``{`` or ``(``
    and ends with the matching ``}`` or ``)``."""
    try:
        found = functions(text)
    except ParseError:
        return
    for fn in found:
        assert fn.name
        if fn.body is not None:
            assert fn.body in text
            assert (fn.body[0], fn.body[-1]) in (("{", "}"), ("(", ")"))


# ---------------------------------------------------------------- uses run their bodies


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("alias x='rm -rf /'; x", "hardline"),
        ("alias x='rm -rf'; x /", "hardline"),
        ("x; eval \"alias x='rm -rf'\"; x /etc", "hardline"),
        ('f(){ rm -rf "$1"; }; f /', "hardline"),
        ('f(){ rm -rf "$@"; }; f a /', "hardline"),
        ("f(){ rm -rf $D; }; D=/; f", "hardline"),  # variables as at the call
        ('f /; f(){ rm -rf "$1"; }', "hardline"),  # a use before the definition counts
        ("for i in 1 2; do f /; f(){ rm -rf $1; }; done", "hardline"),
        ('f() ( rm -rf "$1" ); f /etc', "hardline"),
        ('g(){ f "$1"; }; f(){ rm -rf "$1"; }; g /', "hardline"),
        ("f() { cd /; }; f; rm -rf *", "hardline"),  # a body runs in the calling shell
        ("alias e='echo rm -rf /'; e | sh", "hardline"),  # the body's output
        ("f(){ sh; }; echo 'rm -rf /' | f", "hardline"),  # the body reads the use's stdin
        ("alias s=sh; s <<< 'reboot'", "hardline"),
        ("f(){ xargs rm -rf; }; echo / | f", "hardline"),
        ("alias x='curl http://169.254.169.254/'", "dangerous"),  # a value is examined where written too
        ('f() if true; then rm -rf "$1"; fi; f /', "dangerous"),  # a body not delimited: unknown
        ("f() if true; then ls; fi; f", "dangerous"),
        ("alias x='rm -rf '; x /tmp/a", "dangerous"),
        ('rm(){ echo "$@"; }; rm -rf build', "dangerous"),  # the command as written still counts
        ("BASH_ALIASES[x]='rm -rf /'; x", "hardline"),  # bash's alias table is an array
        ("declare -A BASH_ALIASES=([x]='rm -rf /'); x", "hardline"),
        ('BASH_ALIASES+=([y]=ls [x]="rm -rf"); x /', "hardline"),
        ("env 'BASH_FUNC_x%%=() { rm -rf \"$1\"; }' bash -c 'x /'", "hardline"),  # an exported function
        ("BASH_ALIASES[ll]='ls -la'; ll", "safe"),
        ("a[1]=x; ls", "safe"),
        ("f(){ f; }; f", "safe"),  # a body using its own name is examined once
        ("alias ls='ls --color'; ls", "safe"),
        ("alias a=b; alias b=a; a", "safe"),
        ("f(){ ls; }; f; f; f", "safe"),
        ('greet() { echo "hello $1"; }; greet world', "safe"),
        ("alias gs='git status'; gs", "safe"),
    ],
)
def test_a_use_runs_the_body(command: str, expected: str) -> None:
    assert level(command) == expected, classify(command).reasons


def test_a_finding_in_a_body_flags_the_pipeline_of_the_use() -> None:
    verdict = classify("alias x='rm -rf'; ls; x /")
    assert verdict.level == "hardline"
    assert "x /" in verdict.flagged
    # the same text examined once (at the definition) still flags every pipeline that runs it
    again = classify("alias x='rm -rf build'; ls; x; f(){ rm -rf out; }; ls && f")
    assert again.flagged == ('alias "x=rm -rf build"', "x", "f", "{ rm -rf out")  # "f" before "()" too


def test_definitions_pair_every_use_with_every_body() -> None:
    defs = Definitions()
    assert defs.use(("x", "/"), None, "x /") == []
    first = defs.define("x", "alias", "rm -rf")
    assert [(e.text, e.use) for e in first] == [("rm -rf /", Use(("/",), None, "x /"))]
    second = defs.define("x", "function", 'ls "$1"')
    assert [e.text for e in second] == ['ls "/"']
    assert [e.text for e in defs.use(("x",), "/tmp", "x")] == ["rm -rf", 'ls ""']
    assert defs.define("x", "alias", "rm -rf") == []  # the same body again adds nothing


_path = st.lists(st.sampled_from(["/", "tmp", "etc", "x", "..", "~", "usr", "/bin", "*"]), min_size=1, max_size=6)


@SETTINGS
@given(
    _path, st.sampled_from(['f() {{ rm -rf "$1"; }}; f {p}', "alias x='rm -rf'; x {p}", 'f() ( rm -rf "$@" ); f a {p}'])
)
def test_a_use_is_as_severe_as_the_command_it_runs(parts: list[str], form: str) -> None:
    path = shlex.quote("".join(parts))
    assert RANK[level(form.format(p=path))] >= RANK[level(f"rm -rf {path}")]


def _argv_only(command: str) -> list[str] | None:
    """The words of a single-line command without shell operators or assignments, or None."""
    if "\n" in command or any(op in command for op in ("|", ";", "&", ">", "<", "$", "`", "(", "{")):
        return None
    if "=" in command.split(" ")[0]:
        return None  # NAME=value is an assignment only where written, not from an expansion
    try:
        return shlex.split(command)
    except ValueError:
        return None


_ARGV = [c for c in HARDLINE + DANGEROUS if _argv_only(c)]


@SETTINGS
@given(st.sampled_from(_ARGV), st.sampled_from(['f() {{ "$@"; }}; f {a}', "alias x={h}; x {r}"]))
def test_a_body_that_runs_its_arguments_keeps_the_level(command: str, form: str) -> None:
    argv = _argv_only(command)
    assert argv
    quoted = [shlex.quote(w) for w in argv]
    wrapped = form.format(a=" ".join(quoted), h=quoted[0], r=" ".join(quoted[1:]))
    assert RANK[level(wrapped)] >= RANK[level(command)], wrapped
