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

From byte TIMING_OFF, two histogram sets of the links' latency layout (tatolab/_links/latency.py):
how long each ``process()`` call took, and how long the bags handed to it had waited inside the
node since they left their ring (taken off in a run, or delivered but not yet read). Recorded by
``begin``/``end`` (in C: _native.NodeTimer, where the module was built), read by the runtime for
``graph`` (``timings``).
"""

from __future__ import annotations

import mmap
import os
import time

from typing import Any

from tatolab._links import latency
from tatolab._safe_fs import create_private_file, open_own_file

TIMING_OFF = 64  # the process set, then the wait set (_timing.h: TIM_SETS_OFF)
STATUS_BYTES = TIMING_OFF + 2 * latency.SET_BYTES
_OLD_BYTES = 64  # the file before the timing sets
_BUSY, _CALLS, _PID, _READY, _SET_UP = range(5)
_PROCESS_Q = TIMING_OFF // 8
_WAIT_Q = (TIMING_OFF + latency.SET_BYTES) // 8

try:
    from tatolab._links._native import NodeTimer as _NodeTimer
except ImportError:  # the C module was not built: the same words, recorded in Python
    _NodeTimer = None  # type: ignore[assignment,misc]


class _PythonTimer:
    """What _native.NodeTimer does, in Python."""

    def __init__(self, mv: memoryview, cell: list[int]) -> None:
        self._q = mv.cast("Q")
        self._w = mv.cast("I")
        self._cell = cell

    def begin(self) -> None:
        q, cell = self._q, self._cell
        q[_BUSY] = now = time.monotonic_ns()
        if not q[_READY]:
            q[_READY] = now
        taken = cell[0]
        if taken:
            latency._record_set(q, self._w, _WAIT_Q, now - taken if now > taken else 0, now // 1_000_000_000)
            cell[0] = 0

    def end(self) -> None:
        q = self._q
        now, began = time.monotonic_ns(), q[_BUSY]
        if began:
            latency._record_set(q, self._w, _PROCESS_Q, now - began if now > began else 0, now // 1_000_000_000)
        q[_BUSY] = 0
        q[_CALLS] += 1

    def close(self) -> None:
        self._q.release()
        self._w.release()


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
            # an older runtime made the file without the timing sets: then no times are kept
            self._timed = os.fstat(fd).st_size >= STATUS_BYTES
            self._mm = mmap.mmap(fd, STATUS_BYTES if self._timed else _OLD_BYTES)
        finally:
            os.close(fd)
        self._mv = memoryview(self._mm)
        self._q = self._mv.cast("Q")
        # [taken_ns]: the oldest time a bag delivered for the next call left its ring (the input
        # ports set it, context.py); begin() records the wait and zeroes it
        self.taken = [0]
        self._timer: Any = None

    def attach(self) -> None:
        """A node host starting: whatever a killed predecessor left is cleared, its times too."""
        self._q[_BUSY] = 0
        self._q[_READY] = 0
        self._q[_SET_UP] = 0
        self._q[_PID] = os.getpid()
        if not self._timed:
            return
        self._mv[TIMING_OFF:STATUS_BYTES] = bytes(STATUS_BYTES - TIMING_OFF)
        self._timer = (_NodeTimer(self._mm, self.taken) if _NodeTimer is not None
                       else _PythonTimer(self._mv, self.taken))
        # the per-call path: the timer's own methods, called straight
        self.begin = self._timer.begin  # type: ignore[method-assign]
        self.end = self._timer.end  # type: ignore[method-assign]

    def begin(self) -> None:
        """A ``process()`` call begins (the node host's timer takes this over once attached)."""
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

    def timings(self, now_ns: int | None = None) -> dict[str, Any]:
        """The runtime's read of the node's own times: ``process`` (each call's duration) and
        ``wait`` (how long the bags handed to a call had waited inside the node since leaving
        their ring), each ``{"p50_us", "p90_us", "p99_us", "max_us", "bags"}`` over the last 10 s
        (``bags``: the calls counted), and ``process_since_start``; {} where the file has none."""
        if not self._timed:
            return {}
        w = self._mv.cast("I")
        try:
            now_sec = (now_ns if now_ns is not None else time.monotonic_ns()) // 1_000_000_000
            process, process_total = latency._read_set(self._q, w, _PROCESS_Q, now_sec)
            wait, _ = latency._read_set(self._q, w, _WAIT_Q, now_sec)
        finally:
            w.release()
        return {"process": latency.summary(process), "process_since_start": latency.summary(process_total),
                "wait": latency.summary(wait)}

    def close(self) -> None:
        if self._timer is not None:
            self._timer.close()  # its hold on the mapping first
            self._timer = None
        if self._q is not None:
            self._q.release()
            self._mv.release()
            self._mm.close()
            self._q = None  # type: ignore[assignment]


class NoStatus:
    """Stands in when the runtime gave no status file (an old runtime, a test)."""

    def __init__(self) -> None:
        self.taken = [0]

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
