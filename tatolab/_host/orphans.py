"""Processes the runtime starts end when it dies, even by SIGKILL, and take what they started along."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
GUARD_NAME = b"tatolab-guard"  # what `ps` and the tests see for a node's guard

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl


def die_with_parent(expected_parent: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies.

    ``expected_parent`` closes the race where the parent died before the call.
    """
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(0)


def guard_group() -> None:
    """Fork a guard that kills this process's group once this process dies, however it dies.

    A node host leads a process group of its own (the runtime starts it with setsid); anything
    the node starts (a helper, a shell pipeline) is in that group. The parent-death signal ends
    only the node host itself, so the guard, told of the host's death by the kernel, ends the
    rest. It holds no descriptor of the node's, so the node's pipes close when the node ends.
    """
    host = os.getpid()
    if os.getpgrp() != host:
        return  # not a group leader (run by hand): the group is not the node's to end
    blocked = {signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    if os.fork() != 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        return
    try:
        _prctl(PR_SET_NAME, ctypes.c_char_p(GUARD_NAME), 0, 0, 0)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        os.closerange(0, os.sysconf("SC_OPEN_MAX"))
        if os.getppid() == host:
            signal.sigwait(blocked)
    finally:
        os.killpg(0, signal.SIGKILL)  # the guard is in the group too: this is its end
        os._exit(0)
