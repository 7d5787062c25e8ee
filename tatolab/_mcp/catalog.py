"""The node catalog an agent reads before adding a node: every built-in (its description, config
JSON Schema and ports) and the Python nodes the loaded streams use, with their docstrings.

Built-ins are whatever ``tatolab._sdk.builtins`` exports with a ``@builtin`` mark, so a family
module added there shows up with no list to keep here. Python nodes come from the live graph.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import msgspec

from tatolab._sdk import builtins
from tatolab._sdk.nodes import describe_node, implementation_of, is_node, node_spec


def config_schema(cls: type) -> dict[str, Any] | None:
    """The JSON Schema of the node's config, or None when it takes none."""
    spec = node_spec(cls)
    if not spec.takes_config:
        return None
    if spec.config_type in (dict, Any):
        return {"type": "object"}
    try:
        schema = msgspec.json.schema(spec.config_type)
    except (TypeError, ValueError):  # a type msgspec cannot describe (a pydantic model): name it at least
        return {"type": "object", "description": getattr(spec.config_type, "__name__", str(spec.config_type))}
    return _inlined(schema)


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``{"$ref": "#/$defs/X", "$defs": {"X": {...}}}`` as X's schema itself, when nothing else refers."""
    defs = schema.get("$defs", {})
    if set(schema) == {"$ref", "$defs"} and len(defs) == 1 and "$ref" not in json.dumps(defs):
        (only,) = defs.values()
        return only
    return schema


def builtin_nodes() -> list[dict[str, Any]]:
    entries = []
    for name, cls in sorted(vars(builtins).items()):
        if not (inspect.isclass(cls) and is_node(cls) and implementation_of(cls)):
            continue
        described = describe_node(cls)
        entries.append({
            "name": name,
            "use": f"from tatolab.stream import {name}" if _in_stream_module(name, cls) else f"{cls.__module__}:{name}",
            "doc": described["doc"],
            "execution": described["execution"],
            "inputs": described["inputs"],
            "outputs": described["outputs"],
            "config_schema": config_schema(cls),
        })
    return entries


def _in_stream_module(name: str, cls: type) -> bool:
    from tatolab import stream

    return getattr(stream, name, None) is cls


def python_nodes(graphs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each Python node class the loaded streams use, once, with its docstring and ports."""
    seen: dict[str, dict[str, Any]] = {}
    for graph in graphs:
        for node in graph.get("nodes", []):
            if node.get("builtin"):
                continue
            kind = node.get("kind")
            entry = seen.setdefault(kind, {
                "class": kind, "doc": node.get("doc"), "execution": node.get("execution"),
                "inputs": [{"port": p["port"], "delivery_profile": p["delivery_profile"]} for p in node.get("inputs", [])],
                "outputs": [{"port": p["port"]} for p in node.get("outputs", [])],
                "used_by": [],
            })
            entry["used_by"].append(f"{graph['name']}/{node['name']}")
    return list(seen.values())


def catalog(graphs: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The catalog; ``graphs`` None when no runtime answered (Python nodes then unknown)."""
    return {
        "builtins": builtin_nodes(),
        "python_nodes": python_nodes(graphs) if graphs is not None else None,
    }
