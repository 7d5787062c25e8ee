"""``@builtin`` marks a node description as built in, naming the code that runs it;
``@implements`` makes that code a node from its description, declared once."""

from __future__ import annotations

import dataclasses
from typing import Callable, TypeVar

from tatolab._classpath import class_path
from tatolab._errors import NodeDefinitionError
from tatolab._sdk.nodes import (
    BUILTIN_ATTR,
    NODE_ATTR,
    implementation_of,
    node,
    node_spec,
)

C = TypeVar("C", bound=type)

__all__ = ["IMPLEMENTATIONS", "builtin", "implementation_of", "implements"]

IMPLEMENTATIONS = "tatolab._builtins."  # the only modules a built-in node's class may name


def builtin(implementation: str) -> Callable[[C], C]:
    """Mark a node description as built in, run by ``implementation`` (``module:Class``)."""
    if not implementation.startswith(IMPLEMENTATIONS):
        raise ValueError(f"a built-in node's implementation lives in {IMPLEMENTATIONS}*, not {implementation}")

    def mark(cls: C) -> C:
        setattr(cls, BUILTIN_ATTR, implementation)
        return cls

    return mark


def implements(cls: C) -> C:
    """The code that runs a built-in, written as a subclass of its description
    (``class TestPatternSource(described.TestPatternSource)``): a node with exactly the
    description's ports, execution, limits, config type and docstring, which it inherits
    and may not change. Its own ``__init__`` may take the config however it likes."""
    descriptions = [base for base in cls.__mro__[1:] if implementation_of(base)]
    if len(descriptions) != 1:
        raise NodeDefinitionError(
            f"{class_path(cls)} implements a built-in: it subclasses exactly one description made with "
            f"@builtin (from tatolab._sdk.builtins), not {len(descriptions)}"
        )
    (description,) = descriptions
    if implementation_of(description) != class_path(cls):
        raise NodeDefinitionError(
            f"{class_path(cls)} subclasses {description.__qualname__}, whose @builtin names "
            f"{implementation_of(description)} as its code; make the two agree"
        )
    spec = node_spec(description)
    if cls.__dict__.get("__doc__") is None:
        cls.__doc__ = description.__doc__
    node(cls, execution=spec.execution, interval_ms=spec.interval_ms, watchdog_ms=spec.watchdog_ms,
         memory_limit_mb=spec.memory_limit_mb)
    own = node_spec(cls)
    if (own.inputs, own.outputs, own.doc) != (spec.inputs, spec.outputs, spec.doc):
        raise NodeDefinitionError(
            f"{class_path(cls)} changes what its description {description.__qualname__} declares "
            "(ports or docstring): declare them once, in the description"
        )
    # the config type too: the description's, whatever the code's __init__ says
    setattr(cls, NODE_ATTR, dataclasses.replace(
        own, takes_config=spec.takes_config, config_type=spec.config_type, config_optional=spec.config_optional,
    ))
    return cls
