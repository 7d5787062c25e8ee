"""Reading a ring from asyncio code (the runtime's `tap`, and any later consumer).

Every read and every wait runs on a thread of the reader's own, never on the event loop: a
ring that is busy, huge or damaged can slow that thread, never the runtime. The thread
sleeps on the ring's futex between bags, so an idle tap costs nothing and a new bag reaches
it at once (no polling).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from .ring import RingReader

WAIT_SLICE_S = 0.25  # a wait returns at least this often, so a closing tap never waits long


class AsyncRingReader:
    """A `RingReader` used from asyncio; only its own thread ever touches the reader."""

    def __init__(self, reader: RingReader) -> None:
        self.reader = reader
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tatolab-ring-reader")
        self._closed = False

    @property
    def dropped(self) -> int:
        return self.reader.dropped

    async def next(
        self, timeout_s: float | None, transform: Callable[[bytes], Any] | None = None
    ) -> tuple[Any, int, int] | None:
        """The next bag as (payload or ``transform(payload)``, size, publish_ns), or None when
        none came within ``timeout_s`` (at most WAIT_SLICE_S; call again to wait longer).

        ``transform`` runs on the reader's thread too (decoding a big bag takes time).
        Raises RingError when the ring makes no sense."""
        wait = WAIT_SLICE_S if timeout_s is None else max(0.0, min(timeout_s, WAIT_SLICE_S))
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._next, wait, transform)

    def _next(self, wait_s: float, transform: Callable[[bytes], Any] | None) -> tuple[Any, int, int] | None:
        reader = self.reader
        got = reader.read()
        if got is None and wait_s > 0 and reader.wait(wait_s):
            got = reader.read()
        if got is None:
            return None
        payload, publish_ns = got
        return (transform(payload) if transform else payload), len(payload), publish_ns

    async def close(self) -> None:
        """Wake the thread if it waits, then close the reader on that thread, after any read
        in progress (a reader must never be closed under a read)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.reader.interrupt()
        except (ValueError, AttributeError, TypeError):
            pass
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._thread, self.reader.close)
        finally:
            self._thread.shutdown(wait=False)
