"""Rules for commands that fetch, decode or execute code: downloaders, decoders, shells,
interpreters, raw sockets, and the arguments that point at cloud metadata services.

Most of these are harmless alone (``curl``, ``base64 -d``, ``bash script.sh``); they
describe themselves through ``Traits`` and the classifier's pipeline checks decide what a
combination means (``curl ... | sh``).
"""

from __future__ import annotations

import base64
import binascii
import re
import socket
from functools import lru_cache
from urllib.parse import urlsplit

from runner.safety.shell.common import Rule, Sink, Traits, check_write, has_long, parse_args, record_write
from runner.safety.shell.normalize import decode_ansi_c
from runner.safety.shell.payloads import code_risk, scan_code
from runner.safety.shell.rules_exec import awk_program
from runner.safety.shell.rules_written import pytest, run_file
from runner.safety.shell.unwrap import SHELLS, command_name

_VERSION_SUFFIX = re.compile(r"[\d.]+$")
INTERPRETERS = frozenset({"python", "perl", "ruby", "node", "php", "lua", "deno", "bun"})

# Options that take a value, and the options whose value is a program text.
_CODE_SYNTAX: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "python": ("cmWX", "--check-hash-based-pycs", ("-c",)),
    "perl": ("eEMmI", "", ("-e", "-E")),
    "ruby": ("eIrC", "", ("-e",)),
    "node": (
        "epr",
        "--eval --print --require --import --input-type --loader",
        ("-e", "-p", "--eval", "--print"),
    ),
    "php": ("rcdzf", "", ("-r",)),
    "lua": ("el", "", ("-e",)),
}


def shell(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    """A shell without ``-c`` runs a script file, or whatever arrives on stdin."""
    parsed = parse_args(args, with_value="oO", long_with_value="--rcfile --init-file", stop_at_operand=True)
    operands = parsed.operands
    reads_stdin = "s" in parsed.short or not operands or operands[0] in ("-", "/dev/stdin")
    if operands and not reads_stdin:
        run_file(operands[0], sink, "shell")
    return Traits(
        shellish=True,
        stdin_exec="shell" if reads_stdin else None,
        interactive="i" in parsed.short,
        lang="shell",
    )


_STDIN_FILES = frozenset({"/dev/stdin", "/proc/self/fd/0", "/dev/fd/0", "-"})
_NOT_A_PLAIN_FILE = re.compile(r"[$`]|^<\(|^/dev/|^/proc/")


def source(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    """``source FILE``: a plain file path is a script like any other; anything else
    (``<(...)``, ``$var``, ``/dev/stdin``) is code the classifier may not see."""
    if not args:
        return Traits(shellish=True)
    target = args[0]
    stdin = target in _STDIN_FILES
    if _NOT_A_PLAIN_FILE.search(target.removeprefix("$HOME/")) or stdin:
        sink.danger(f"{name} of something that is not a plain file")
    else:
        run_file(target, sink, "shell")
    return Traits(shellish=True, stdin_exec="shell" if stdin else None, lang="shell")


def interpreter(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    if name in ("deno", "bun"):
        _deno_bun(args, sink)
        return Traits(shellish=True)
    with_value, long_value, code_opts = _CODE_SYNTAX[name]
    parsed = parse_args(args, with_value=with_value, long_with_value=long_value, stop_at_operand=True)
    codes = [parsed.values[o] for o in code_opts if o in parsed.values]
    for code in codes:
        scan_code(code, sink)
        reason = code_risk(code)
        if reason:
            sink.danger(reason)
    if name in ("perl", "ruby") and "i" in parsed.short:  # in-place edit of every operand
        for target in parsed.operands:
            check_write(target, sink)
            record_write(target, sink)
    module = parsed.values.get("-m") if name == "python" else None
    if module == "pip" and parsed.operands[:1] == ("uninstall",):
        sink.danger("package uninstall (pip)")
    if module == "twine" and parsed.operands[:1] == ("upload",):
        sink.danger("package publish (twine upload)")
    if module == "pytest":
        pytest("pytest", parsed.operands, sink)
    script = parsed.operands[0] if parsed.operands and not codes and module is None else None
    if script and script != "-":
        run_file(script, sink, "interpreter")
    reads_stdin = (not codes and module is None and not parsed.operands) or script == "-"
    return Traits(shellish=True, stdin_exec="interpreter" if reads_stdin else None, lang="interpreter")


def _deno_bun(args: tuple[str, ...], sink: Sink) -> None:
    """``deno run URL`` runs code from the network; ``deno run FILE`` / ``bun FILE`` a file;
    ``deno eval CODE`` inline code."""
    if len(args) >= 2 and args[0] in ("run", "x") and "://" in args[1]:
        sink.danger("runs code straight from the network")
    if len(args) >= 2 and args[0] == "eval":
        scan_code(args[1], sink)
    rest = args[1:] if args[:1] == ("run",) else args
    script = next((a for a in rest if not a.startswith("-")), None)
    if script is not None and "://" not in script:
        run_file(script, sink, "interpreter")


def awk(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """awk programs can call ``system()``, pipe to and from commands; the program is the
    first operand, or the value of ``-e`` / ``--source`` (gawk)."""
    parsed = parse_args(args, with_value="fvFe", long_with_value="--file --assign --field-separator --source")
    programs = [v for k, v in parsed.values.items() if k in ("-e", "--source")]
    if not programs and parsed.operands and "-f" not in parsed.values and "--file" not in parsed.values:
        programs.append(parsed.operands[0])
    for program in programs:
        scan_code(program, sink)
        awk_program(program, sink)


# ---------------------------------------------------------------- downloads and decoders

_CURL_VALUE = "odHuXAebcFKmrTwxyYzCEUQPD"
_CURL_LONG = (
    "--output --data --data-raw --data-binary --data-urlencode --header --user --request --url "
    "--user-agent --referer --cookie --config --max-time --connect-timeout --retry --proxy --cacert "
    "--cert --key --dump-header --write-out --upload-file --form --json --output-dir --resolve"
)


def curl(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    parsed = parse_args(args, with_value=_CURL_VALUE, long_with_value=_CURL_LONG)
    outputs = [v for k, v in parsed.values.items() if k in ("-o", "--output")]
    if "O" in parsed.short or has_long(parsed, "--remote-name", "--remote-name-all"):
        urls = [*parsed.operands, *(v for k, v in parsed.values.items() if k == "--url")]
        outputs.extend(_url_basename(u) for u in urls)
    _record_downloads(outputs, sink)
    return Traits(downloads=True)


def wget(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    parsed = parse_args(args, with_value="OoaPtTwUQiBlARDIXe", long_with_value="--output-document --directory-prefix")
    output = parsed.values.get("-O") or parsed.values.get("--output-document")
    outputs = [output] if output else [_url_basename(u) for u in parsed.operands]
    _record_downloads(outputs, sink)
    return Traits(downloads=True)


def other_downloader(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    return Traits(downloads=True)


def _record_downloads(outputs: list[str], sink: Sink) -> None:
    for path in outputs:
        if path and path != "-":
            check_write(path, sink)
            sink.downloaded.add(path.rsplit("/", 1)[-1])


def _url_basename(url: str) -> str:
    try:
        path = urlsplit(url).path if "://" in url else url
    except ValueError:
        return ""
    return path.rstrip("/").rsplit("/", 1)[-1] or "index.html"


def base_codec(name: str, args: tuple[str, ...], sink: Sink) -> Traits | None:
    parsed = parse_args(args, with_value="w", long_with_value="--wrap")
    if {"d", "D"} & parsed.short or has_long(parsed, "--decode"):
        return Traits(decodes=True, transform=name if name in ("base64", "base32") else None)
    return None


def xxd(name: str, args: tuple[str, ...], sink: Sink) -> Traits | None:
    short = parse_args(args, with_value="cglos").short
    if "r" in short or "-revert" in args:
        plain = "p" in short or "-ps" in args or "-plain" in args
        return Traits(decodes=True, transform="hex" if plain else None)
    return None


def openssl(name: str, args: tuple[str, ...], sink: Sink) -> Traits | None:
    if args[:1] == ("s_client",):
        return Traits(socket=True)
    if args[:1] in (("base64",), ("enc",)) and "-d" in args:
        b64 = bool({"base64", "-base64", "-a", "-A"} & set(args))
        return Traits(decodes=True, transform="base64" if b64 else None)
    return None


def decompressor(name: str, args: tuple[str, ...], sink: Sink) -> Traits | None:
    if name in ("gzip", "bzip2", "xz", "zstd", "lz4"):
        parsed = parse_args(args)
        if "d" not in parsed.short and not has_long(parsed, "--decompress", "--uncompress"):
            return None
    return Traits(decodes=True)


def rev(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    return Traits(decodes=True, transform="rev")


def replay_transform(transform: str | None, text: str) -> str | None:
    """Apply a pipeline stage's decoding to known text (``echo cm0= | base64 -d``)."""
    if transform == "identity":
        return text
    if transform == "rev":
        return "\n".join(line[::-1] for line in text.split("\n"))
    if transform == "hex":
        try:
            return bytes.fromhex("".join(text.split())).decode("utf-8", "replace")
        except ValueError:
            return None
    if transform == "base32":
        try:
            return base64.b32decode("".join(text.split()).upper(), casefold=True).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            return None
    if transform == "base64":
        try:
            return base64.b64decode("".join(text.split()) + "==", validate=False).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            return None
    return None


# ---------------------------------------------------------------- sockets


def netcat(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    parsed = parse_args(args, with_value="psiwqxXTIOVmMe", long_with_value="--exec --sh-exec --lua-exec")
    if "e" in parsed.short or "c" in parsed.short or has_long(parsed, "--exec", "--sh-exec", "--lua-exec"):
        sink.danger(f"reverse shell ({name} -e)")
    return Traits(socket=True)


_SOCAT_EXEC = re.compile(r"(?:^|[,!])\s*(?:exec|system):", re.I)


def socat(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    if any(_SOCAT_EXEC.search(a) for a in args):
        sink.danger("reverse shell (socat EXEC/SYSTEM)")
    return Traits(socket=True)


def telnet(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    return Traits(socket=True)


# ---------------------------------------------------------------- text producers


def echo(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    i = 0
    interpret = False
    while i < len(args) and re.fullmatch(r"-[neE]+", args[i]):
        interpret = interpret or "e" in args[i]
        i += 1
    text = " ".join(args[i:])
    return Traits(stdout_text=decode_ansi_c(text) if interpret else text)


def printf(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    if args[:1] == ("-v",):
        return Traits()
    if args[:1] == ("--",):
        args = args[1:]
    if not args:
        return Traits()
    fmt, rest = args[0], args[1:]
    if "%" not in fmt:
        return Traits(stdout_text=decode_ansi_c(fmt))
    if fmt.rstrip("\\n") in ("%s", "%b"):
        joined = " ".join(rest)
        return Traits(stdout_text=decode_ansi_c(joined) if fmt.startswith("%b") else joined)
    return Traits()


def pass_through(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    """``sort --compress-program PROG`` and ``rg --pre CMD`` run a program on your data."""
    key = "--compress-program" if name == "sort" else "--pre"
    parsed = parse_args(args, long_with_value=key)
    prog = parsed.values.get(key)
    if prog:
        prog_name = canonical_name(prog)
        if prog_name in SHELLS or prog_name in INTERPRETERS:
            sink.danger(f"{name} {key} executes data with {prog_name}")
        sink.run_argv((prog,))
    return Traits()


# ---------------------------------------------------------------- arguments

_ARG_ALARM = re.compile(
    r"169\.254\.169\.254|169\.254\.170\.2|metadata\.google\.internal|100\.100\.100\.200"
    r"|fd00:ec2::254|/dev/(?:tcp|udp)/",
    re.I,
)
_METADATA_IPS = frozenset({b"\xa9\xfe\xa9\xfe", b"\xa9\xfe\xaa\x02", b"\x64\x64\x64\xc8"})
_HOSTISH = re.compile(r"^(?:[a-z][a-z0-9+.-]*://)?(?:[^@/\s]*@)?\[?([0-9a-fx.]+)\]?(?:[:/?#]|$)", re.I)


def scan_args(args: tuple[str, ...], sink: Sink) -> None:
    """Metadata endpoints and ``/dev/tcp`` in the arguments of a command that acts on them,
    including numeric spellings of 169.254.169.254 (``2852039166``, ``0xa9fea9fe``)."""
    for arg in args:
        m = _ARG_ALARM.search(arg)
        if m:
            if m.group().lower().startswith("/dev/"):
                sink.danger("network socket via /dev/tcp (reverse shell)")
            else:
                sink.danger("cloud metadata endpoint")
            continue
        host = _HOSTISH.match(arg)
        if host and _is_metadata_ip(host.group(1)):
            sink.danger("cloud metadata endpoint")


def _is_metadata_ip(host: str) -> bool:
    try:
        return socket.inet_aton(host) in _METADATA_IPS
    except (OSError, ValueError):
        return False


@lru_cache(maxsize=4096)
def canonical_name(word: str) -> str:
    """``/usr/bin/python3.12`` -> ``python``, ``nodejs`` -> ``node``."""
    name = command_name(word)
    base = _VERSION_SUFFIX.sub("", name)
    if base in ("python", "pypy", "perl", "ruby", "php", "lua", "luajit", "pip"):
        return {"pypy": "python", "luajit": "lua"}.get(base, base)
    return "node" if name == "nodejs" else name


RULES: dict[str, Rule] = {
    **{s: shell for s in SHELLS},
    "source": source,
    ".": source,
    **{i: interpreter for i in INTERPRETERS},
    "curl": curl,
    "wget": wget,
    **{d: other_downloader for d in ("fetch", "aria2c", "http", "https", "xh", "xhs", "lwp-request", "GET")},
    "base64": base_codec,
    "base32": base_codec,
    "basenc": base_codec,
    "xxd": xxd,
    "uudecode": decompressor,
    "openssl": openssl,
    **{z: decompressor for z in ("gunzip", "zcat", "bzcat", "bunzip2", "xzcat", "unxz", "zstdcat", "lzcat")},
    **{z: decompressor for z in ("gzip", "bzip2", "xz", "zstd", "lz4")},
    "rev": rev,
    **{n: netcat for n in ("nc", "ncat", "netcat", "nc.traditional", "nc.openbsd")},
    "socat": socat,
    "telnet": telnet,
    "echo": echo,
    "printf": printf,
    **{a: awk for a in ("awk", "gawk", "mawk", "nawk")},
    "sort": pass_through,
    "rg": pass_through,
}
