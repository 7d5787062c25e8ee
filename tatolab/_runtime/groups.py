"""Node process groups: each node runs in a session of its own, so whatever it starts ends with it.

The supervisor kills a node's group when the node exits; at start and stop the runtime also
ends any process still marked as one of its nodes' (a helper left by a runtime that was killed).
"""

from __future__ import annotations

import os
import signal

import psutil

MARKER_ENV = "TATOLAB_NODE_OF"  # set in every node's environment; helpers inherit it


def kill_group(pgid: int) -> None:
    """SIGKILL every process left in the group ``pgid`` (a node's, created by its setsid)."""
    if pgid <= 1 or pgid == os.getpgrp():
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def reap_marked(marker: str) -> int:
    """End the processes (and their groups) whose environment says they belong to ``marker``'s
    nodes; returns how many were found. Only this user's processes are looked at."""
    me = os.getpid()
    uid = os.getuid()
    found = 0
    for proc in psutil.process_iter(["pid", "uids"]):
        try:
            if proc.info["pid"] == me or proc.info["uids"] is None or proc.info["uids"].real != uid:
                continue
            if proc.environ().get(MARKER_ENV) != marker:
                continue
            pgid = os.getpgid(proc.pid)
        except (psutil.Error, ProcessLookupError, PermissionError, OSError):
            continue
        found += 1
        kill_group(pgid)
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return found
