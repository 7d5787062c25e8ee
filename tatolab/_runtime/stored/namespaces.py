"""Which runtime owns each shared-memory namespace, so a dead one's files do not stay forever.

Every runtime's files in the user's shared-memory folder start with its namespace (one per
state folder, ``paths.shm_namespace``). A runtime reaps its own namespace at start, but files of
a runtime that was SIGKILLed and never started again with the same state folder (a test's
temporary one, say) would stay until reboot. So each runtime writes ``<namespace>.owner`` with
its pid and that process's start time, and a starting runtime reaps every namespace whose owner
is gone (or whose pid now belongs to another process). Namespaces without an owner file are
left alone: nothing says they are dead.
"""

from __future__ import annotations

import os
from pathlib import Path

from tatolab._links import ring
from tatolab._safe_fs import UnsafePath, create_private_file, open_own_file

SUFFIX = ".owner"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def claim(namespace: str) -> None:
    """Record this process as the owner of ``namespace`` (a full path prefix in the shm folder)."""
    fd = create_private_file(namespace + SUFFIX, "the owner record of your shared-memory files")
    try:
        os.write(fd, f"{os.getpid()} {_start_time(os.getpid())}\n".encode())
    finally:
        os.close(fd)


def _owner_alive(record: str) -> bool:
    try:
        fd = open_own_file(record, os.O_RDONLY, "the owner record of shared-memory files")
    except (FileNotFoundError, UnsafePath):
        return True  # gone meanwhile, or not ours to judge
    try:
        words = os.read(fd, 64).split()
    finally:
        os.close(fd)
    if len(words) != 2 or not words[0].isdigit():
        return True  # half written by a runtime starting right now
    return _start_time(int(words[0])) == words[1].decode()


def reap_dead(folder: str, keep: str) -> int:
    """Unlink the files of every namespace in ``folder`` whose owner is gone, except ``keep``'s;
    how many files went."""
    try:
        entries = os.listdir(folder)
    except FileNotFoundError:
        return 0
    reaped = 0
    for entry in entries:
        if not entry.endswith(SUFFIX):
            continue
        namespace = os.path.join(folder, entry[: -len(SUFFIX)])
        if namespace != keep and not _owner_alive(namespace + SUFFIX):
            reaped += ring.reap(namespace)
    return reaped
