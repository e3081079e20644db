"""Rules for commands that act on the system, its services and processes, on version
control, packages, infrastructure and databases."""

from __future__ import annotations

import re

from runner.safety.shell.common import Rule, Sink, Traits, has_long, parse_args
from runner.safety.shell.payloads import scan_sql
from runner.safety.shell.rules_exec import exec_value
from runner.safety.shell.rules_written import git_hooks, package_scripts

# ---------------------------------------------------------------- power and processes


def power(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """shutdown, reboot, halt, poweroff. ``shutdown -c`` cancels and ``-k`` only warns."""
    if name == "shutdown" and {"-c", "-k", "--help"} & set(args):
        return
    if "--help" in args:
        return
    sink.hard(f"{name} (takes the machine down)")


def init(name: str, args: tuple[str, ...], sink: Sink) -> None:
    if args[:1] in (("0",), ("6",)):
        sink.hard(f"{name} {args[0]} (takes the machine down)")


_SYSTEMCTL_VALUE = "HMtpsn"
_SYSTEMCTL_LONG = "--host --machine --type --property --signal --lines --root --job-mode --kill-whom --state"
_POWER_VERBS = frozenset({"poweroff", "reboot", "halt", "kexec", "soft-reboot"})
_STOP_VERBS = frozenset(
    {"stop", "disable", "mask", "kill", "isolate", "rescue", "emergency", "suspend", "hibernate",
     "hybrid-sleep", "suspend-then-hibernate"}
)  # fmt: skip
_POWER_TARGETS = frozenset({"poweroff.target", "reboot.target", "halt.target", "kexec.target"})


def systemctl(name: str, args: tuple[str, ...], sink: Sink) -> None:
    parsed = parse_args(args, with_value=_SYSTEMCTL_VALUE, long_with_value=_SYSTEMCTL_LONG)
    if not parsed.operands:
        return
    verb, units = parsed.operands[0], parsed.operands[1:]
    if verb in _POWER_VERBS or (verb in ("start", "isolate") and _POWER_TARGETS & set(units)):
        sink.hard(f"systemctl {verb} (takes the machine down)")
    elif verb in _STOP_VERBS:
        sink.danger(f"systemctl {verb}")


def loginctl(name: str, args: tuple[str, ...], sink: Sink) -> None:
    if args[:1] and args[0] in ("poweroff", "reboot", "halt", "kexec"):
        sink.hard(f"loginctl {args[0]} (takes the machine down)")


def service(name: str, args: tuple[str, ...], sink: Sink) -> None:
    if len(args) >= 2 and args[1] in ("stop", "disable", "mask"):
        sink.danger(f"service {args[1]}")


def kill(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``kill -1`` / ``kill -9 -1`` signal every process the user can reach."""
    if args == ("-1",):
        sink.hard("kill -1 (every process)")
        return
    pids: list[str] = []
    signal_given = False
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            pids.extend(args[i:])
            break
        if arg in ("-l", "-L", "--list", "--table"):
            return
        if arg in ("-s", "-n", "--signal"):
            i += 1
            signal_given = True
        elif arg.startswith("-") and len(arg) > 1 and not signal_given:
            signal_given = True
        else:
            pids.append(arg)
    if "-1" in pids:
        sink.hard("kill -1 (every process)")
    elif "1" in pids:
        sink.danger("kill of pid 1 (init)")


_KILL_SIGNALS = frozenset({"9", "KILL", "SIGKILL"})


def pkill(name: str, args: tuple[str, ...], sink: Sink) -> None:
    for i, arg in enumerate(args):
        if arg.startswith("-") and arg.lstrip("-").upper() in _KILL_SIGNALS:
            sink.danger(f"{name} -9")
            return
        if arg == "--signal" and i + 1 < len(args) and args[i + 1].upper() in _KILL_SIGNALS:
            sink.danger(f"{name} -9")
            return
        if arg.startswith("--signal=") and arg.split("=", 1)[1].upper() in _KILL_SIGNALS:
            sink.danger(f"{name} -9")
            return


def killall(name: str, args: tuple[str, ...], sink: Sink) -> None:
    if name == "killall5":
        sink.hard("killall5 (every process)")
    else:
        sink.danger("killall")


def sysctl(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``sysctl -w key=value``, ``sysctl key=value``, ``-p``/``--system``: kernel settings change."""
    parsed = parse_args(args, with_value="p", long_with_value="--load --pattern")
    loads = "p" in parsed.short or has_long(parsed, "--load", "--system")
    if loads or "w" in parsed.short or has_long(parsed, "--write") or any("=" in op for op in parsed.operands):
        sink.danger("kernel setting change (sysctl)")


# ---------------------------------------------------------------- git

_GIT_GLOBAL_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"})


# Configuration keys whose value git runs as a command (``!``-aliases included).
_GIT_EXEC_KEY = re.compile(
    r"core\.(?:fsmonitor|sshcommand|pager|editor|askpass|gitproxy|hookspath|alternaterefscommand)"
    r"|(?:sequence|gpg(?:\.\w+)?)\.(?:editor|program)|pager\..+|diff\.(?:external|.+\.(?:textconv|command))"
    r"|(?:filter|merge|difftool|mergetool)\..+\.(?:clean|smudge|process|driver|cmd|path)"
    r"|credential(?:\..+)?\.helper|uploadpack\.packobjectshook|remote\..+\.(?:uploadpack|receivepack)"
    r"|alias\..+|protocol\..+|include(?:if)?\..*path|ssh\.variant|receive\.procreceiverefs|init\.templatedir",
    re.I,
)


def _git_config_value(key: str, value: str, sink: Sink, how: str) -> None:
    if not _GIT_EXEC_KEY.fullmatch(key):
        return
    if key.lower().startswith("alias.") and not value.startswith("!"):
        return  # an alias of git sub-commands runs no shell
    exec_value(value.lstrip("!"), sink, f"git {how} {key}", always=True)


def _git_globals(args: tuple[str, ...], sink: Sink) -> int:
    """Skip git's global options; ``-c key=value`` that runs a command is examined."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        if arg == "-c" and i + 1 < len(args):
            key, _, value = args[i + 1].partition("=")
            _git_config_value(key, value, sink, "-c")
        elif arg.startswith("--config-env"):
            sink.danger("git --config-env (configuration from the environment)")
        i += 2 if arg in _GIT_GLOBAL_VALUE else 1
    return i


_GIT_EXEC_OPTIONS = frozenset({"--upload-pack", "--receive-pack", "--exec"})
_GIT_REMOTE_SUBS = frozenset({"clone", "fetch", "pull", "ls-remote", "push", "archive"})


def git(name: str, args: tuple[str, ...], sink: Sink) -> None:
    if sink.written:
        git_hooks(sink)
    i = _git_globals(args, sink)
    if i >= len(args):
        return
    sub, rest = args[i], args[i + 1 :]
    if sub == "config":
        words = [a for a in rest if not a.startswith("-")]
        if len(words) >= 2:
            _git_config_value(words[0], words[1], sink, "config")
    for k, arg in enumerate(rest):
        opt, eq, value = arg.partition("=")
        if sub in _GIT_REMOTE_SUBS and (opt in _GIT_EXEC_OPTIONS or (opt == "-u" and sub == "clone")):
            value = value if eq else (rest[k + 1] if k + 1 < len(rest) else "")
            exec_value(value, sink, f"git {sub} {opt}", always=True)
    parsed = parse_args(rest, with_value="mCcoe" if sub != "push" else "o")
    if sub == "reset" and "--hard" in rest:
        sink.danger("git reset --hard")
    elif sub == "push" and (
        "f" in parsed.short
        or has_long(parsed, "--force", "--force-with-lease", "--force-if-includes", "--mirror")
        or any(op.startswith("+") for op in parsed.operands)
    ):
        sink.danger("git push --force")
    elif sub == "push" and (
        "d" in parsed.short
        or has_long(parsed, "--delete", "--prune")
        or any(op.startswith(":") and len(op) > 1 for op in parsed.operands)
    ):
        sink.danger("git push --delete (deletes remote refs)")
    elif sub == "clean" and ("f" in parsed.short or has_long(parsed, "--force")):
        sink.danger("git clean -f")
    elif sub == "branch" and (
        "D" in parsed.short
        or (
            ({"d"} & parsed.short or has_long(parsed, "--delete"))
            and ("f" in parsed.short or has_long(parsed, "--force"))
        )
    ):
        sink.danger("git branch -D")


# ---------------------------------------------------------------- packages

_UNINSTALL: dict[str, frozenset[str]] = {
    "pip": frozenset({"uninstall"}),
    "pipx": frozenset({"uninstall", "uninstall-all"}),
    "npm": frozenset({"uninstall", "remove", "rm", "r", "un", "unlink"}),
    "yarn": frozenset({"remove"}),
    "pnpm": frozenset({"remove", "rm", "uninstall", "un"}),
    "apt": frozenset({"remove", "purge", "autoremove"}),
    "apt-get": frozenset({"remove", "purge", "autoremove"}),
    "aptitude": frozenset({"remove", "purge"}),
    "yum": frozenset({"remove", "erase", "autoremove"}),
    "dnf": frozenset({"remove", "erase", "autoremove"}),
    "microdnf": frozenset({"remove"}),
    "zypper": frozenset({"remove", "rm"}),
    "apk": frozenset({"del"}),
    "brew": frozenset({"uninstall", "remove", "rm"}),
    "snap": frozenset({"remove"}),
    "flatpak": frozenset({"uninstall"}),
    "gem": frozenset({"uninstall"}),
    "cargo": frozenset({"uninstall"}),
    "conda": frozenset({"remove", "uninstall"}),
    "mamba": frozenset({"remove", "uninstall"}),
}


_PUBLISH: dict[str, frozenset[str]] = {
    "npm": frozenset({"publish", "unpublish", "deprecate"}),
    "yarn": frozenset({"publish", "npm"}),
    "pnpm": frozenset({"publish"}),
    "gem": frozenset({"push", "yank"}),
    "cargo": frozenset({"publish", "yank"}),
}


def package(name: str, args: tuple[str, ...], sink: Sink) -> None:
    verbs = _UNINSTALL[name if not name.startswith("pip") or name == "pipx" else "pip"]
    words = [a for a in args if not a.startswith("-")]
    if name == "yarn" and words[:1] == ["global"]:
        words = words[1:]
    if words and words[0] in verbs:
        sink.danger(f"package uninstall ({name})")
    if words and words[0] in _PUBLISH.get(name, ()):
        sink.danger(f"package publish ({name} {words[0]})")
    if name in ("npm", "yarn", "pnpm"):
        package_scripts(name, args, sink)


_PUBLISHERS: dict[str, tuple[str, ...]] = {
    "twine": ("upload", "register"),
    "poetry": ("publish",),
    "flit": ("publish",),
    "hatch": ("publish",),
    "uv": ("publish",),
    "pdm": ("publish",),
    "dotnet": ("nuget",),
    "nuget": ("push",),
    "mvn": ("deploy",),
    "gradle": ("publish",),
    "helm": ("push",),
}


def publisher(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``twine upload``, ``poetry publish``, ``mvn deploy``: a release leaves the machine."""
    words = [a for a in args if not a.startswith("-")]
    if words and words[0] in _PUBLISHERS[name]:
        sink.danger(f"package publish ({name} {words[0]})")


def uv(name: str, args: tuple[str, ...], sink: Sink) -> None:
    words = [a for a in args if not a.startswith("-")]
    if words[:2] in (["pip", "uninstall"], ["tool", "uninstall"]):
        sink.danger("package uninstall (uv)")
    publisher(name, args, sink)


def dpkg_like(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """dpkg -r/-P, rpm -e, pacman -R*: removal is an option, not a sub-command."""
    parsed = parse_args(args)
    removes = {
        "dpkg": ("r" in parsed.short or "P" in parsed.short or has_long(parsed, "--remove", "--purge")),
        "rpm": "e" in parsed.short or has_long(parsed, "--erase"),
        "pacman": any(a.startswith("-R") for a in args) or has_long(parsed, "--remove"),
    }[name]
    if removes:
        sink.danger(f"package uninstall ({name})")


# ---------------------------------------------------------------- infrastructure


def infra(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """kubectl delete, helm uninstall, terraform destroy: remove live infrastructure."""
    words = [a for a in args if not a.startswith("-")]
    destroys = {
        "kubectl": words[:1] == ["delete"],
        "helm": words[:1] in (["uninstall"], ["delete"], ["push"]),
        "terraform": words[:1] == ["destroy"] or (words[:1] == ["apply"] and "-destroy" in args),
    }[name]
    if destroys:
        sink.danger(f"{name} {words[0]}")


# ---------------------------------------------------------------- firewall and accounts


def iptables(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``-F``/``-X``/``-Z`` flush or delete chains; ``-P CHAIN DROP`` cuts the machine off."""
    parsed = parse_args(args, with_value="tAIDRNEPLSjgiocmdsw", long_with_value="--table --policy")
    if {"F", "X"} & parsed.short or has_long(parsed, "--flush", "--delete-chain"):
        sink.danger(f"firewall flush ({name})")
    policy = parsed.values.get("-P") or parsed.values.get("--policy")
    if policy is not None and any(a.upper() in ("DROP", "REJECT") for a in args):
        sink.danger(f"firewall default policy DROP ({name})")


def nft(name: str, args: tuple[str, ...], sink: Sink) -> None:
    words = [a for a in args if not a.startswith("-")]
    if words[:1] in (["flush"], ["delete"], ["destroy"]):
        sink.danger(f"firewall flush (nft {words[0]})")


def ufw(name: str, args: tuple[str, ...], sink: Sink) -> None:
    words = [a for a in args if not a.startswith("-")]
    if words[:1] in (["disable"], ["reset"]) or words[:2] == ["default", "deny"]:
        sink.danger(f"firewall change (ufw {words[0]})")


def firewall_cmd(name: str, args: tuple[str, ...], sink: Sink) -> None:
    if any(a in ("--panic-on", "--complete-reload") or a.startswith("--remove-") for a in args):
        sink.danger("firewall change (firewall-cmd)")


def account_removal(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """userdel, deluser, groupdel, delgroup, chpasswd: accounts and passwords change."""
    if "--help" not in args:
        sink.danger(f"user account change ({name})")


def passwd(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``passwd -d`` empties a password, ``-l`` locks the account, ``--stdin`` sets it."""
    parsed = parse_args(args, with_value="nxwi")
    if {"d", "l", "e", "u"} & parsed.short or has_long(parsed, "--delete", "--lock", "--expire", "--stdin"):
        sink.danger(f"password change ({name})")


def usermod(name: str, args: tuple[str, ...], sink: Sink) -> None:
    parsed = parse_args(args, with_value="cdegGlpsuf", long_with_value="--password --shell --expiredate")
    if {"L", "p", "e"} & parsed.short or has_long(parsed, "--lock", "--password", "--expiredate"):
        sink.danger(f"user account change ({name})")


# ---------------------------------------------------------------- cloud


def aws(name: str, args: tuple[str, ...], sink: Sink) -> None:
    words = [a for a in args if not a.startswith("-")]
    if words[:2] == ["s3", "rm"] and ("--recursive" in args or "-r" in args):
        sink.danger("cloud recursive delete (aws s3 rm --recursive)")
    elif words[:2] == ["s3", "rb"]:
        sink.danger("cloud bucket delete (aws s3 rb)")
    elif words[:2] == ["s3", "sync"] and "--delete" in args:
        sink.danger("cloud delete (aws s3 sync --delete)")
    elif len(words) >= 2 and words[1].startswith(("delete", "terminate", "remove", "deregister", "purge")):
        sink.danger(f"cloud delete (aws {words[0]} {words[1]})")


def gsutil(name: str, args: tuple[str, ...], sink: Sink) -> None:
    words = [a for a in args if not a.startswith("-")]
    sub = words[0] if words else ""
    after = args[args.index(sub) + 1 :] if sub else ()
    flags = parse_args(after).short
    if (sub == "rm" and {"r", "R", "a"} & flags) or sub == "rb" or (sub == "rsync" and "d" in flags):
        sink.danger(f"cloud delete (gsutil {sub})")


def cloud_cli(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """gcloud, az, doctl: any ``delete`` verb removes live resources."""
    words = [a for a in args if not a.startswith("-")]
    if any(w in ("delete", "delete-batch", "purge") for w in words):
        sink.danger(f"cloud delete ({name} ... delete)")
    elif name == "gcloud" and words[:2] == ["storage", "rm"]:
        sink.danger("cloud delete (gcloud storage rm)")


# ---------------------------------------------------------------- databases

SQL_CLIENTS = frozenset(
    {"psql", "mysql", "mariadb", "sqlite3", "sqlite", "duckdb", "clickhouse-client", "clickhouse",
     "sqlcmd", "cockroach", "mycli", "pgcli", "litecli", "usql", "snowsql", "bq", "redis-cli",
     "valkey-cli", "keydb-cli", "mongo", "mongosh"}
)  # fmt: skip


def sql_client(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    """SQL clients, redis-cli and the mongo shells: their arguments and stdin are scanned."""
    scan_sql(" ".join(args), sink)
    return Traits(sql=True)


RULES: dict[str, Rule] = {
    **{p: power for p in ("shutdown", "reboot", "halt", "poweroff")},
    "init": init,
    "telinit": init,
    "systemctl": systemctl,
    "loginctl": loginctl,
    "service": service,
    "sysctl": sysctl,
    "kill": kill,
    "pkill": pkill,
    "killall": killall,
    "killall5": killall,
    "git": git,
    **{p: package for p in _UNINSTALL},
    "pip3": package,
    "uv": uv,
    "dpkg": dpkg_like,
    "rpm": dpkg_like,
    "pacman": dpkg_like,
    "kubectl": infra,
    "helm": infra,
    "terraform": infra,
    **{p: publisher for p in _PUBLISHERS if p not in ("uv", "helm")},
    **{f: iptables for f in ("iptables", "ip6tables", "iptables-legacy", "iptables-nft", "ip6tables-legacy")},
    "nft": nft,
    "ufw": ufw,
    "firewall-cmd": firewall_cmd,
    **{a: account_removal for a in ("userdel", "deluser", "groupdel", "delgroup", "chpasswd")},
    "passwd": passwd,
    "usermod": usermod,
    "aws": aws,
    "gsutil": gsutil,
    **{c: cloud_cli for c in ("gcloud", "az", "doctl")},
    **{c: sql_client for c in SQL_CLIENTS},
}
