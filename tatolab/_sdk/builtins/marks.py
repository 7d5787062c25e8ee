"""``@builtin``: marks a node description as built in, naming the code that runs it."""

from __future__ import annotations

from typing import Callable, TypeVar

from tatolab._sdk.nodes import BUILTIN_ATTR, implementation_of

C = TypeVar("C", bound=type)

__all__ = ["IMPLEMENTATIONS", "builtin", "implementation_of"]

IMPLEMENTATIONS = "tatolab._builtins."  # the only modules a built-in node's class may name


def builtin(implementation: str) -> Callable[[C], C]:
    """Mark a node description as built in, run by ``implementation`` (``module:Class``)."""
    if not implementation.startswith(IMPLEMENTATIONS):
        raise ValueError(f"a built-in node's implementation lives in {IMPLEMENTATIONS}*, not {implementation}")

    def mark(cls: C) -> C:
        setattr(cls, BUILTIN_ATTR, implementation)
        return cls

    return mark
