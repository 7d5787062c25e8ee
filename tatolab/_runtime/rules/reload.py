"""Which nodes a `dev` reload must restart, and which it can provably keep (plain decisions).

A new version's graph can replace the running one in place only when its shape is the
same: the same nodes with the same class, ports, execution and interval, the same links
and exposures. Then a node is kept only when nothing it runs can have changed:
- its entry in the graph (config, watchdog, memory limit) is the same, and
- its process has reported the modules it imported (every import, as it happens: see
  ``tatolab/_host/imports.py``), and no saved file could be one of them: a saved
  ``pkg/name.py`` or ``pkg/name/__init__.py`` matches any imported module whose last
  part is ``name`` (so a new file that would shadow an imported module counts too), and
- ``pyproject.toml`` was not saved (its dependencies may have changed), and
- no saved file is one its config names (a string in its config that is the file's path in
  the project, such as a GlslPixelEffect's ``path``: the node reads it at start).
Every other node restarts from the new code; when in doubt, a node restarts.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, Iterable

from tatolab._graph import Graph

SHAPE_KEYS = ("class", "execution", "interval_ms", "inputs", "outputs")
RESTART_KEYS = ("config", "watchdog_ms", "memory_limit_mb")


def same_shape(old: Graph, new: Graph) -> bool:
    """True when ``new`` can replace ``old`` node by node, with the same rings and links."""
    if [n["name"] for n in old["nodes"]] != [n["name"] for n in new["nodes"]]:
        return False
    for before, after in zip(old["nodes"], new["nodes"]):
        if any(before.get(key) != after.get(key) for key in SHAPE_KEYS):
            return False
    return old.get("links") == new.get("links") and old.get("exposures") == new.get("exposures")


def saved_names(files: Iterable[str]) -> set[str] | None:
    """The module names the saved files could be imported as (last part); None: every node restarts."""
    names = set()
    for file in files:
        path = PurePath(file)
        if path.name == "pyproject.toml":
            return None
        if path.suffix != ".py":
            continue
        names.add(path.parent.name if path.stem == "__init__" else path.stem)
    return names


def _names_a_saved_file(config: Any, files: Iterable[str]) -> bool:
    if not isinstance(config, dict):
        return False
    named = {PurePath(value).as_posix().lstrip("./") for value in config.values()
             if isinstance(value, str) and value and "\n" not in value}
    if not named:
        return False
    for file in files:
        path = PurePath(file).as_posix()
        if any(path == name or path.endswith("/" + name) for name in named):
            return True
    return False


def nodes_to_restart(old: Graph, new: Graph, files: Iterable[str],
                     imports: dict[str, set[str] | None]) -> list[str]:
    """The nodes of ``new`` to restart, given the files saved since the running version loaded
    and, per node, the modules its running process imported (None: unknown)."""
    saved = saved_names(files)
    before = {n["name"]: n for n in old["nodes"]}
    restart = []
    for node in new["nodes"]:
        name = node["name"]
        imported = imports.get(name)
        if (
            saved is None
            or imported is None
            or any(before[name].get(key) != node.get(key) for key in RESTART_KEYS)
            or any(module.rpartition(".")[2] in saved for module in imported)
            or _names_a_saved_file(node.get("config"), files)
        ):
            restart.append(name)
    return restart
