"""Path questions the rules ask: is this the root, a system directory, a home directory,
a block device, or a file whose modification changes how the machine or the user's
shell behaves?

Paths are compared after a purely lexical normalisation (no filesystem access): ``~``,
``$HOME`` and ``${HOME}`` become ``/home/~``, a tracked working directory is prepended to
relative paths, and ``.``/``..``/duplicate slashes are folded (``/tmp/../`` is ``/``).
"""

from __future__ import annotations

import posixpath
import re

HOME = "/home/~"

_HOME_PREFIX = re.compile(r"^(?:~|\$HOME|\$\{HOME\})(?=/|$)")
_OTHER_HOME = re.compile(r"^~([A-Za-z_][\w.-]*)(?=/|$)")
_GLOB = re.compile(r"[*?\[]")
_BRACKET = re.compile(r"\[[^\]]*\]")

# Deleting (or moving away) one of these, or all of its entries, breaks the machine.
SYSTEM_DIRS = frozenset(
    {
        "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
        "/opt", "/proc", "/root", "/sbin", "/srv", "/sys", "/usr", "/var",
        "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec",
        "/usr/include", "/usr/share", "/usr/local", "/var/lib",
        "/System", "/Library", "/Applications", "/Users", "/private",
    }
)  # fmt: skip
_HOME_PARENTS = ("/home", "/Users")

_BLOCK_DEVICE = re.compile(r"^/dev/(?:sd|nvme|vd|hd|xvd|mmcblk|dm-|md|loop|mapper/|disk/)")
_HARMLESS_DEVICES = frozenset(
    {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
     "/dev/stdout", "/dev/stderr", "/dev/stdin"}
)  # fmt: skip

RC_FILES = frozenset(
    {
        ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
        ".zprofile", ".zshenv", ".zlogin", ".zlogout", ".kshrc", ".cshrc", ".tcshrc",
        ".mkshrc", "config.fish", ".inputrc",
    }
)  # fmt: skip
_CREDENTIAL_FILES = frozenset({".netrc", ".pgpass", ".git-credentials"})
# Every path sensitive_write flags contains one of these; most paths contain none.
_MAYBE_SENSITIVE = re.compile(
    r"etc|\.ssh|rc|\.env|profile|bash_log|zlog|zshenv|netrc|pgpass|credentials|\.fish|history|git"
)


def normalize_path(path: str, cwd: str | None = None) -> str:
    """Lexically normalise ``path``; relative paths stay relative unless ``cwd`` is known."""
    if not path:
        return path
    path = _HOME_PREFIX.sub(HOME, path, count=1)
    path = _OTHER_HOME.sub(lambda m: "/home/" + m.group(1), path, count=1)
    if not path.startswith("/"):
        if cwd is None:
            return posixpath.normpath(path)
        path = cwd.rstrip("/") + "/" + path
    path = "/" + path.lstrip("/")  # POSIX keeps a leading "//"; the kernel does not care
    return posixpath.normpath(path)


def _is_broad_glob(component: str) -> bool:
    """A glob that matches (nearly) every entry of a directory: ``*``, ``.*``, ``?*``, ``[!.]*``."""
    return bool(_GLOB.search(component)) and not _BRACKET.sub("", component).strip("*?.")


def _is_protected(path: str) -> bool:
    if path == "/" or path in SYSTEM_DIRS:
        return True
    parent, name = posixpath.split(path)
    return parent in _HOME_PARENTS and bool(name) and not _GLOB.search(name)


_UNRESOLVED = re.compile(r"\$[({A-Za-z_0-9@*#?!$-]|`")
_LEADING_HOME = re.compile(r"^(?:\$HOME|\$\{HOME\})(?=/|$)")


def with_unknown_rest(path: str) -> str:
    """A path whose text still holds an expansion we could not resolve (``/$(true)``,
    ``/usr/$x``) can be anything that starts with its static prefix, the empty string
    included: it becomes the prefix followed by ``*``, so ``/$x`` counts as ``/*``."""
    start = 0
    home = _LEADING_HOME.match(path)
    if home:
        start = home.end()
    m = _UNRESOLVED.search(path, start)
    return path if m is None else path[: m.start()] + "*"


def protected_target(path: str, cwd: str | None = None) -> str | None:
    """If deleting ``path`` recursively would wipe the system or a home, say what it wipes.

    ``/``, a system directory, a home directory, or a broad glob directly inside one of
    them (``/*``, ``/etc/*``, ``~/.*``). Any glob directly under ``/`` counts, since
    ``/u*`` already matches ``/usr``. An unresolved expansion counts as a glob.
    """
    if "$" in path or "`" in path:
        path = with_unknown_rest(path)
    norm = normalize_path(path, cwd)
    if not norm.startswith("/"):
        return None
    if _is_protected(norm):
        return _describe(norm)
    parent, name = posixpath.split(norm)
    if parent == "/" and _GLOB.search(name):
        return "/"
    if _is_protected(parent) and _is_broad_glob(name):
        return _describe(parent)
    return None


def _describe(path: str) -> str:
    if path == HOME or (posixpath.dirname(path) in _HOME_PARENTS and path not in SYSTEM_DIRS):
        return "the home directory" if path == HOME else f"home directory {path}"
    return path


def is_block_device(path: str) -> bool:
    if "dev" not in path:
        return False
    norm = normalize_path(path)
    return norm not in _HARMLESS_DEVICES and bool(_BLOCK_DEVICE.match(norm))


def sensitive_write(path: str, cwd: str | None = None) -> str | None:
    """Why writing to ``path`` needs a decision (system config, keys, shell start-up,
    secrets files), or None."""
    if not _MAYBE_SENSITIVE.search(path) and not (cwd and _MAYBE_SENSITIVE.search(cwd)):
        return None
    norm = normalize_path(path, cwd)
    if norm == "/etc" or norm.startswith("/etc/"):
        return "write into /etc"
    if "/.ssh/" in norm or norm.endswith("/.ssh") or norm == ".ssh" or norm.startswith(".ssh/"):
        return "write into ~/.ssh"
    name = posixpath.basename(norm)
    if name in RC_FILES:
        return f"write to shell start-up file {name}"
    if name.startswith(".env"):
        return f"write to environment file {name}"
    if name in _CREDENTIAL_FILES:
        return f"write to credentials file {name}"
    if name.startswith(".") and (name.endswith("_history") or name == ".history"):
        return f"write to shell history file {name} (covering tracks)"
    if "/.git/hooks/" in f"/{norm}" or f"/{norm}".endswith("/.git/config") or name == ".gitconfig":
        return "write to git hooks or configuration (run by later git commands)"
    if norm.endswith(".aws/credentials"):
        return "write to credentials file .aws/credentials"
    return None


def is_sysrq(path: str, cwd: str | None = None) -> bool:
    return "sysrq" in path and normalize_path(path, cwd) == "/proc/sysrq-trigger"


_PROC_FD = re.compile(r"^/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/fd/")


def kernel_write(path: str, cwd: str | None = None) -> str | None:
    """Why writing to ``path`` changes the running kernel or a device (``/proc/sys``,
    ``/sys``, other ``/proc`` files), or None. A process's own descriptors
    (``/proc/self/fd/1``) are only its output."""
    if "proc" not in path and "sys" not in path and not (cwd and ("proc" in cwd or "sys" in cwd)):
        return None
    norm = normalize_path(path, cwd)
    if norm == "/proc/sys" or norm.startswith("/proc/sys/"):
        return "write under /proc/sys (kernel settings)"
    if norm == "/sys" or norm.startswith("/sys/"):
        return "write under /sys (kernel and device settings)"
    if norm.startswith("/proc/") and not _PROC_FD.match(norm):
        return "write under /proc (kernel and process settings)"
    return None
