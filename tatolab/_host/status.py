"""A node's status in a tiny shared-memory file: is ``process()`` running, and since when.

The runtime creates the file (under the stream's shared-memory prefix, so it is reaped
with the rings) and polls it; the node host writes it around every ``process()`` call.
Reading it needs nothing from the node process, so a node stuck in a C call that holds
the GIL is still seen as stuck.

Layout (u64, little-endian): 0 busy_since_ns (monotonic ns when the running
``process()`` call began, 0 when idle), 1 calls completed, 2 pid of the writer, 3 when the
process became ready (monotonic ns of its first ``process()`` call, or of a manual node's
start; 0 until then): the runtime's measure of how long a stream took to start.

Bytes 64 to 1023 hold the node's own counters (``ctx.count``): u64 version (odd while being
written), u32 length, then a JSON object of name to number, for ``tatolab graph`` to show.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import time

from tatolab._safe_fs import create_private_file, open_own_file

STATUS_BYTES = 1024
METRICS_AT = 64  # the counters: version (u64), length (u32), JSON
_BUSY, _CALLS, _PID, _READY = range(4)
_VERSION = METRICS_AT // 8


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
            # a file another version made may be shorter: it then has no room for counters
            self._mm = mmap.mmap(fd, min(STATUS_BYTES, os.fstat(fd).st_size))
        finally:
            os.close(fd)
        self._mv = memoryview(self._mm)
        self._q = self._mv.cast("Q")

    def attach(self) -> None:
        """A node host starting: whatever a killed predecessor left is cleared."""
        self._q[_BUSY] = 0
        self._q[_READY] = 0
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

    def end(self) -> None:
        q = self._q
        q[_BUSY] = 0
        q[_CALLS] += 1

    def busy_since_ns(self) -> int:
        return self._q[_BUSY]

    def calls(self) -> int:
        return self._q[_CALLS]

    def write_metrics(self, metrics: dict[str, int | float]) -> bool:
        """The node host: publish its counters (False when they do not fit)."""
        data = json.dumps(metrics, separators=(",", ":")).encode()
        if len(self._mm) < STATUS_BYTES or len(data) > STATUS_BYTES - METRICS_AT - 12:
            return False
        q = self._q
        q[_VERSION] += 1  # odd: being written
        struct.pack_into("<I", self._mm, METRICS_AT + 8, len(data))
        self._mm[METRICS_AT + 12:METRICS_AT + 12 + len(data)] = data
        q[_VERSION] += 1
        return True

    def metrics(self) -> dict[str, int | float]:
        """The runtime: the node's counters as last published ({} when none)."""
        if len(self._mm) < STATUS_BYTES:
            return {}
        for _ in range(100):  # a writer caught mid-write: read again
            before = self._q[_VERSION]
            if before % 2:
                continue
            size = struct.unpack_from("<I", self._mm, METRICS_AT + 8)[0]
            data = bytes(self._mm[METRICS_AT + 12:METRICS_AT + 12 + min(size, STATUS_BYTES - METRICS_AT - 12)])
            if self._q[_VERSION] == before:
                try:
                    value = json.loads(data) if size else {}
                except ValueError:
                    return {}
                return value if isinstance(value, dict) else {}
        return {}

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

    def end(self) -> None: ...

    def write_metrics(self, metrics: dict[str, int | float]) -> bool:
        return False

    def metrics(self) -> dict[str, int | float]:
        return {}

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
