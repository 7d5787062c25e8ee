"""Counters a built-in keeps from any thread (an audio callback) and reports to ``tatolab graph``.

``ctx.report`` writes to the node's log pipe, which must not happen inside a real-time audio
callback (a full pipe would stall the device), so a thread of its own reports what changed, a
few times a second.
"""

from __future__ import annotations

import threading
from tatolab._sdk.context import RuntimeContextLimitedAccess

REPORT_S = 0.25


class Tally:
    def __init__(self, ctx: RuntimeContextLimitedAccess, *names: str) -> None:
        self.ctx = ctx
        self.values = dict.fromkeys(names, 0)
        self.reported: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tally", daemon=True)
        self.thread.start()

    def count(self, name: str, n: int = 1) -> None:
        """Cheap enough for an audio callback: a lock and an addition."""
        with self.lock:
            self.values[name] = self.values.get(name, 0) + n

    def _report(self) -> None:
        with self.lock:
            values = dict(self.values)
        if values != self.reported:
            self.ctx.report(**values)
            self.reported = values

    def _run(self) -> None:
        self._report()
        while not self.stopping.wait(REPORT_S):
            self._report()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=2)
        self._report()
