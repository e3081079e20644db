"""Rules for commands that delete, overwrite or re-permission files and disks."""

from __future__ import annotations

import posixpath
import re

from runner.safety.shell.common import (
    Parsed,
    Rule,
    Sink,
    Traits,
    check_write,
    has_long,
    parse_args,
    record_write,
    written,
)
from runner.safety.shell.paths import is_block_device, normalize_path, protected_target
from runner.safety.shell.rules_exec import exec_value, runs_code
from runner.safety.shell.unwrap import command_name


def rm(name: str, args: tuple[str, ...], sink: Sink) -> None:
    parsed = parse_args(args)
    recursive = bool({"r", "R"} & parsed.short) or has_long(parsed, "--recursive")
    for target in parsed.operands:
        check_write(target, sink, how="delete")
    if not recursive:
        return
    hard = False
    for target in parsed.operands:
        what = protected_target(target, sink.cwd)
        if what:
            sink.hard(f"recursive delete of {what}")
            hard = True
    if has_long(parsed, "--no-preserve-root"):
        sink.hard("rm --no-preserve-root")
        hard = True
    if not hard:
        sink.danger("recursive delete")


# find predicates that do not narrow which files are matched
_FIND_NEUTRAL = frozenset(
    {"-delete", "-depth", "-d", "-maxdepth", "-mindepth", "-xdev", "-mount", "-print", "-print0",
     "-ls", "-noleaf", "-daystart", "-follow", "-ignore_readdir_race", "-noignore_readdir_race",
     "-nowarn", "-warn", "-true"}
)  # fmt: skip
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_PER_FILE_RECURSIVE = frozenset({"chmod", "chown", "chgrp"})  # run on every file: the same as their -R


def find(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``find -delete`` and ``find -exec CMD {} ;``: with no filter, the command applies to
    the starting point itself, so ``find / -delete`` is a recursive delete of ``/``."""
    i = 0
    while i < len(args) and (args[i] in ("-H", "-L", "-P") or args[i].startswith("-O")):
        i += 1
    starts: list[str] = []
    while i < len(args) and not args[i].startswith("-") and args[i] not in ("(", "!", ")", ","):
        starts.append(args[i])
        i += 1
    starts = starts or ["."]
    delete, filtered, execs = _find_expression(args[i:])
    protected = next((s for s in starts if protected_target(s, sink.cwd)), None)
    if delete:
        if protected and not filtered:
            sink.hard(f"recursive delete of {protected_target(protected, sink.cwd)} (find -delete)")
        else:
            sink.danger("find -delete")
    start = protected or starts[0]
    placeholder = start if not filtered else start.rstrip("/") + "/x"
    for argv in execs:
        if runs_code(argv):
            sink.danger(f"find -exec runs code ({argv[0]})")
        run = tuple(a.replace("{}", placeholder) for a in argv)
        if protected and not filtered and run and command_name(run[0]) in _PER_FILE_RECURSIVE:
            run = (run[0], "-R", *run[1:])  # on every file under a protected start: a recursive change
        sink.run_argv(run)
        if any("{}" in a and a != "{}" for a in argv):  # a string that holds {}: a command of its own
            sink.run_argv(argv)  # (``sh -c 'find / -exec rm -rf {} +'``) is judged as written too


def _find_expression(expr: tuple[str, ...]) -> tuple[bool, bool, list[tuple[str, ...]]]:
    delete = filtered = False
    execs: list[tuple[str, ...]] = []
    j = 0
    while j < len(expr):
        arg = expr[j]
        j += 1
        if arg in _FIND_EXEC:
            k = j
            while k < len(expr) and expr[k] not in (";", "+"):
                k += 1
            execs.append(expr[j:k])
            j = k + 1
        elif arg == "-delete":
            delete = True
        elif arg.startswith("-") and arg not in _FIND_NEUTRAL:
            filtered = True
    return delete, filtered, execs


def rsync(name: str, args: tuple[str, ...], sink: Sink) -> None:
    parsed = parse_args(args, with_value="efT", long_with_value="--rsh --exclude --include --filter --rsync-path")
    for key in ("-e", "--rsh", "--rsync-path"):
        value = parsed.values.get(key)
        if value:
            exec_value(value, sink, f"rsync {key}")
    if any(opt.startswith("--delete") for opt in parsed.long) and len(parsed.operands) >= 2:
        what = protected_target(parsed.operands[-1], sink.cwd)
        if what:
            sink.hard(f"recursive delete of {what} (rsync --delete)")


def disk_tool(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """mkfs, mke2fs, mkswap, wipefs, blkdiscard, shred: fatal on a block device."""
    label = "mkfs" if name.startswith("mkfs") else name
    devices = [a for a in args if is_block_device(a)]
    if devices:
        sink.hard(f"{label} on block device {devices[0]}")
    elif name == "shred":
        sink.danger("shred (irrecoverable overwrite)")
    else:
        sink.danger(f"{label} (creates or wipes a filesystem)")


def cryptsetup(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``luksFormat`` / ``erase`` destroy what the device held, like mkfs."""
    if not {"luksFormat", "erase", "luksErase"} & set(args):
        return
    devices = [a for a in args if is_block_device(a)]
    if devices:
        sink.hard(f"cryptsetup format of block device {devices[0]}")
    else:
        sink.danger("cryptsetup format")


# Arguments of partition editors that only read the table.
_PARTITION_READ = frozenset(
    {"-l", "--list", "print", "-p", "--print", "-d", "--dump", "-s", "--show-size", "-v", "--verify",
     "--version", "-h", "--help", "-m", "--machine", "unit", "-V", "-i", "--info", "-J", "--json"}
)  # fmt: skip


def partition_tool(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """parted, sfdisk, sgdisk, fdisk, gdisk, cfdisk writing a block device's partition table."""
    devices = [a for a in args if is_block_device(a)]
    if not devices:
        return
    others = [a for a in args if a not in devices]
    if others and all(a in _PARTITION_READ for a in others):
        return  # listing or printing only; with no options at all the editor is interactive
    sink.danger(f"{name} rewrites the partition table of {devices[0]}")


def dd(name: str, args: tuple[str, ...], sink: Sink) -> None:
    for arg in args:
        if arg.startswith("of="):
            check_write(arg[3:], sink, how="dd")
            record_write(arg[3:], sink)


_COPY_VALUE = "tSmog"
_COPY_LONG = "--target-directory --suffix --mode --owner --group"


def copy(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """cp, mv, install, ln: the destination is written; for mv the sources vanish too."""
    parsed = parse_args(args, with_value=_COPY_VALUE, long_with_value=_COPY_LONG)
    target_dir = parsed.values.get("-t") or parsed.values.get("--target-directory")
    operands = list(parsed.operands)
    if target_dir:
        check_write(target_dir.rstrip("/") + "/x", sink)
        sources = operands
    elif len(operands) >= 2:
        check_write(operands[-1], sink)
        sources = operands[:-1]
    else:
        sources = []
    _record_copies(sources, target_dir, operands[-1] if operands and not target_dir else None, sink)
    if name == "mv":
        for src in sources:
            what = protected_target(src, sink.cwd)
            if what:
                sink.hard(f"move of {what}")
            else:
                check_write(src, sink, how="move")


def _record_copies(sources: list[str], folder: str | None, dest: str | None, sink: Sink) -> None:
    """The copies hold their source's text when the command line wrote it: DEST itself, or
    the file of that name in DEST or the ``-t`` folder."""
    for src in sources:
        text = written(src, sink)
        base = posixpath.basename(src.rstrip("/"))
        if folder is not None:
            record_write(posixpath.join(folder, base), sink, text)
        elif dest is not None:
            record_write(dest, sink, text)
            record_write(posixpath.join(dest, base), sink, text)


def tee(name: str, args: tuple[str, ...], sink: Sink) -> Traits:
    targets = parse_args(args).operands
    for target in targets:
        check_write(target, sink)
        record_write(target, sink)  # the text, when stdin is known, arrives with it
    return Traits(transform="identity", tees=targets)


def touch_like(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """truncate and touch: every operand is written."""
    parsed = parse_args(args, with_value="sdrt", long_with_value="--size --reference --date")
    for target in parsed.operands:
        check_write(target, sink)
        record_write(target, sink, keep=name == "touch")


def sed(name: str, args: tuple[str, ...], sink: Sink) -> None:
    parsed = parse_args(args, with_value="ef", long_with_value="--expression --file")
    in_place = "i" in parsed.short or has_long(parsed, "--in-place")
    if not in_place:
        return
    script_given = "-e" in parsed.values or "-f" in parsed.values or has_long(parsed, "--expression", "--file")
    files = parsed.operands if script_given else parsed.operands[1:]
    for target in files:
        check_write(target, sink)
        record_write(target, sink)


# tar options whose value is a command tar runs: always a decision; compressors may be
# plain program names (``tar -I zstd``).
_TAR_EXEC = ("--to-command", "--info-script", "--new-volume-script", "-F")
_TAR_PROGRAM = ("--use-compress-program", "--compress-program", "-I", "--rsh-command", "--rmt-command")


def tar(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """Extracting into ``/`` or ``/etc`` overwrites system files; several options run a
    command (``--checkpoint-action=exec=CMD``, ``--to-command=CMD``, ``-I CMD``)."""
    if not args:
        return
    _tar_commands(args, sink)
    first = args[0]
    extracting = ("x" in first and not first.startswith("-")) or "x" in parse_args(args).short
    extracting = extracting or any(a == "--extract" or a == "--get" for a in args)
    if not extracting:
        return
    parsed = parse_args(args, with_value="CfbFgIKLNTVX", long_with_value=_TAR_LONG)
    target = parsed.values.get("-C") or parsed.values.get("--directory")
    if target is None:
        return
    if normalize_path(target, sink.cwd) == "/":
        sink.danger("extract archive into /")
    else:
        check_write(target.rstrip("/") + "/x", sink, how="extract")


_TAR_LONG = "--directory --file --to-command --info-script --new-volume-script --use-compress-program --rsh-command"


def _tar_commands(args: tuple[str, ...], sink: Sink) -> None:
    parsed = parse_args(args, with_value="CfbFgIKLNTVX", long_with_value=_TAR_LONG + " --checkpoint-action")
    for key, value in parsed.values.items():
        if key in _TAR_EXEC:
            exec_value(value, sink, f"tar {key}", always=True)
        elif key in _TAR_PROGRAM:
            exec_value(value, sink, f"tar {key}")
    for opt in parsed.long:
        name, _, value = opt.partition("=")
        if name == "--checkpoint-action" and value.startswith("exec="):
            exec_value(value[5:], sink, "tar --checkpoint-action", always=True)
    action = parsed.values.get("--checkpoint-action", "")
    if action.startswith("exec=") and not any(o.startswith("--checkpoint-action=") for o in parsed.long):
        exec_value(action[5:], sink, "tar --checkpoint-action", always=True)


_OCTAL = re.compile(r"^[0-7]{1,4}$")
_SYMBOLIC = re.compile(r"([ugoa]*)((?:[-+=][rwxXstugo]*)+)")
_ADDS_EXEC = re.compile(r"[+=][rwXst]*x")


def chmod(name: str, args: tuple[str, ...], sink: Sink) -> None:
    parsed = parse_args(args, long_with_value="--reference")
    if not parsed.operands:
        return
    mode, files = parsed.operands[0], parsed.operands[1:]
    if _OCTAL.match(mode):
        if int(mode, 8) & 0o002:
            sink.danger("chmod 777" if mode.endswith("777") else "chmod world-writable (o+w)")
    elif _world_writable_symbolic(mode):
        sink.danger("chmod o+w / a+w")
    _recursive_on_system(parsed, files, sink, "chmod")
    if (_OCTAL.match(mode) and int(mode, 8) & 0o111) or _ADDS_EXEC.search(mode):
        _executes_download(files, sink)


def _world_writable_symbolic(mode: str) -> bool:
    for clause in mode.split(","):
        m = _SYMBOLIC.fullmatch(clause)
        if not m:
            continue
        who, ops = m.groups()
        if not ({"o", "a"} & set(who)):
            continue
        for op in re.findall(r"[-+=][rwxXstugo]*", ops):
            if op[0] in "+=" and "w" in op:
                return True
    return False


def chown(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """chown and chgrp; ``-R`` of ``/``, a system folder or a home is hardline."""
    parsed = parse_args(args, long_with_value="--reference --from")
    if not parsed.operands:
        return
    owner, files = parsed.operands[0], parsed.operands[1:]
    recursive = "R" in parsed.short or has_long(parsed, "--recursive")
    if name == "chown" and recursive and owner.split(":")[0].split(".")[0] in ("root", "0"):
        sink.danger("chown -R to root")
    _recursive_on_system(parsed, files, sink, name)


def _recursive_on_system(parsed: Parsed, files: tuple[str, ...], sink: Sink, what: str) -> None:
    """Changing the mode or owner of every file of the system or a home cannot be undone:
    sudo, ssh and the login shell stop working."""
    if "R" in parsed.short or has_long(parsed, "--recursive"):
        for target in files:
            where = protected_target(target, sink.cwd)
            if where:
                sink.hard(f"recursive {what} of {where}")


def _executes_download(files: tuple[str, ...], sink: Sink) -> None:
    for f in files:
        if f.rsplit("/", 1)[-1] in sink.downloaded:
            sink.danger("download then execute (chmod +x of a downloaded file)")


RULES: dict[str, Rule] = {
    "rm": rm,
    "find": find,
    "rsync": rsync,
    "mke2fs": disk_tool,
    "mkswap": disk_tool,
    "wipefs": disk_tool,
    "blkdiscard": disk_tool,
    "shred": disk_tool,
    "mkdosfs": disk_tool,
    "mkntfs": disk_tool,
    "dd": dd,
    "cryptsetup": cryptsetup,
    **{p: partition_tool for p in ("parted", "sfdisk", "sgdisk", "fdisk", "gdisk", "cfdisk")},
    "cp": copy,
    "mv": copy,
    "install": copy,
    "ln": copy,
    "tee": tee,
    "truncate": touch_like,
    "touch": touch_like,
    "sed": sed,
    "tar": tar,
    "chmod": chmod,
    "chown": chown,
    "chgrp": chown,
}
