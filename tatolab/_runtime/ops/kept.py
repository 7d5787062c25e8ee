"""Kept streams: `start` (a stopped one, or retry a failed one) and `rm` (the only way to forget one)."""

from __future__ import annotations

from typing import TypedDict

from tatolab._runtime.runtime import Runtime
from tatolab._runtime.ops import op


class Started(TypedDict, total=False):
    name: str
    state: str
    project: str
    already: bool  # it was running already
    retried: bool  # it had failed, and this start retried it
    nodes: int


class Removed(TypedDict):
    name: str
    forgotten: bool  # a kept record was removed
    project: str | None


@op("start")
async def start(runtime: Runtime, name: str) -> Started:
    """Start kept stream ``name`` (stopped, or failed: this retries it); it stays started across restarts."""
    return await runtime.start(name)  # type: ignore[return-value]


@op("rm")
async def rm(runtime: Runtime, name: str) -> Removed:
    """Forget stream ``name``: unload it, and remove its kept record and copy of sources (the only way to)."""
    return await runtime.remove(name)  # type: ignore[return-value]
