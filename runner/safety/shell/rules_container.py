"""Container CLIs: docker, podman, nerdctl (and docker-compose), and bubblewrap (``bwrap``).

``docker run [OPTS] IMAGE CMD ...`` (also ``create``, ``container run``) and ``docker exec
[OPTS] CONTAINER CMD ...`` run CMD: it is classified as a command. What it can reach on
the host decides how much a finding inside counts:

* A host mount of ``/``, a system folder or a home (``-v /:/h``, ``--mount
  type=bind,source=/etc,...``), the container runtime's socket, ``--privileged``,
  ``--pid=host`` (``--ipc``/``--userns``), ``--cap-add`` of ``ALL``/``SYS_ADMIN``/...,
  a block ``--device`` or an unconfined ``--security-opt`` expose the host: dangerous,
  and CMD's findings count in full. Mount targets in CMD's words are put back to their
  host paths first, so ``-v /:/h ... rm -rf /h`` is ``rm -rf /``: hardline.
* Otherwise only the container's own files and processes (and the mounted project
  folders) are in reach: CMD's hardline findings count as dangerous (a fork bomb still
  exhausts the host), its dangerous ones as dangerous (``npm publish``, ``git push
  --force`` leave the machine from a container too).

Also: ``-H``/``--host`` (another daemon), prunes of volumes, pushes of images,
``compose down -v``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from runner.safety.shell.common import Rule, Sink
from runner.safety.shell.paths import is_block_device, normalize_path, protected_target

_GLOBAL_VALUE = frozenset({"-H", "--host", "-c", "--context", "--config", "-l", "--log-level"})
_VALUE_SHORT = "veplwumhacU"  # docker run's short options that take a value (the rest are flags)
_BOOL_LONG = frozenset(
    {"--rm", "--detach", "--interactive", "--tty", "--privileged", "--init", "--read-only", "--publish-all",
     "--no-healthcheck", "--oom-kill-disable", "--sig-proxy", "--quiet", "--help", "--disable-content-trust",
     "--use-api-socket", "--replace", "--rmi", "--tls-verify", "--systemd", "--no-hosts", "--http-proxy"}
)  # fmt: skip
_HOST_NAMESPACES = ("--pid", "--ipc", "--userns", "--uts", "--cgroupns")
_ESCAPING_CAPS = frozenset({"ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_PTRACE", "SYS_RAWIO", "DAC_READ_SEARCH", "BPF"})
_UNCONFINED = re.compile(r"(?:seccomp|apparmor|systempaths)[=:]unconfined|label[=:]disable", re.I)
_RUNTIME_SOCKET = re.compile(r"(?:docker|containerd|podman|crio|buildkit)[\w.-]*\.sock$")
_PATHISH = ("/", "~", "$", ".")


@dataclass
class _Run:
    """What ``docker run``'s options say about the host's exposure, and what runs."""

    mounts: list[tuple[str, str]] = field(default_factory=list)  # (host source, container target)
    exposures: list[str] = field(default_factory=list)  # why the host is in reach
    entrypoint: str | None = None
    command: tuple[str, ...] = ()


def container(name: str, args: tuple[str, ...], sink: Sink) -> None:
    rest = args[_global_options(args, sink) :]
    _management(name, rest, sink)
    if rest[:1] == ("container",):
        rest = rest[1:]
    verb, after = (rest[0], rest[1:]) if rest else ("", ())
    if verb in ("run", "create"):
        _run(name, _read_run(after), sink)
    elif verb == "exec":
        _exec(name, after, sink)


def _global_options(args: tuple[str, ...], sink: Sink) -> int:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        if arg in ("-H", "--host") or arg.startswith(("--host=", "-H")):
            sink.danger("docker -H (talks to another Docker daemon)")
        i += 2 if arg in _GLOBAL_VALUE else 1
    return i


def _management(name: str, rest: tuple[str, ...], sink: Sink) -> None:
    """Volume prunes, image pushes, ``compose down -v``."""
    if rest[:2] in (("system", "prune"), ("volume", "prune"), ("volume", "rm")):
        sink.danger(f"docker {rest[0]} {rest[1]}")
    if rest[:1] == ("push",) or rest[:2] in (("image", "push"), ("manifest", "push"), ("buildx", "imagetools")):
        sink.danger(f"{name} push (publishes an image)")
    compose = rest[1:] if rest[:1] == ("compose",) else rest if name == "docker-compose" else ()
    if compose[:1] == ("down",) and ({"-v", "--volumes"} & set(compose)):
        sink.danger("docker compose down -v (deletes volumes)")


# ---------------------------------------------------------------- run


def _read_run(args: tuple[str, ...]) -> _Run:
    """Options up to the image; the image's command after it."""
    run = _Run()
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "-":
        if args[i] == "--":
            i += 1
            break
        option, value, used = _option_at(args, i)
        _apply(run, option, value)
        i += used
    run.command = args[i + 1 :]
    return run


def _option_at(args: tuple[str, ...], i: int) -> tuple[str, str, int]:
    """The option at ``args[i]`` (the last letter of a short cluster that takes a value),
    its value, and how many words it used."""
    arg = args[i]
    following = args[i + 1] if i + 1 < len(args) else ""
    if arg.startswith("--"):
        option, eq, value = arg.partition("=")
        if eq or option in _BOOL_LONG:
            return option, value, 1
        return option, following, 2
    for k, letter in enumerate(arg[1:], start=1):
        if letter in _VALUE_SHORT:
            attached = arg[k + 1 :]
            return "-" + letter, attached or following, 1 if attached else 2
    return arg, "", 1


def _apply(run: _Run, option: str, value: str) -> None:
    if option in ("-v", "--volume"):
        _volume(run, value)
    elif option == "--mount":
        _mount(run, value)
    elif option == "--entrypoint":
        run.entrypoint = value
    else:
        reason = _exposure(option, value)
        if reason:
            run.exposures.append(reason)


def _exposure(option: str, value: str) -> str | None:
    """Why an option (other than a mount) puts the host in reach, or None."""
    if option == "--privileged":
        return "--privileged"
    if option in _HOST_NAMESPACES and value == "host":
        return f"{option}=host"
    if option == "--cap-add" and value.upper().removeprefix("CAP_") in _ESCAPING_CAPS:
        return f"--cap-add={value}"
    if option == "--device" and is_block_device(value.split(":", 1)[0]):
        return f"--device={value}"
    if option == "--security-opt" and _UNCONFINED.search(value):
        return f"--security-opt={value}"
    return None


def _volume(run: _Run, value: str) -> None:
    """``-v SRC:DST[:MODE]``; a named volume (``data:/x``) is no host path."""
    parts = value.split(":")
    if len(parts) >= 2 and parts[0].startswith(_PATHISH):
        run.mounts.append((parts[0], parts[1]))


def _mount(run: _Run, value: str) -> None:
    """``--mount type=bind,source=SRC,target=DST``."""
    fields = dict(item.partition("=")[::2] for item in value.split(","))
    source = fields.get("source") or fields.get("src") or ""
    target = fields.get("target") or fields.get("destination") or fields.get("dst") or ""
    if source.startswith(_PATHISH) and target:
        run.mounts.append((source, target))


def _run(name: str, run: _Run, sink: Sink, shares_processes: bool = False) -> None:
    """Report what exposes the host and examine the command with mount targets put back;
    ``shares_processes`` (bwrap without its own PID namespace): ``kill -1`` inside is real."""
    exposed = [*(f"{name} {reason}" for reason in run.exposures), *_critical_mounts(name, run, sink.cwd)]
    for reason in exposed:
        sink.danger(reason)
    if len(run.mounts) > _MAX_FOLLOWED:
        sink.danger(f"{name} run with more than {_MAX_FOLLOWED} mounts (not all followed)")
    inner = ((run.entrypoint,) if run.entrypoint else ()) + run.command
    if inner:
        mounts = _followed(run.mounts, sink.cwd)
        sink.run_in_container(tuple(_on_host(w, mounts) for w in inner), bool(exposed) or shares_processes)


_MAX_FOLLOWED = 64


def _followed(mounts: list[tuple[str, str]], cwd: str | None) -> list[tuple[str, str]]:
    """The mounts whose targets are put back in the command: system folders first, at most
    ``_MAX_FOLLOWED``; the longest target first, so ``/h/etc`` wins over ``/h``."""
    ranked = sorted(mounts, key=lambda m: (protected_target(m[0], cwd) is None, -len(m[1])))
    return sorted(ranked[:_MAX_FOLLOWED], key=lambda m: -len(m[1]))


def _critical_mounts(name: str, run: _Run, cwd: str | None) -> list[str]:
    reasons = []
    for source, _ in run.mounts:
        if _RUNTIME_SOCKET.search(normalize_path(source, cwd)):
            reasons.append(f"{name} mounts the container runtime's socket (root on the host)")
        else:
            where = protected_target(source, cwd)
            if where:
                reasons.append(f"{name} mounts {where} from the host")
    return reasons


def _on_host(word: str, mounts: list[tuple[str, str]]) -> str:
    """``word`` with each mount target it names (as a path) put back to the host source."""
    for source, target in mounts:
        target = target.rstrip("/")
        if target and target in word:
            pattern = r"(?<![\w.~$/-])" + re.escape(target) + r"(?=/|$|[\s'\";&|)<>])"
            word = re.sub(pattern, source.replace("\\", "\\\\"), word)
    return word


# ---------------------------------------------------------------- exec

_EXEC_VALUE = frozenset({"-u", "--user", "-w", "--workdir", "-e", "--env", "--env-file", "--detach-keys"})


def _exec(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``docker exec [OPTS] CONTAINER CMD ...``: the container's mounts are unknown; only
    ``--privileged`` says the host is in reach."""
    i = 0
    privileged = False
    while i < len(args) and args[i].startswith("-"):
        privileged = privileged or args[i] == "--privileged"
        i += 2 if args[i] in _EXEC_VALUE else 1
    if privileged:
        sink.danger(f"{name} exec --privileged")
    if i + 1 < len(args):
        sink.run_in_container(args[i + 1 :], privileged)


# ---------------------------------------------------------------- bubblewrap

_BWRAP_TWO = (
    "--bind --bind-try --dev-bind --dev-bind-try --ro-bind --ro-bind-try --symlink --setenv --file "
    "--bind-data --ro-bind-data --chmod --bind-fd --ro-bind-fd"
)
_BWRAP_ONE = (
    "--args --argv0 --unsetenv --lock-file --sync-fd --remount-ro --exec-label --file-label --proc --dev "
    "--tmpfs --mqueue --dir --seccomp --add-seccomp-fd --block-fd --userns-block-fd --info-fd "
    "--json-status-fd --cap-add --cap-drop --uid --gid --hostname --chdir --userns --userns2 --pidns "
    "--perms --size --overlay-src --tmp-overlay --ro-overlay"
)
# How many words each option takes (flags: none).
_BWRAP_WORDS = {**{o: 2 for o in _BWRAP_TWO.split()}, "--overlay": 3, **{o: 1 for o in _BWRAP_ONE.split()}}
_BWRAP_WRITABLE = frozenset({"--bind", "--bind-try", "--dev-bind", "--dev-bind-try"})


def bwrap(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """bubblewrap: a writable ``--bind SRC DEST`` of a system folder exposes the host
    (``--ro-bind`` is the usual sandbox view); the command runs with the host's processes
    unless ``--unshare-pid``/``--unshare-all``, so its findings then count in full."""
    run = _Run()
    own_pids = False
    i = 0
    while i < len(args) and args[i].startswith("--"):
        option, count = args[i], _BWRAP_WORDS.get(args[i], 0)
        values = args[i + 1 : i + 1 + count]
        own_pids = own_pids or option in ("--unshare-pid", "--unshare-all")
        if option in _BWRAP_WRITABLE and len(values) == 2:  # read-only binds are the sandbox's usual view
            run.mounts.append((values[0], values[1]))
        elif option == "--cap-add" and values and values[0].upper().removeprefix("CAP_") in _ESCAPING_CAPS:
            run.exposures.append(f"--cap-add {values[0]}")
        i += 1 + count
    run.command = args[i + 1 :] if args[i : i + 1] == ("--",) else args[i:]
    _run(name, run, sink, shares_processes=not own_pids)


RULES: dict[str, Rule] = {
    "docker": container,
    "podman": container,
    "nerdctl": container,
    "docker-compose": container,
    "bwrap": bwrap,
}
