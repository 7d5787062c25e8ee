"""A node class as ``module:Qualname``: how the compiled graph names it, and importing it by that name.

The graph carries the name (tatolab/_sdk/nodes.py writes it); the node host imports the
class by it, and so does the runtime's check of a kept stream, in the project's interpreter.
"""

from __future__ import annotations

import importlib
from typing import Any


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def load_class(path: str) -> Any:
    """The object ``path`` names; ImportError or AttributeError says what is missing."""
    module_name, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
