"""Which nodes a `dev` reload must restart, and which it can provably keep (plain decisions).

A new version's graph can replace the running one in place only when its shape is the
same: the same nodes with the same class, ports, execution and interval, the same links
and exposures. Then a node is kept only when nothing it runs can have changed:
- its entry in the graph (config, watchdog, memory limit) is the same, and
- its process has reported the modules it imported and the project files they came from
  (every import, as it happens: see ``tatolab/_host/imports.py``), and no saved file is one
  of them, by real path, nor would be imported under one of their names from the project
  folder (``nodes/a.py`` as ``nodes.a``: a new file that shadows an imported module), and
- ``pyproject.toml`` was not saved (its dependencies may have changed), and
- no saved file is one its config names (a string in its config that is the file's path in
  the project, such as a GlslPixelEffect's ``path``: the node reads it at start).
Every other node restarts from the new code; when in doubt, a node restarts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Iterable

from tatolab._graph import Graph, Node

SHAPE_KEYS = ("class", "execution", "interval_ms", "inputs", "outputs")
RESTART_KEYS = {"config": "config", "watchdog_ms": "watchdog", "memory_limit_mb": "memory limit"}  # key: as said


def same_shape(old: Graph, new: Graph) -> bool:
    """True when ``new`` can replace ``old`` node by node, with the same rings and links."""
    if [n["name"] for n in old["nodes"]] != [n["name"] for n in new["nodes"]]:
        return False
    for before, after in zip(old["nodes"], new["nodes"]):
        if any(before.get(key) != after.get(key) for key in SHAPE_KEYS):
            return False
    return old.get("links") == new.get("links") and old.get("exposures") == new.get("exposures")


@dataclass(frozen=True)
class Imported:
    """What a node's running process imported: module names, and the real paths of the project's
    files among them (tatolab/_host/imports.py)."""

    names: frozenset[str]
    files: frozenset[str]


@dataclass(frozen=True)
class Saved:
    """A saved file: its path in the project (as the log shows it) and its real path."""

    relative: str
    real: str


def module_name(relative: str) -> str | None:
    """The module a project file is imported as from the project folder (``nodes/a.py``: ``nodes.a``,
    ``nodes/__init__.py``: ``nodes``); None for a file that is no module."""
    path = PurePath(relative)
    if path.suffix != ".py":
        return None
    parts = path.with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or None


def _names_a_saved_file(config: Any, saved: Saved) -> bool:
    if not isinstance(config, dict):
        return False
    named = {PurePath(value).as_posix().lstrip("./") for value in config.values()
             if isinstance(value, str) and value and "\n" not in value}
    path = PurePath(saved.relative).as_posix()
    return any(path == name or path.endswith("/" + name) for name in named)


def _why(before: Node, node: Node, saved: list[Saved], imported: Imported | None) -> str | None:
    """Why ``node`` must restart (a phrase for the log), or None when it can be kept."""
    if any(s.relative == "pyproject.toml" or s.relative.endswith("/pyproject.toml") for s in saved):
        return "pyproject.toml was saved"
    changed = [RESTART_KEYS[key] for key in RESTART_KEYS if before.get(key) != node.get(key)]
    if changed:
        return f"its {' and '.join(changed)} changed"
    if imported is None:
        return "it had not said yet what it imports"
    for file in saved:
        if file.real in imported.files:
            return f"it imports {file.relative}"
        name = module_name(file.relative)
        if name is not None and name in imported.names:
            return f"{file.relative} is its module {name}"  # a new file that shadows what it imported
        if _names_a_saved_file(node.get("config"), file):
            return f"its config names {file.relative}"
    return None


def restarts(old: Graph, new: Graph, saved: Iterable[Saved],
             imports: dict[str, Imported | None]) -> dict[str, str]:
    """The nodes of ``new`` to restart, each with why, given the files saved since the running
    version loaded and, per node, what its running process imported (None: unknown)."""
    files = list(saved)
    before = {n["name"]: n for n in old["nodes"]}
    why = {}
    for node in new["nodes"]:
        reason = _why(before[node["name"]], node, files, imports.get(node["name"]))
        if reason is not None:
            why[node["name"]] = reason
    return why


def reload_line(why: dict[str, str], kept: list[str]) -> str:
    """The log's line for a reload in place: what restarted and why, and what was kept."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in why.items():
        by_reason.setdefault(reason, []).append(name)
    restarted = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in by_reason.items())
    line = f"reloaded {restarted}" if why else "reloaded no node"
    if kept:
        line += f"; kept {', '.join(kept)} (nothing they import was saved, and their config is the same)"
    return line
