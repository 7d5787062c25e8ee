"""Processes the runtime starts end when it dies, even by SIGKILL (what they started is ended by
the runtime's reaper: tatolab/_runtime/processes/reaper.py)."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl


def die_with_parent(expected_parent: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies.

    ``expected_parent`` closes the race where the parent died before the call.
    """
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(0)
