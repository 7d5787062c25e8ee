"""Loading, listing and stopping streams."""

from __future__ import annotations

import time
from typing import Any, AsyncIterator

from tatolab._runtime.control import ControlError, Runtime, request_env
from tatolab._runtime.ops import op

READY_WAIT_S = 3.0  # `run -d` answers once every node runs, or after this long saying which do not


@op("ping")
async def ping(runtime: Runtime) -> dict[str, Any]:
    return {"pong": True}


@op("load")
async def load(
    runtime: Runtime,
    project: str,
    target: str | None = None,
    file: str | None = None,
    name: str | None = None,
    mode: str = "attached",
    env: dict[str, str] | None = None,
) -> Any:
    if mode not in ("attached", "kept"):
        raise ControlError(f"mode must be attached or kept, not {mode!r}")
    asked_ns = time.monotonic_ns()
    stream = await runtime.load(project, target=target, file=file, name=name, mode=mode, env=request_env(env))
    summary = {"name": stream.name, "project": str(stream.project), "nodes": len(stream.graph["nodes"])}
    if mode == "kept":
        return {**summary, **await stream.wait_ready(READY_WAIT_S, since_ns=asked_ns)}
    return _attached(runtime, stream, summary)


async def _attached(runtime: Runtime, stream: Any, summary: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """Stream the log to the terminal; when it hangs up, the stream is unloaded."""
    yield {"event": "loaded", **summary}
    queue = stream.log.watch()
    try:
        async for event in stream.log_events(queue):
            yield event
    finally:
        stream.log.unwatch(queue)
        await runtime.unload_if_current(stream, "its terminal closed")


@op("streams")
async def streams(runtime: Runtime) -> list[dict[str, Any]]:
    return runtime.list_streams()


@op("stop")
async def stop(runtime: Runtime, name: str) -> dict[str, Any]:
    return await runtime.stop(name)
