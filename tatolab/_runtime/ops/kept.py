"""Kept streams: `start` (a stopped one, or retry a failed one) and `rm` (the only way to forget one)."""

from __future__ import annotations

from typing import TypedDict

from tatolab._control.errors import ControlError, Fix
from tatolab._runtime.runtime import Runtime
from tatolab._runtime.lifecycle.kept import KeptLoadFailed
from tatolab._runtime.ops import op
from tatolab._runtime.stored.records import DamagedRecord


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
    record = runtime.kept.holder(name)
    stream = runtime.streams.get(name)
    if record is None:
        if stream is not None:
            raise ControlError(f"{name} is {stream.mode} and already running; only kept streams are started")
        raise runtime.unknown(name)
    if isinstance(record, DamagedRecord):
        raise record.refusal("started")
    if stream is not None:
        return {"name": name, "state": "kept", "project": record.project, "already": True}
    retried = record.failed is not None
    runtime.kept.set_stopped(record, False)
    try:
        loaded = await runtime.start_kept(name, record)
    except KeptLoadFailed as exc:
        raise ControlError(f"{name} failed again: {exc.reason}", code="failed_again", fixes=[
            Fix("start", {"name": name}, "retries it"), Fix("rm", {"name": name}, "forgets it")],
            details={"name": name, "why": exc.reason.to_wire()}) from None
    if loaded is None:
        raise ControlError(f"{name} changed while it was starting (stopped, removed or replaced)",
                           code="changed_meanwhile", fixes=[Fix("streams", {}, "see")])
    return {"name": name, "state": "kept", "project": record.project, "retried": retried,
            "nodes": len(loaded.graph["nodes"])}


@op("rm")
async def rm(runtime: Runtime, name: str) -> Removed:
    """Forget stream ``name``: unload it, and remove its kept record and copy of sources (the only way to)."""
    return await runtime.remove(name)  # type: ignore[return-value]
