"""How a built-in's own thread (or audio callback) ends its node when it fails."""

from __future__ import annotations

import os
import traceback
from typing import Any, NoReturn


def end_node(ctx: Any, what: str, exc: BaseException) -> NoReturn:
    """Log ``what: <exception>`` with its traceback and end the process, so the runtime restarts
    the node: raised on a thread of the node's own, the exception would end only that thread."""
    ctx.log.error(f"{what}: {type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    os._exit(1)
