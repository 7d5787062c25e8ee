"""How the relay's thread talks to the runtime's loop: log lines, and calls that must run there
(reader records of a ring are the runtime's to hand out). Owns no state of its own."""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass
from typing import Any, Callable

Say = Callable[..., None]


@dataclass
class Bridge:
    main: asyncio.AbstractEventLoop  # the runtime's loop
    loop: asyncio.AbstractEventLoop  # the relay thread's loop
    say_main: Say  # the runtime's log; called on its loop only

    def say(self, level: str, message: str, **fields: Any) -> None:
        """Log ``message`` from any thread."""
        self.main.call_soon_threadsafe(lambda: self.say_main(level, message, **fields))

    async def on_main(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run ``function`` on the runtime's loop and await its result on the relay's."""
        done: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(function(*args))
            except BaseException as exc:
                done.set_exception(exc)

        self.main.call_soon_threadsafe(run)
        return await asyncio.wrap_future(done)
