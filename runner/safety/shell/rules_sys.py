"""Rules for commands that act on the system, its services and processes, on version
control, packages, containers and databases."""

from __future__ import annotations

from runner.safety.shell.common import Rule, Sink, Traits, has_long, parse_args
from runner.safety.shell.payloads import scan_sql

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


# ---------------------------------------------------------------- git

_GIT_GLOBAL_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"})


def git(name: str, args: tuple[str, ...], sink: Sink) -> None:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GIT_GLOBAL_VALUE else 1
    if i >= len(args):
        return
    sub, rest = args[i], args[i + 1 :]
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


def package(name: str, args: tuple[str, ...], sink: Sink) -> None:
    verbs = _UNINSTALL[name if not name.startswith("pip") or name == "pipx" else "pip"]
    words = [a for a in args if not a.startswith("-")]
    if name == "yarn" and words[:1] == ["global"]:
        words = words[1:]
    if words and words[0] in verbs:
        sink.danger(f"package uninstall ({name})")


def uv(name: str, args: tuple[str, ...], sink: Sink) -> None:
    words = [a for a in args if not a.startswith("-")]
    if words[:2] in (["pip", "uninstall"], ["tool", "uninstall"]):
        sink.danger("package uninstall (uv)")


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


# ---------------------------------------------------------------- containers and infra


def docker(name: str, args: tuple[str, ...], sink: Sink) -> None:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        if arg in ("-H", "--host") or arg.startswith(("--host=", "-H")):
            sink.danger("docker -H (talks to another Docker daemon)")
        i += 2 if arg in ("-H", "--host", "-c", "--context", "--config", "-l", "--log-level") else 1
    rest = args[i:]
    if rest[:2] in (("system", "prune"), ("volume", "prune"), ("volume", "rm")):
        sink.danger(f"docker {rest[0]} {rest[1]}")
    if rest[:1] in (("run",), ("create",)) and "--privileged" in rest:
        sink.danger("docker --privileged")
    compose = rest[1:] if rest[:1] == ("compose",) else rest if name == "docker-compose" else ()
    if compose[:1] == ("down",) and ({"-v", "--volumes"} & set(compose)):
        sink.danger("docker compose down -v (deletes volumes)")


def infra(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """kubectl delete, helm uninstall, terraform destroy: remove live infrastructure."""
    words = [a for a in args if not a.startswith("-")]
    destroys = {
        "kubectl": words[:1] == ["delete"],
        "helm": words[:1] in (["uninstall"], ["delete"]),
        "terraform": words[:1] == ["destroy"] or (words[:1] == ["apply"] and "-destroy" in args),
    }[name]
    if destroys:
        sink.danger(f"{name} {words[0]}")


def crontab(name: str, args: tuple[str, ...], sink: Sink) -> None:
    parsed = parse_args(args, with_value="u")
    if "r" in parsed.short:
        sink.danger("crontab -r (removes all cron jobs)")
    elif parsed.operands or "e" in parsed.short:
        sink.danger("crontab change")


# ---------------------------------------------------------------- databases

SQL_CLIENTS = frozenset(
    {"psql", "mysql", "mariadb", "sqlite3", "sqlite", "duckdb", "clickhouse-client", "clickhouse",
     "sqlcmd", "cockroach", "mycli", "pgcli", "litecli", "usql", "snowsql", "bq"}
)  # fmt: skip


def sql_client(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    scan_sql(" ".join(args), sink)
    return Traits(sql=True)


RULES: dict[str, Rule] = {
    **{p: power for p in ("shutdown", "reboot", "halt", "poweroff")},
    "init": init,
    "telinit": init,
    "systemctl": systemctl,
    "loginctl": loginctl,
    "service": service,
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
    "docker": docker,
    "podman": docker,
    "docker-compose": docker,
    "kubectl": infra,
    "helm": infra,
    "terraform": infra,
    "crontab": crontab,
    **{c: sql_client for c in SQL_CLIENTS},
}
