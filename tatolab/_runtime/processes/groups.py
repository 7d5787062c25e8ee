"""Node process groups: each node leads a session of its own, so what it starts ends with it.

The supervisor kills a node's group when the node exits. For a runtime that dies without doing
so (SIGKILL, an OOM kill), it keeps one small file per running group in ``<socket folder>/nodes/``
(a private folder, on a tmpfs that a reboot empties): the runtime's reaper (reaper.py) ends every
group listed there the moment the runtime is gone, and any runtime ends them at start and stop.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil

from tatolab._control import paths
from tatolab._runtime.stored import unwritten


def kill_group(pgid: int) -> None:
    """SIGKILL every process left in the group ``pgid`` (a node's, created by its setsid)."""
    if pgid <= 1 or pgid == os.getpgrp():
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _folder() -> Path:
    return paths.socket_dir() / "nodes"


def _identity(pid: int) -> str | None:
    """What tells this process from a later one given the same pid: the boot and its start time."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot} {psutil.Process(pid).create_time()!r}"
    except (OSError, psutil.Error):
        return None


def remember(pid: int) -> None:
    """Note a node's group (its pid is the group's id) while the node runs; never raises."""
    identity = _identity(pid)
    if identity is None:
        return  # gone already: its exit kills the group
    path = _folder() / str(pid)
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, identity.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        unwritten.failed(path, exc)  # the node runs; only a killed runtime would leave its group behind


def forget(pid: int) -> None:
    try:
        (_folder() / str(pid)).unlink()
    except OSError:
        pass


def reap_remembered() -> int:
    """End every group a node left behind (a runtime that was killed); returns
    how many groups still had processes. A group whose leader's pid now names another process
    (after a reboot, or reused) is only forgotten."""
    ended = 0
    try:
        entries = list(os.scandir(_folder()))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.isdigit() or not entry.is_file(follow_symlinks=False):
            continue
        pgid = int(entry.name)
        try:
            recorded = Path(entry.path).read_text()
        except OSError:
            recorded = ""
        boot = recorded.split(" ", 1)[0]
        leader = _identity(pgid)
        same_boot = bool(boot) and Path("/proc/sys/kernel/random/boot_id").read_text().strip() == boot
        # the leader alive as another process means the pid was reused: not ours to kill
        if same_boot and (leader is None or leader == recorded) and _has_members(pgid):
            kill_group(pgid)
            ended += 1
        forget(pgid)
    return ended


def _has_members(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False
