"""The runtime's side of frames: its surface pool, and which interpreter runs a built-in node."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

from tatolab._runtime import paths
from tatolab._sdk.builtins import IMPLEMENTATIONS
from tatolab._surfaces import pool


def _setting(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, "")))
    except ValueError:
        return default


def create_pool(say: Callable[..., None]) -> None:
    """The pool every stream's frames live in, sized by TATOLAB_SURFACE_SLOTS and TATOLAB_SURFACE_BUDGET_MB."""
    slots = min(_setting("TATOLAB_SURFACE_SLOTS", pool.DEFAULT_SLOTS), 1024)
    budget = _setting("TATOLAB_SURFACE_BUDGET_MB", pool.DEFAULT_BUDGET_BYTES >> 20) << 20
    pool.create(paths.surface_pool(), slots=slots, budget_bytes=budget)
    say("info", f"surface pool: {slots} slots, at most {budget >> 20} MiB", slots=slots, budget_bytes=budget)


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


def is_builtin(node: dict[str, Any]) -> bool:
    """A built-in node: marked so by the SDK and naming code that ships with the runtime.

    A graph is written by the project's own Python, so a mark on any other class is ignored:
    the runtime's interpreter runs only its own code."""
    return bool(node.get("builtin")) and str(node.get("class", "")).startswith(IMPLEMENTATIONS)


def python_for(spec: dict[str, Any], project_python: Path) -> Path:
    return Path(sys.executable) if spec.get("builtin") else project_python
