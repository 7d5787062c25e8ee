"""The runtime's operations, one module per area. The CLI and MCP call the same set.

An operation is ``async def name(runtime, **args)`` registered with ``@op("name")``. It
returns a JSON-able result, or, for an operation that keeps talking (an attached run, a
tap, following a log), an async iterator of events: the server sends each as
``{"event": ...}`` and closes the iterator when the client hangs up, so its ``finally``
is where hanging up takes effect.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

Operation = Callable[..., Awaitable[Any]]
OPS: dict[str, Operation] = {}


def op(name: str) -> Callable[[Operation], Operation]:
    def register(function: Operation) -> Operation:
        OPS[name] = function
        return function

    return register


def load_all() -> None:
    """Import every operations module so each registers itself."""
    from tatolab._runtime.ops import streams  # noqa: F401
    from tatolab._runtime.ops import kept  # noqa: F401
    from tatolab._runtime.ops import dev  # noqa: F401
    from tatolab._runtime.ops import inspect  # noqa: F401
    from tatolab._runtime.ops import exposure  # noqa: F401
    from tatolab._runtime.ops import exchange  # noqa: F401
