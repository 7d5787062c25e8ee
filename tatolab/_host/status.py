"""A node's status in a tiny shared-memory file: is ``process()`` running, and since when.

The runtime creates the file (under the stream's shared-memory prefix, so it is reaped
with the rings) and polls it; the node host writes it around every ``process()`` call.
Reading it needs nothing from the node process, so a node stuck in a C call that holds
the GIL is still seen as stuck.

Layout (u64, little-endian): 0 busy_since_ns (monotonic ns when the running
``process()`` call began, 0 when idle), 1 calls completed, 2 pid of the writer, 3 when the
process became ready (monotonic ns of its first ``process()`` call, or of a manual node's
start; 0 until then): the runtime's measure of how long a stream took to start; 4 when its
``setup()`` returned (0 until then): a node added live is started, even before bags reach it.
"""

from __future__ import annotations

import mmap
import os
import time

from tatolab._safe_fs import create_private_file, open_own_file

STATUS_BYTES = 64
_BUSY, _CALLS, _PID, _READY, _SET_UP = range(5)


def create(path: str) -> None:
    """Make the status file at ``path``; the runtime calls this before starting the node.

    It sits in the user's own shared-memory folder (see tatolab/_links/shm.py); even so a name
    planted there is refused, never followed.
    """
    fd = create_private_file(path, "a node's status file")
    try:
        os.ftruncate(fd, STATUS_BYTES)
    finally:
        os.close(fd)


class NodeStatus:
    """A mapped status file, for the node host (writes) and the runtime (reads)."""

    def __init__(self, path: str) -> None:
        fd = open_own_file(path, os.O_RDWR, "a node's status file")
        try:
            self._mm = mmap.mmap(fd, STATUS_BYTES)
        finally:
            os.close(fd)
        self._mv = memoryview(self._mm)
        self._q = self._mv.cast("Q")

    def attach(self) -> None:
        """A node host starting: whatever a killed predecessor left is cleared."""
        self._q[_BUSY] = 0
        self._q[_READY] = 0
        self._q[_SET_UP] = 0
        self._q[_PID] = os.getpid()

    def begin(self) -> None:
        q = self._q
        q[_BUSY] = now = time.monotonic_ns()
        if not q[_READY]:
            q[_READY] = now

    def ready(self) -> None:
        """A node the runtime never calls (manual) is ready once it runs."""
        if not self._q[_READY]:
            self._q[_READY] = time.monotonic_ns()

    def ready_ns(self) -> int:
        return self._q[_READY]

    def set_up(self) -> None:
        """The node's ``setup()`` returned (or it has none): it runs, waiting for bags or its first call."""
        self._q[_SET_UP] = time.monotonic_ns()

    def set_up_ns(self) -> int:
        return self._q[_SET_UP]

    def end(self) -> None:
        q = self._q
        q[_BUSY] = 0
        q[_CALLS] += 1

    def busy_since_ns(self) -> int:
        return self._q[_BUSY]

    def calls(self) -> int:
        return self._q[_CALLS]

    def reset(self) -> None:
        """The runtime, after the node process ended: it is no longer inside ``process()``."""
        self._q[_BUSY] = 0

    def close(self) -> None:
        if self._q is not None:
            self._q.release()
            self._mv.release()
            self._mm.close()
            self._q = None  # type: ignore[assignment]


class NoStatus:
    """Stands in when the runtime gave no status file (an old runtime, a test)."""

    def attach(self) -> None: ...

    def begin(self) -> None: ...

    def ready(self) -> None: ...

    def set_up(self) -> None: ...

    def end(self) -> None: ...

    def close(self) -> None: ...


def open_for_node(path: str | None) -> NodeStatus | NoStatus:
    if not path:
        return NoStatus()
    try:
        status = NodeStatus(path)
    except OSError:
        return NoStatus()
    status.attach()
    return status
