"""Loading, listing and stopping streams, and the list of operations itself."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncGenerator, AsyncIterator, Literal, TypedDict

from tatolab._control.operations import Events
from tatolab._control.source import StreamSource
from tatolab._runtime.runtime import Runtime, request_env
from tatolab._runtime.stored import unwritten
from tatolab._runtime.stored.unwritten import WriteFailure
from tatolab._runtime.feed import Feed
from tatolab._runtime.views.graph import node_entry
from tatolab._runtime.lifecycle.nodes import Ended, ended_event, wait_ready
from tatolab._runtime.ops import OPS, op
from tatolab._runtime.rules import health
from tatolab._runtime.lifecycle.streams import LoadedStream


class Pong(TypedDict):
    pong: bool


class Loaded(TypedDict):
    event: Literal["loaded"]
    name: str
    project: str
    nodes: int


class Kept(TypedDict):
    event: Literal["loaded"]
    name: str
    project: str
    nodes: int
    start_ms: float | None  # from the request until every node ran (None: not all did in time)
    ready: int  # nodes that made their first process() call
    not_ready: list[str]
    failed: dict[str, str]  # node -> the one line it ended with: it can never run as configured


class LogEvent(TypedDict):
    event: Literal["log"]
    record: dict[str, Any]  # one log record (tatolab/_records.py)


class StreamRow(TypedDict, total=False):
    name: str
    state: str  # attached | kept | stopped | failed
    nodes: int | None
    project: str
    reason: str  # failed: why, in plain words
    why: dict[str, Any]  # failed: why, with its own fixes ({text, code, fixes, details}: tatolab/_control/errors.py Reason)
    changes: int  # loaded and changed live since (add_node, connect...); a kept one loads as recorded after a restart
    hint: str  # a damaged record: what to do
    fixes: list[dict[str, Any]]  # failed: the operations that fix it ({op, args, does}: tatolab/_control/errors.py)


class TroubledNode(TypedDict):
    stream: str
    name: str
    state: str
    restarts: int
    last_error: str | None
    hung: bool


class Listing(TypedDict):
    streams: list[StreamRow]
    troubled: list[TroubledNode]  # nodes that crashed, restarted or hang
    unwritten: list[WriteFailure]  # files the runtime could not write (a full disk, no descriptor left)
    relay: str | None  # why the MoQ relay is not serving exposed outputs (a port it cannot bind); None: it is
    recordings: list[dict[str, Any]]  # recordings in progress (ops/record.py: RecordingRow)


class Stopped(TypedDict):
    name: str
    state: Literal["stopped"]
    kept: bool


class Described(TypedDict):
    name: str
    description: str
    arguments: dict[str, Any]  # JSON Schema of the arguments object
    talks: bool
    result: dict[str, Any]  # JSON Schema (of the events, for an operation that talks)

READY_WAIT_S = 3.0  # `run -d` answers once every node runs, or after this long saying which do not


@op("ping")
async def ping(runtime: Runtime) -> Pong:
    """Whether the runtime answers."""
    return {"pong": True}


@op("operations")
async def operations(runtime: Runtime) -> list[Described]:
    """Every operation this runtime answers: its description, and JSON Schemas of its arguments and result."""
    return [OPS[name].schema() for name in sorted(OPS)]  # type: ignore[misc]


@op("load")
async def load(
    runtime: Runtime,
    project: str,
    target: str | None = None,
    file: str | None = None,
    name: str | None = None,
    mode: Literal["attached", "kept"] = "attached",
    env: dict[str, str] | None = None,
) -> Events[Loaded, LogEvent | Ended] | Loaded | Kept:
    """Compile the stream in ``project`` (``target``: ``file.py:function`` or ``module:function``;
    ``file``: a file with one @stream; ``name``: another name) and start it. Attached, it runs
    while the connection stays open: its log follows as events, and hanging up unloads it.
    Kept, the runtime keeps it, across restarts too, and answers once its nodes are ready (or
    after a while, saying which are not). ``env`` is the loading command's environment, which
    the stream compiles and runs with."""
    asked_ns = time.monotonic_ns()
    stream = await runtime.load(StreamSource.of(project, target, file, name), mode=mode, env=request_env(env))
    summary: Loaded = {"event": "loaded", "name": stream.name, "project": str(stream.project),
                       "nodes": len(stream.graph["nodes"])}
    if mode == "kept":
        ready = await wait_ready(stream, READY_WAIT_S, since_ns=asked_ns)
        return {**summary, "start_ms": ready["start_ms"], "ready": ready["ready"], "not_ready": ready["not_ready"],
                "failed": ready["failed"]}
    return _attached(runtime, stream, summary)


async def _attached(runtime: Runtime, stream: LoadedStream,
                    summary: Loaded) -> AsyncGenerator[Loaded | LogEvent | Ended, None]:
    """Stream the log to the terminal; when it hangs up, the stream is unloaded."""
    yield summary
    assert stream.log is not None  # a loaded stream's nodes started, and start_nodes gave it its log
    queue = stream.log.watch()
    try:
        async for event in log_events(stream, queue):
            yield event
    finally:
        stream.log.unwatch(queue)
        await runtime.unload_if_current(stream, "its terminal closed")


@op("streams")
async def streams(runtime: Runtime) -> Listing:
    """The streams on this machine (loaded, then kept ones not loaded now), their nodes in trouble,
    and the files the runtime could not write."""
    troubled: list[TroubledNode] = []
    for stream in runtime.streams.values():
        for node in stream.graph["nodes"]:
            process = stream.nodes.get(node["name"])
            if process is None:
                continue
            entry = node_entry(node, process)
            if health.is_trouble(entry):
                troubled.append({"stream": stream.name, "name": entry["name"], "state": entry["state"],
                                 "restarts": entry["restarts"], "last_error": entry["last_error"],
                                 "hung": entry["hung"]})
    return {"streams": runtime.list_streams(), "troubled": troubled,  # type: ignore[typeddict-item]
            "unwritten": unwritten.report(), "relay": runtime.relay.problem if runtime.relay is not None else None,
            "recordings": [r.row() for r in runtime.recordings.values() if r.state != "ended"]}


@op("stop")
async def stop(runtime: Runtime, name: str) -> Stopped:
    """Unload stream ``name``; a kept one is recorded as stopped, so it stays stopped across restarts."""
    return await runtime.stop(name)  # type: ignore[return-value]


async def log_events(stream: LoadedStream, queue: Feed[dict[str, Any]]) -> AsyncIterator[LogEvent | Ended]:
    """Log records as events until the stream ends, then one ``ended`` event."""
    ended = asyncio.create_task(stream.ended.wait())
    record: asyncio.Task | None = None
    try:
        while True:
            record = asyncio.create_task(queue.get())
            done, _ = await asyncio.wait({record, ended}, return_when=asyncio.FIRST_COMPLETED)
            if record in done:
                yield {"event": "log", "record": record.result()}
                continue
            record.cancel()
            while not queue.empty():
                yield {"event": "log", "record": queue.get_nowait()}
            yield ended_event(stream)
            return
    finally:
        ended.cancel()
        if record is not None:
            record.cancel()
