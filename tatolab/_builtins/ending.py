"""How a built-in's own thread (or audio callback) ends its node when it fails."""

from __future__ import annotations

import os
import traceback
from typing import NoReturn

from tatolab._errors import CannotRun
from tatolab._host.failing import cannot_run_line
from tatolab._host.spec import EXIT_CANNOT_RUN
from tatolab._sdk.context import RuntimeContextLimitedAccess


def end_node(ctx: RuntimeContextLimitedAccess, what: str, exc: BaseException) -> NoReturn:
    """Log ``what: <exception>`` with its traceback and end the process, so the runtime restarts
    the node: raised on a thread of the node's own, the exception would end only that thread.

    ``CannotRun`` (a file or setting that can never work) ends it once instead: one line, no
    traceback, and the runtime marks the node failed without restarting it."""
    if isinstance(exc, CannotRun):
        ctx.log.error(cannot_run_line(ctx.node, exc), cannot_run=True)
        os._exit(EXIT_CANNOT_RUN)
    ctx.log.error(f"{what}: {type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    os._exit(1)
