"""Checks on text that is not itself a shell command line: program text given to an
interpreter (``python -c``), SQL given to a database client, the structural skeleton of
a script (fork bombs), and the coarse last-resort scan for input we could not parse.

All regexes here are linear: no nested unbounded quantifiers, possessive where it
matters, so 128k characters of hostile input cannot make them slow.
"""

from __future__ import annotations

import base64
import binascii
import re

from runner.safety.shell.common import Sink

# ---------------------------------------------------------------- interpreter code

_STRING = r"""(?:'(?:[^'\\\n]|\\.){0,4000}+'|"(?:[^"\\\n]|\\.){0,4000}+")"""
_SHELL_CALL = re.compile(
    r"(?:system|popen|popen2|popen3|spawn|spawnSync|exec|execSync|execFileSync|shell_exec|passthru"
    r"|call|check_call|check_output|run|Popen|getoutput|getstatusoutput|capture2|capture3)"
    r"\s*\(\s*(\[\s*" + _STRING + r"(?:\s*,\s*" + _STRING + r")*+\s*\]|" + _STRING + r")"
)
_BACKTICKS = re.compile(r"`([^`\n]{1,4000})`|\bqx\s*[({]([^)}\n]{1,4000})[)}]")
_RMTREE = re.compile(r"(?:rmtree|rm_rf|rm_r|remove_dir_all|rmSync)\s*\(\s*(" + _STRING + r")")
_FORK_LOOP = re.compile(
    r"while\s*\(?\s*(?:True|1|true)\s*\)?\s*[:{]?\s*(?:os\.)?fork\s*\("
    r"|\bfork\s+while\s+fork\b|\bloop\s*(?:\{|do)\s*fork\b|for\s*\(\s*;\s*;\s*\)\s*\{?\s*fork\s*\(",
)
_SOCKET = re.compile(r"socket|fsockopen|TCPSocket|net\.connect|new\s+net\.Socket", re.I)
_SHELL_SPAWN = re.compile(r"pty\.spawn|dup2|subprocess|/bin/(?:ba)?sh|child_process|exec\s*\(|IO\.popen|proc_open")
_STR_ITEM = re.compile(_STRING)


def _unquote(literal: str) -> str:
    body = literal[1:-1]
    return body.replace("\\'", "'").replace('\\"', '"').replace("\\\\", "\\")


def scan_code(code: str, sink: Sink, depth: int = 0) -> None:
    """Program text for python/perl/ruby/node/php: find shell strings it hands to the
    system and recursive deletes, fork bombs and reverse shells it performs itself."""
    for m in _SHELL_CALL.finditer(code):
        arg = m.group(1)
        if arg.startswith("["):
            words = [_unquote(s) for s in _STR_ITEM.findall(arg)]
            sink.run_argv(tuple(words))
        else:
            sink.run_script(_unquote(arg))
    for m in _BACKTICKS.finditer(code):
        sink.run_script(m.group(1) or m.group(2) or "")
    for m in _RMTREE.finditer(code):
        sink.run_argv(("rm", "-rf", _unquote(m.group(1))))
    if _FORK_LOOP.search(code):
        sink.hard("fork bomb")
    if _SOCKET.search(code) and _SHELL_SPAWN.search(code):
        sink.danger("reverse shell (socket wired to a shell)")
    if depth < 3 and ("b64" in code or "base64" in code or "atob" in code):
        for text in _decoded_literals(code):
            scan_decoded(text, sink, depth + 1)


_B64_LITERAL = re.compile(
    r"(?:b64decode|decodebytes|decodestring|base64_decode|decode64|atob|urlsafe_b64decode)\s*\(\s*[bu]?("
    + _STRING
    + r")|Buffer\.from\s*\(\s*("
    + _STRING
    + r")\s*,\s*['\"]base64"
)


def _decoded_literals(code: str) -> list[str]:
    out: list[str] = []
    for m in _B64_LITERAL.finditer(code):
        literal = _unquote(m.group(1) or m.group(2))
        try:
            out.append(base64.b64decode("".join(literal.split()) + "==", validate=False).decode("utf-8", "replace"))
        except (binascii.Error, ValueError):
            continue
    return out


def scan_decoded(text: str, sink: Sink, depth: int = 1) -> None:
    """Text a program decodes at run time and then executes: scan it as program text and
    for hardline shell signatures (it may be either)."""
    sink.danger("runs a decoded payload")
    for label in coarse_labels(text):
        sink.hard(f"decoded payload containing {label}")
    scan_code(text, sink, depth)


# ---------------------------------------------------------------- how risky is inline code

# Inline programs (``python -c``, ``perl -e``, here-documents fed to an interpreter) are
# safe only when they use no capability that reaches the system: every name below is a
# way to run a command, load code, decode hidden text, touch files, processes or the
# network, or reach such a thing indirectly (``getattr``, ``__import__``, ``sys.modules``).
# Anything else an inline program can do is computing and printing.
_RISKY_CODE = re.compile(
    r"__\w*__|`|%x|\bqx\b|\$\w+\s*\(|[\])]\s*\(|&\s*[{$]|\bimport\s*\(|(?<![.\w])(?:load|open|require|include|do)\b"
    r"|\b(?:exec\w*|eval\w*|system|popen\w*|spawn\w*|fork\w*|subprocess|pty|ctypes|cffi|importlib|import_module"
    r"|send|method|io|help|getattr|setattr|delattr|globals|locals|vars|compile|breakpoint|builtins?|modules|base64|b64decode|atob"
    r"|codecs|decode\w*|fromhex|unhexlify|marshal|pickle|shelve|zlib|bz2|lzma|gzip|chr|socket|shutil|pathlib"
    r"|signal|kill\w*|unlink\w*|remove\w*|rmdir|rmtree|rm_rf|rm_r|rmSync|syscall|child_process|Function"
    r"|constructor|prototype|globalThis|global|Buffer|binding|mainModule|dlopen|vm|fs|net|https?|fetch|Deno|Bun"
    r"|Kernel|IO|File|Dir|FileUtils|Open3|Process|public_send|instance_eval|class_eval|define_method|const_get"
    r"|shell_exec|passthru|proc_open|pcntl_\w+|assert|create_function|call_user_func\w*|preg_replace"
    r"|file_put_contents|fopen|fwrite|include_once|require_once|loadstring|loadfile|dofile|setenv|putenv"
    r"|environ|ENV|chmod|chown|rename|symlink|truncate|write_text|write_bytes|mkdir|makedirs|urllib|requests"
    r"|execute|interact|webbrowser|platform|tempfile|sqlite3|multiprocessing|threading|asyncio)\b"
    r"|(?<!import )\bos\b(?!\.(?:getcwd|path|sep|linesep|name|cpu_count|getpid)\b)"
    r"|\bimport\s+os\s+as\b|\bfrom\s+os\b"
)
_PERL_EVAL_FLAG = re.compile(r"\bs([^\w\s])(?:\\.|(?!\1).)*+\1(?:\\.|(?!\1).)*+\1[a-z]*e")


def code_risk(code: str) -> str | None:
    """Why an inline program is not trivially benign, or None when it only computes."""
    m = _RISKY_CODE.search(code)
    if m:
        return f"inline code uses {m.group().strip()[:24]}"
    if "s" in code and _PERL_EVAL_FLAG.search(code):
        return "inline code evaluates a substitution (s///e)"
    return None


# ---------------------------------------------------------------- SQL

_SQL_DROP = re.compile(
    r"(?<![\w-])DROP\s++(?:TABLE|DATABASE|SCHEMA|VIEW|INDEX|USER|ROLE|TRIGGER|FUNCTION|PROCEDURE"
    r"|SEQUENCE|TYPE|EXTENSION|OWNED|COLLECTION|KEYSPACE|MATERIALIZED)\b",
    re.I,
)
_SQL_TRUNCATE = re.compile(r"(?<![\w-])TRUNCATE\s++(?:TABLE\s++|ONLY\s++)?[\w\"`\[.]", re.I)
_SQL_DELETE = re.compile(r"(?<![\w-])DELETE\s++FROM\b", re.I)
_SQL_WHERE = re.compile(r"\bWHERE\b", re.I)


_REDIS_FLUSH = re.compile(r"(?<![\w-])FLUSH(?:ALL|DB)(?![\w-])", re.I)
_MONGO_DROP = re.compile(
    r"\.(?:dropDatabase|drop|dropCollection|dropUser|dropAllUsers)\s*\(|\.(?:deleteMany|remove)\s*\(\s*\{\s*\}"
)


def scan_sql(text: str, sink: Sink) -> None:
    """SQL, redis and mongo shell commands that drop or flush data."""
    if _REDIS_FLUSH.search(text):
        sink.danger("database flush (redis FLUSHALL/FLUSHDB)")
    if "(" in text and _MONGO_DROP.search(text):
        sink.danger("database drop (mongo)")
    if _SQL_DROP.search(text):
        sink.danger("SQL DROP")
    if _SQL_TRUNCATE.search(text):
        sink.danger("SQL TRUNCATE")
    if _SQL_DELETE.search(text):
        for statement in text.split(";"):
            if _SQL_DELETE.search(statement) and not _SQL_WHERE.search(statement):
                sink.danger("SQL DELETE without WHERE")
                break


# ---------------------------------------------------------------- script structure

# On the skeleton (unquoted words and operators joined by single spaces):
# "NAME ( ) { NAME | NAME & ; }" or "function NAME { NAME | NAME & }".
_FORK_BOMB = re.compile(r"(?:^| )(?:function )?([^ ]{1,64}) (?:\( \) )?\{ \1 \|&? \1 & (?:; )?\}")


def is_fork_bomb(skeleton: str) -> bool:
    return "{" in skeleton and "&" in skeleton and bool(_FORK_BOMB.search(skeleton))


# ---------------------------------------------------------------- last resort

_DELETE_QUOTES = str.maketrans("", "", "'\"\\")
_IFS_OR_EMPTY = re.compile(r"\$\{IFS[^}]{0,16}\}|\$IFS\b|\$[@*]")
_SYS = r"(?:bin|boot|etc|home|lib|lib64|root|sbin|usr|var)"
# Each pattern starts with a literal, so the regex engine can skip ahead to candidates,
# and each is tried only when its keyword occurs at all.
_COARSE: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "rm",
        re.compile(
            r"rm(?<![\w./-]rm)\s++(?:-\S*+\s++)*?-[^\s]*?[rR]\S*+\s++(?:-\S*+\s++)*+"
            r"(?:/|~|\$HOME|\$\{HOME\}|/" + _SYS + r")/?\*?(?=[\s;&|)]|$)"
        ),
        "recursive delete of / or a system directory",
    ),
    (
        "ch",
        re.compile(
            r"ch(?:mod|own|grp)(?<![\w./-]ch...)\s++(?:-\S*+\s++)*?(?:-[^\s-]*?R\S*+|--recursive)\s++"
            r"(?:-\S*+\s++)*+\S++\s++(?:-\S*+\s++)*+(?:/|~|\$HOME|\$\{HOME\}|/" + _SYS + r")/?\*?(?=[\s;&|)]|$)"
        ),
        "recursive mode or owner change of / or a system directory",
    ),
    ("kill", re.compile(r"kill(?<![\w-]kill)\s++(?:-\S++\s++)*?-1\b"), "kill -1"),
    ("init", re.compile(r"init(?<![\w-]init)\s++[06]\b"), "shutdown or reboot"),
    (
        "systemctl",
        re.compile(r"systemctl\s++(?:\S++\s++){0,4}?(?:poweroff|reboot|halt|kexec)\b"),
        "shutdown or reboot",
    ),
)
_POWER_WORDS = re.compile(r"(?<![\w-])(?:shutdown|reboot|poweroff|halt)(?![\w-])")
_FORK_BOMB_COARSE = re.compile(r"(?<![^\s;&|])([^\s(){}|&;]{1,64})\s*+\(\s*+\)\s*+\{\s*+\1\s*+\|\s*+\1\s*+&")
_BLOCK = r"/dev/(?:sd|nvme|vd|hd|xvd|mmcblk|dm-|md|loop|mapper/|disk/)"
_BLOCK_DEVICE = re.compile(_BLOCK)
_DIRECT_WRITE = re.compile(r"of=" + _BLOCK + r"|>\s*+" + _BLOCK)
_DISK_TOOL = re.compile(r"(?<![\w-])(?:mkfs\S*|mke2fs|mkswap|wipefs|blkdiscard|shred)\s")
_COMMAND_BREAK = re.compile(r"[;&|\n]")


def _writes_block_device(flat: str) -> bool:
    """``of=`` or ``>`` onto a block device, or a disk tool and a block device in the same
    command (in either order, so every check stays a single linear pass)."""
    if _DIRECT_WRITE.search(flat):
        return True
    return any(
        "/dev/" in part and _BLOCK_DEVICE.search(part) and _DISK_TOOL.search(part)
        for part in _COMMAND_BREAK.split(flat)
    )


def coarse_hardline(text: str) -> list[str]:
    """``coarse_labels`` worded for input that failed closed."""
    return [f"unparseable input containing {label}" for label in coarse_labels(text)]


def coarse_labels(text: str) -> list[str]:
    """Hardline signatures anywhere in text we could not parse (or that is too long to).

    Quotes and backslashes are deleted and ``$IFS``/``$@`` become blanks first, so
    ``r''m -rf /`` and ``rm${IFS}-rf${IFS}/`` still match; this over-matches (an
    ``echo reboot`` counts), which is acceptable only because the input already failed
    closed.
    """
    flat = _IFS_OR_EMPTY.sub(" ", text.translate(_DELETE_QUOTES))
    found: dict[str, None] = {}
    for keyword, pattern, label in _COARSE:
        if keyword in flat and pattern.search(flat):
            found[label] = None
    if "{" in flat and _FORK_BOMB_COARSE.search(flat):
        found["fork bomb"] = None
    if any(w in flat for w in ("shutdown", "reboot", "poweroff", "halt")) and _POWER_WORDS.search(flat):
        found["shutdown or reboot"] = None
    if "/dev/" in flat and _writes_block_device(flat):
        found["write to a block device"] = None
    return list(found)
