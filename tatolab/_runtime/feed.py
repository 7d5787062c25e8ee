"""What one client is sent (an attached terminal's log, `tatolab dev`'s events): a bounded
queue. A client that reads more slowly than records come loses records, not the runtime's
memory: what it missed is counted and told in their place."""

from __future__ import annotations

import asyncio
import collections
from typing import Callable, Generic, TypeVar

T = TypeVar("T")

WAITING_LIMIT = 1000  # records waiting for one client at most


class _Gap:
    def __init__(self) -> None:
        self.count = 0


class Feed(Generic[T]):
    """Items of type ``T``: ``put_nowait`` never blocks and never grows the feed past ``limit``
    droppable items; ``get`` hands out items in order, with ``describe_gap(n)`` where ``n`` were
    dropped."""

    def __init__(
        self,
        describe_gap: Callable[[int], T],
        limit: int = WAITING_LIMIT,
        droppable: Callable[[T], bool] = lambda item: True,
    ) -> None:
        self.limit = limit
        self.dropped = 0  # over the feed's life
        self._describe_gap = describe_gap
        self._droppable = droppable
        self._items: collections.deque[T | _Gap] = collections.deque()
        self._waiting = 0  # droppable items in the deque
        self._ready = asyncio.Event()

    def put_nowait(self, item: T) -> None:
        droppable = self._droppable(item)
        if droppable and self._waiting >= self.limit:
            self.dropped += 1
            last = self._items[-1] if self._items else None
            if not isinstance(last, _Gap):
                last = _Gap()
                self._items.append(last)
            last.count += 1
            return
        self._waiting += droppable
        self._items.append(item)
        self._ready.set()

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)

    def get_nowait(self) -> T:
        if not self._items:
            raise asyncio.QueueEmpty
        item = self._items.popleft()
        if isinstance(item, _Gap):
            return self._describe_gap(item.count)
        self._waiting -= self._droppable(item)
        return item

    async def get(self) -> T:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        return self.get_nowait()
