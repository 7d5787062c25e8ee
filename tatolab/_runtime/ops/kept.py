"""Kept streams: `start` (a stopped one, or retry a failed one) and `rm` (the only way to forget one)."""

from __future__ import annotations

from typing import TypedDict

from tatolab._control.errors import ControlError, Fix
from tatolab._runtime.control import Runtime
from tatolab._runtime.kept import KeptLoadFailed, start_kept
from tatolab._runtime.ops import op
from tatolab._runtime.records import DamagedRecord, KeptRecord


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
        raise ControlError(f"{name} cannot be started: {record.reason}. {record.fix}")
    if stream is not None:
        return {"name": name, "state": "kept", "project": record.project, "already": True}
    retried = record.failed is not None
    runtime.kept.set_stopped(record, False)
    try:
        loaded = await start_kept(runtime, name, record)
    except KeptLoadFailed as exc:
        raise ControlError(f"{name} failed again: {exc.reason}", code="failed_again", fixes=[
            Fix("start", {"name": name}, "retries it"), Fix("rm", {"name": name}, "forgets it")]) from None
    if loaded is None:
        raise ControlError(f"{name} changed while it was starting (stopped, removed or replaced)",
                           code="changed_meanwhile", fixes=[Fix("streams", {}, "see")])
    return {"name": name, "state": "kept", "project": record.project, "retried": retried,
            "nodes": len(loaded.graph["nodes"])}


@op("rm")
async def rm(runtime: Runtime, name: str) -> Removed:
    """Forget stream ``name``: unload it, and remove its kept record and copy of sources (the only way to)."""
    async with runtime._load_lock:  # never between a `run -d` replacing this stream and its start
        return await _rm(runtime, name)


async def _rm(runtime: Runtime, name: str) -> dict[str, Any]:
    record = runtime.kept.holder(name)
    stream = runtime.streams.get(name)
    if record is None and stream is None:
        raise runtime.unknown(name)
    if isinstance(record, KeptRecord):
        runtime.kept.set_stopped(record, True)  # a crash before the record is gone leaves it stopped, not back
    if stream is not None:
        await runtime.unload_if_current(stream, "removed by `tatolab rm`")
    if record is not None:
        runtime.kept.forget(name)
    project = record.project if record is not None else str(stream.project) if stream is not None else None
    return {"name": name, "forgotten": record is not None, "project": project}
