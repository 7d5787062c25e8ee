"""The package's floors: each room imports only from its own floor or below, and no modules import
each other in a circle (docs/architecture.md shows the same layout)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tatolab"

FLOORS = {  # room -> floor; a room may import its own floor and the ones below
    "_errors": 1, "_classpath": 1, "_words": 1, "_hints": 1, "_records": 1, "_safe_fs": 1, "_settings": 1,
    "_user_code": 1, "_source_imports": 1, "_value": 1, "_naming": 1, "__init__": 1,
    "_bags": 2, "_links": 2,
    "_sdk": 3, "_control": 3, "_surfaces": 3, "_media": 3, "_model": 3, "_graph": 3,
    "stream": 4, "testing": 4, "_compile": 4, "_describe": 4, "_host": 4, "_builtins": 4, "_recorder": 4,
    "_runtime": 5,
    "_cli": 6, "_mcp": 6,
}

RUNTIME_FLOORS = {  # the same inside tatolab/_runtime: its folders and top modules
    "rules": 1, "core": 1, "machine": 1, "surfaces": 1, "feed": 1, "__init__": 1,
    "stored": 2,
    "processes": 3,
    "lifecycle": 4,
    "relay": 5,
    "views": 6, "foxglove": 6, "runtime": 6,
    "ops": 7,
    "server": 8,
    "daemon": 9,
    "entry": 10,
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names |= {f"{node.module}.{alias.name}" for alias in node.names}
        found[_module(path)] = {n for n in names if n.startswith("tatolab")}
    modules = set(found)
    return {m: {n for n in names if n in modules and n != m} for m, names in found.items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _runtime_room(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def test_every_import_goes_to_the_same_floor_or_below():
    rooms = {_room(m) for m in _imports()}
    assert rooms <= set(FLOORS), f"rooms with no floor yet: {rooms - set(FLOORS)}; give each one in FLOORS"
    upward = [f"{m} -> {n}" for m, names in _imports().items() for n in names
              if FLOORS[_room(n)] > FLOORS[_room(m)]]
    assert upward == []


def test_inside_the_runtime_every_import_goes_to_the_same_floor_or_below():
    """Rules and storage know nothing of processes, processes nothing of a loaded stream, the loaded
    stream nothing of the relay, and so on up to the operations, the server and the daemon."""
    inside = {m: {n for n in names if _room(n) == "_runtime"}
              for m, names in _imports().items() if _room(m) == "_runtime"}
    rooms = {_runtime_room(m) for m in inside}
    assert rooms <= set(RUNTIME_FLOORS), f"rooms with no floor yet: {rooms - set(RUNTIME_FLOORS)}; give each one in RUNTIME_FLOORS"
    upward = [f"{m} -> {n}" for m, names in inside.items() for n in names
              if RUNTIME_FLOORS[_runtime_room(n)] > RUNTIME_FLOORS[_runtime_room(m)]]
    assert upward == []


CORE_REFUSES = {"asyncio", "os", "subprocess", "socket", "threading", "time", "signal", "selectors", "shutil"}


def test_the_runtime_core_does_no_io():
    """The lifecycle's core (tatolab/_runtime/core) is a state machine taking commands and returning
    effects: no asyncio, os, subprocess, socket, threading or time there, and only pure rooms of the
    runtime (rules) beneath it; the drivers (runtime.py) carry its effects out."""
    core = PACKAGE / "_runtime" / "core"
    assert list(core.glob("*.py")), "tatolab/_runtime/core is gone"
    found = []
    for path in core.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in CORE_REFUSES]
            found += [f"{path.name}: {n}" for n in names if n.startswith("tatolab._runtime.")
                      and _runtime_room(n) not in ("core", "rules")]
    assert found == []


def test_no_modules_import_each_other_in_a_circle():
    graph = _imports()
    for package in {m.rsplit(".", 1)[0] for m in graph}:  # a module imports its package's __init__ freely
        graph.setdefault(package, set())
    state: dict[str, int] = {}
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for name in sorted(graph[module]):
            if name in module.split(".")[0:1] or module.startswith(name + "."):
                continue  # a package's own __init__
            if state.get(name) == 1:
                circles.append(path[path.index(name):] + [name])
            elif name not in state:
                visit(name, path + [name])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_no_module_holds_more_than_700_lines():
    """A room holds one idea: a module past 700 lines holds several (split it into a package)."""
    long = {str(path.relative_to(PACKAGE.parent)): lines for path in PACKAGE.rglob("*.py")
            if (lines := len(path.read_text().splitlines())) > 700}
    assert long == {}
