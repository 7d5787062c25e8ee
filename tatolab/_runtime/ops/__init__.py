"""The runtime's operations, one module per area. The CLI and MCP call the same set.

An operation is ``async def name(runtime, **args) -> Result`` registered with ``@op("name")``:
its docstring says what it does, its annotations type its arguments (checked before it runs)
and its result (tatolab/_control/operations.py); ``operations`` lists them all with their
JSON Schemas. An operation that keeps talking (an attached run, a tap, following a log)
returns ``Events[A, E]`` (its answer, then events): the server sends each event as ``{"event": ...}`` and closes the
iterator when the client hangs up, so its ``finally`` is where hanging up takes effect.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from tatolab._control.operations import Operation, describe

OPS: dict[str, Operation] = {}


def op(name: str) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    def register(function: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        OPS[name] = describe(name, function)
        return function

    return register


def load_all() -> None:
    """Import every operations module so each registers itself."""
    from tatolab._runtime.ops import streams  # noqa: F401
    from tatolab._runtime.ops import kept  # noqa: F401
    from tatolab._runtime.ops import dev  # noqa: F401
    from tatolab._runtime.ops import inspect  # noqa: F401
    from tatolab._runtime.ops import logs  # noqa: F401
    from tatolab._runtime.ops import exposure  # noqa: F401
    from tatolab._runtime.ops import exchange  # noqa: F401
    from tatolab._runtime.ops import change  # noqa: F401
    from tatolab._runtime.ops import url  # noqa: F401
    from tatolab._runtime.ops import relay  # noqa: F401
    from tatolab._runtime.ops import trust  # noqa: F401
    from tatolab._runtime.ops import record  # noqa: F401
    from tatolab._runtime.ops import foxglove  # noqa: F401
