"""A built-in that lacks what it needs (an input device, a camera, a display) waits for it instead of
failing: one log line saying what is missing and how to get it, the node ``waiting`` with that reason
in ``tatolab graph`` (``ctx.report(waiting=...)``), and a check every ``RECHECK_S``; never a
traceback or a restart loop. Once it is there, one line says so and the node runs."""

from __future__ import annotations

from tatolab._sdk.context import RuntimeContextLimitedAccess

RECHECK_S = 3.0


class Waiting:
    def __init__(self, ctx: RuntimeContextLimitedAccess, every_s: float = RECHECK_S, level: str = "warning") -> None:
        self.ctx = ctx
        self.every_s = every_s
        self.level = level  # "error" also makes it the node's last_error in graph
        self.reason: str | None = None

    def on(self, reason: str) -> None:
        """Waiting for ``reason``: said once per distinct reason, however often it is checked."""
        if reason != self.reason:
            getattr(self.ctx.log, self.level)(f"{reason}; waiting, checked every {self.every_s:g} s", waiting=reason)
            self.ctx.report(waiting=reason)
            self.reason = reason

    def over(self, message: str) -> None:
        """What was missing is there: said once, after a wait."""
        if self.reason is not None:
            self.ctx.log.info(message)
            self.ctx.report(waiting=None)
            self.reason = None
