"""The line that loads wait in: at most a few compile and start at once, the rest wait their turn
in order and are told their place (a notice on their connection, server.py), never left to time out.

Many `tatolab run -d` at once would otherwise start as many compile processes as requests on a
machine of two cores: each compile then takes so long that clients give up, and the runtime's own
process gets too little of the CPU to answer `streams` meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
from typing import Any, AsyncIterator, Callable

from tatolab import _settings

AT_ONCE_ENV = "TATOLAB_LOADS_AT_ONCE"
NOTICE_EVERY_S = 10.0  # a waiting request hears its place again this often, so its client keeps waiting

# How the request being answered is told something before its answer (server.py sets it per request).
notice: contextvars.ContextVar[Callable[[dict[str, Any]], None] | None] = contextvars.ContextVar("notice", default=None)


def tell(**what: Any) -> None:
    """Tell the request being answered ``what`` (a notice line before its answer), if it listens."""
    say = notice.get()
    if say is not None:
        say(what)


def loads_at_once() -> int:
    """Loads compiled and started at once: TATOLAB_LOADS_AT_ONCE, else the number of CPUs (at least 2)."""
    return _settings.value(AT_ONCE_ENV) or max(2, os.cpu_count() or 2)


class Line:
    def __init__(self, at_once: int | None = None) -> None:
        self.at_once = at_once or loads_at_once()
        self.running = 0
        self.waiting: list[tuple[asyncio.Future[None], Callable[[dict[str, Any]], None] | None, str]] = []

    @contextlib.asynccontextmanager
    async def turn(self, what: str) -> AsyncIterator[None]:
        """Hold one of the places while the body runs; wait in line for it first if all are taken."""
        if self.running < self.at_once and not self.waiting:
            self.running += 1
        else:
            await self._wait(what)
        working = asyncio.ensure_future(_still_working(what))
        try:
            yield
        finally:
            working.cancel()
            self._next()

    async def _wait(self, what: str) -> None:
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (ticket, notice.get(), what)
        self.waiting.append(entry)
        self._tell(entry)
        try:
            while True:
                try:
                    await asyncio.wait_for(asyncio.shield(ticket), NOTICE_EVERY_S)
                    break
                except asyncio.TimeoutError:
                    self._tell(entry)  # still waiting: say so, so the client does not give up
        except BaseException:
            if entry in self.waiting:
                self.waiting.remove(entry)
                self._tell_all()
            elif ticket.done() and not ticket.cancelled():
                self._next()  # it was handed a place as it was cancelled: hand it on
            raise
        tell(waiting=False, place=0, at_once=self.at_once, what=what)

    def _next(self) -> None:
        """A place came free: the first in line takes it, the others move up."""
        while self.waiting:
            ticket, _, _ = self.waiting.pop(0)
            if not ticket.done():
                ticket.set_result(None)
                self._tell_all()
                return
        self.running -= 1

    def _tell(self, entry: tuple[asyncio.Future[None], Callable[[dict[str, Any]], None] | None, str]) -> None:
        _, say, what = entry
        if say is not None:
            say({"waiting": True, "place": self.waiting.index(entry) + 1, "in_line": len(self.waiting),
                 "at_once": self.at_once, "what": what})

    def _tell_all(self) -> None:
        for entry in self.waiting:
            self._tell(entry)


async def _still_working(what: str) -> None:
    """While a load compiles and starts, say so now and then: a slow compile on a busy machine is
    no reason for its client to give up."""
    while True:
        await asyncio.sleep(NOTICE_EVERY_S)
        tell(waiting=False, working=what)
