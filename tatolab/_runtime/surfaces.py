"""The runtime's side of frames: its surface pool, and which interpreter runs a built-in node."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Mapping

from tatolab import _settings as settings
from tatolab._links import ring
from tatolab._control import paths
from tatolab._sdk.builtins import IMPLEMENTATIONS
from tatolab._surfaces import pool


_users = 0  # loaded streams: the pool exists while there is one


def acquire() -> None:
    """A stream is starting: make the pool if it is the first (sized by TATOLAB_SURFACE_SLOTS and
    TATOLAB_SURFACE_BUDGET_MB), so its frames have somewhere to live."""
    global _users
    if _users == 0:
        slots = settings.value("TATOLAB_SURFACE_SLOTS")  # checked as tatolabd started (_settings.py)
        budget = settings.value("TATOLAB_SURFACE_BUDGET_MB") << 20
        holders = settings.value(pool.HOLDERS_SETTING)
        ring.reap(paths.surface_pool())  # one left by a runtime that died
        pool.create(paths.surface_pool(), slots=slots, budget_bytes=budget, holders=holders)
    _users += 1


def release() -> None:
    """A stream stopped, its nodes gone: the last one takes the pool and its memory away."""
    global _users
    _users = max(0, _users - 1)
    if _users == 0:
        ring.reap(paths.surface_pool())


def pool_stats() -> dict[str, Any] | None:
    """Size and in-use counts for the graph (None when the pool is not there)."""
    try:
        handle = pool.Pool(paths.surface_pool())
    except (OSError, pool.SurfaceError):
        return None
    try:
        return handle.stats()
    finally:
        handle.dispose()


def refused_pids() -> set[int]:
    """Processes the pool refused a place (all its holders taken): their nodes get no frames."""
    try:
        handle = pool.Pool(paths.surface_pool())
    except (OSError, pool.SurfaceError):
        return set()
    try:
        return handle.refused_pids()
    finally:
        handle.dispose()


def refusal_words(holders: int | None = None) -> str:
    """What a node's graph entry says when the pool refused it, with the fix."""
    limit = holders if holders is not None else settings.value(pool.HOLDERS_SETTING)
    return (f"it cannot use frames: all {limit} places in the surface pool are taken; set "
            f"{pool.HOLDERS_SETTING} higher for tatolabd and restart it, or run fewer nodes that handle frames")


def is_builtin(node: Mapping[str, Any]) -> bool:
    """A built-in node: marked so by the SDK and naming code that ships with the runtime.

    A graph is written by the project's own Python, so a mark on any other class is ignored:
    the runtime's interpreter runs only its own code."""
    return bool(node.get("builtin")) and str(node.get("class", "")).startswith(IMPLEMENTATIONS)


def python_for(spec: Mapping[str, Any], project_python: Path) -> Path:
    return Path(sys.executable) if spec.get("builtin") else project_python
