"""`tatolab dev`: load a stream attached, and load it again after every save.

The runtime does the watching. Per burst of saves: compile in the project's ``.venv``; if
that works, replace the running version (every node process of the old version stops,
then every node of the new one starts from the new code, with fresh rings); if it fails,
send the error and keep the previous version running. Hanging up unloads the stream.

Events sent to the client, in order:
  ``loaded``   a version is running: name, nodes, project, reload (bool), and timings
  ``change``   saves were seen: files, ts_ns
  ``failed``   a save did not load: error (with its traceback), running (the name still running, or None)
  ``log``      a record from the stream's log
  ``ended``    the stream ended by other means (`tatolab stop`, the runtime stopping): reason, runtime_down
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any, AsyncGenerator, Literal, TypedDict, Union

from tatolab import _records
from tatolab._graph import Graph
from tatolab._runtime.processes.compiler import CompileError, compile_stream
from tatolab._control.errors import ControlError
from tatolab._control.operations import Events
from tatolab._control.source import StreamSource
from tatolab._runtime.feed import Feed
from tatolab._runtime.lifecycle.nodes import Ended, ended_event
from tatolab._runtime.runtime import Runtime, open_project, request_env
from tatolab._runtime.ops import op
from tatolab._runtime.rules.reload import Saved, reload_line
from tatolab._runtime.ops.streams import LogEvent, log_events
from tatolab._runtime.rules.health import NodeState
from tatolab._runtime.lifecycle.streams import LoadedStream
from tatolab._runtime.lifecycle.watch import QUIET_MS, project_changes

RELOAD_REASON = "replaced by the version just saved"
SPAWN_WAIT_S = 2.0  # how long the `loaded` event waits to report when node processes were spawned


class _ReloadedKeys(TypedDict):
    event: Literal["loaded"]
    name: str
    project: str
    nodes: int
    reload: bool  # False for the first load
    ts_ns: int
    timings_ms: dict[str, float]  # replace, spawn, since_change


class Reloaded(_ReloadedKeys, total=False):
    restarted: list[str]  # a reload in place (the same shape): the nodes restarted
    kept: list[str]  # and those kept running, with every ring


class Change(TypedDict):
    event: Literal["change"]
    files: list[str]
    ts_ns: int
    first_seen_ns: int


class Compiled(TypedDict):
    event: Literal["compiled"]
    ts_ns: int
    compile_ms: float


class Failed(TypedDict, total=False):
    event: Literal["failed"]
    error: str
    code: str  # for a refusal (tatolab/_control/errors.py): its code, fixes and details
    fixes: list[dict[str, Any]]
    details: dict[str, Any]
    running: str | None  # the name still running the previous version
    ts_ns: int


DevEvent = Union[Reloaded, Change, Compiled, Failed, LogEvent, Ended]  # what `dev` tells, in order (above)


@op("dev")
async def dev(
    runtime: Runtime,
    project: str,
    target: str | None = None,
    file: str | None = None,
    name: str | None = None,
    env: dict[str, str] | None = None,
) -> Events[DevEvent, DevEvent]:
    """Load the stream in ``project`` attached, and load it again after every save of a ``.py`` file
    or ``pyproject.toml`` (arguments as for ``load``). A save that does not compile or start is told
    as ``failed`` and the previous version keeps running. Hanging up unloads the stream."""
    project_dir, _ = open_project(project)
    session = DevSession(runtime, StreamSource.of(project_dir, target, file, name), request_env(env))
    session.start_watching()
    try:
        await session.first_load()  # a refused name ends dev here, as an error answer
    except BaseException:
        await session.close()
        raise
    return session.events()


class DevSession:
    def __init__(self, runtime: Runtime, source: StreamSource, env: dict[str, str] | None) -> None:
        self.runtime = runtime
        self.source = source
        self.project = source.project
        self.env = env  # the `tatolab dev` command's: every version compiles and runs with it
        self.stream: LoadedStream | None = None
        self.retiring: LoadedStream | None = None  # the version being replaced: its end is not dev's end
        # log events may be dropped for a slow terminal (counted, and said); dev's own never are
        self.out: Feed[DevEvent] = Feed(self._gap, droppable=lambda event: event.get("event") == "log")
        self.changed: list[str] = []
        self.unapplied: list[str] = []  # saved since the running version loaded (a failed compile applies none)
        self.change_ns = 0
        self.wake = asyncio.Event()
        self.stop_watching = threading.Event()
        self.tasks: list[asyncio.Task] = []
        self.swap: asyncio.Future | None = None

    def _gap(self, count: int) -> LogEvent:
        stream = self.stream
        if stream is not None and stream.log is not None:
            return {"event": "log", "record": stream.log.gap_record(count)}
        return {"event": "log", "record": _records.make_record(
            f"{count} log record(s) dropped here: this terminal reads more slowly than the stream logs",
            level="warning", fields={"dropped": count})}

    def start_watching(self) -> None:
        self.tasks.append(asyncio.create_task(self._watch(), name=f"dev watch {self.project}"))

    async def first_load(self) -> None:
        await asyncio.sleep(0)  # let the watcher set up its watches before the first compile
        try:
            graph = await self._compile()
        except CompileError as exc:
            self._say_failed(exc)
        else:
            await self._swap_in(graph, time.monotonic_ns(), reload=False)
        self.tasks.append(asyncio.create_task(self._reload_loop(), name=f"dev reload {self.project}"))

    async def events(self) -> AsyncGenerator[DevEvent, None]:
        try:
            while True:
                event = await self.out.get()
                yield event
                if event["event"] == "ended":
                    return
        finally:
            await self.close()

    async def close(self) -> None:
        """Stop watching and reloading, then unload the stream dev loaded."""
        self.stop_watching.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        current = [self.stream]
        if self.swap is not None:  # a replacement under way finishes, then is unloaded too
            swapped = (await asyncio.gather(self.swap, return_exceptions=True))[0]
            current.append(swapped if isinstance(swapped, LoadedStream) else None)
        for stream in current:
            if stream is not None:
                await self.runtime.unload_if_current(stream, "its terminal closed")

    async def _watch(self) -> None:
        async for files in project_changes(self.project, self.stop_watching):
            if not self.changed:
                self.change_ns = time.monotonic_ns()
            self.changed.extend(f for f in files if f not in self.changed)
            self.wake.set()

    async def _reload_loop(self) -> None:
        # Saves that arrive while a reload is under way gather into the next one. The compile
        # starts with the first save of a burst and starts again after each later one, so it
        # runs during the quiet wait instead of after it (a stream function only builds a graph).
        compiling: asyncio.Future | None = None
        try:
            while True:
                await self.wake.wait()
                while True:  # the burst is over once no batch came for QUIET_MS
                    self.wake.clear()
                    await _cancelled(compiling)
                    compiling = asyncio.ensure_future(self._compile())
                    try:
                        await asyncio.wait_for(self.wake.wait(), QUIET_MS / 1000)
                    except asyncio.TimeoutError:
                        break
                self.wake.clear()
                files, self.changed = self.changed, []
                self.unapplied.extend(f for f in files if f not in self.unapplied)
                detected_ns = time.monotonic_ns()
                self.out.put_nowait({"event": "change", "files": files, "ts_ns": detected_ns,
                                     "first_seen_ns": self.change_ns})
                assert compiling is not None
                try:
                    graph = await compiling
                except CompileError as exc:
                    self._say_failed(exc)
                    continue
                finally:
                    compiling = None
                compiled_ns = time.monotonic_ns()
                self.out.put_nowait({"event": "compiled", "ts_ns": compiled_ns,
                                     "compile_ms": (compiled_ns - detected_ns) / 1e6})
                await self._swap_in(graph, detected_ns, reload=True)
        finally:
            await _cancelled(compiling)  # dev ended mid-compile: no compile process is left behind

    async def _compile(self) -> Graph:
        return await compile_stream(self.source, env=self.env, starter=self.runtime.starter)

    async def _swap_in(self, graph: Graph, detected_ns: int, *, reload: bool) -> None:
        old = self.stream
        if reload and old is not None and self.runtime.in_place(old, graph):
            await self._reload_in_place(old, graph, detected_ns)
            return
        self.retiring = old
        started_ns = time.monotonic_ns()
        self.swap = asyncio.ensure_future(self.runtime.replace(self.project, graph, old=old, reason=RELOAD_REASON,
                                                                 env=self.env))
        try:
            stream = await asyncio.shield(self.swap)
        except ControlError as exc:
            if not reload:
                raise  # the first load: refusing the name refuses dev
            if old is not None and old.ended.is_set():  # `tatolab stop` during the reload ends dev
                self.out.put_nowait(ended_event(old))
                return
            self._say_failed(exc)
            return
        finally:
            self.retiring = None
        self.stream = stream
        self.swap = None
        self.unapplied = []
        replaced_ns = time.monotonic_ns()
        self.tasks.append(asyncio.create_task(self._follow(stream), name=f"dev log {stream.name}"))
        spawned_ns = await _spawned(stream)
        self.out.put_nowait({
            "event": "loaded", "name": stream.name, "project": str(stream.project),
            "nodes": len(stream.graph["nodes"]), "reload": reload, "ts_ns": spawned_ns,
            "timings_ms": {
                "replace": (replaced_ns - started_ns) / 1e6,
                "spawn": (spawned_ns - replaced_ns) / 1e6,
                "since_change": (spawned_ns - detected_ns) / 1e6,
            },
        })

    async def _reload_in_place(self, stream: LoadedStream, graph: Graph, detected_ns: int) -> None:
        """The new version has the running one's shape: restart only the nodes that may run changed
        code or config (rules/reload.py), keep the others and every ring, and say which were kept."""
        saved = [Saved(file, os.path.realpath(self.project / file)) for file in self.unapplied]
        started_ns = time.monotonic_ns()
        try:
            done = await self.runtime.restart_nodes(stream, graph, saved)
        except ControlError as exc:
            if stream.ended.is_set():  # `tatolab stop` during the reload ends dev
                self.out.put_nowait(ended_event(stream))
                return
            self._say_failed(exc)
            return
        restart, kept = list(done.why), done.kept
        self.unapplied = []
        if stream.log is not None:
            stream.log.say(reload_line(done.why, kept), restarted=restart, kept=kept, why=done.why)
        replaced_ns = time.monotonic_ns()
        spawned_ns = await _spawned(stream)
        self.out.put_nowait({
            "event": "loaded", "name": stream.name, "project": str(stream.project),
            "nodes": len(stream.graph["nodes"]), "reload": True, "ts_ns": spawned_ns,
            "restarted": restart, "kept": kept,
            "timings_ms": {
                "replace": (replaced_ns - started_ns) / 1e6,
                "spawn": (spawned_ns - replaced_ns) / 1e6,
                "since_change": (spawned_ns - detected_ns) / 1e6,
            },
        })

    def _say_failed(self, error: str | ControlError) -> None:
        running = self.stream.name if self.stream is not None and not self.stream.ended.is_set() else None
        text = error.message if isinstance(error, ControlError) else error
        failed: Failed = {"event": "failed", "error": text, "running": running, "ts_ns": time.monotonic_ns()}
        if isinstance(error, ControlError):  # a refusal: its code, fixes and details too
            failed["code"], failed["details"] = error.code, error.details
            failed["fixes"] = error.to_wire()["fixes"]
        self.out.put_nowait(failed)

    async def _follow(self, stream: LoadedStream) -> None:
        """Forward the stream's log; its end ends dev unless a newer version replaced it."""
        assert stream.log is not None
        queue = stream.log.watch()
        try:
            async for event in log_events(stream, queue):
                replaced = stream is self.retiring or stream is not self.stream
                if event["event"] == "log":
                    if not (replaced and event["record"].get("node") is None):
                        self.out.put_nowait(event)  # the old version's own stop notice is noise here
                elif not replaced:
                    self.out.put_nowait(event)
        finally:
            if stream.log is not None:
                stream.log.unwatch(queue)


async def _cancelled(task: asyncio.Future | None) -> None:
    """Drop a compile no longer wanted: cancel it and wait for its process to be gone."""
    if task is None:
        return
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)  # also takes the error of one that failed


async def _spawned(stream: LoadedStream) -> int:
    """When every node process of ``stream`` has been spawned (for the timings in ``loaded``)."""
    deadline = time.monotonic() + SPAWN_WAIT_S
    while time.monotonic() < deadline:
        if all(node.process is not None or node.state is not NodeState.STARTING for node in stream.nodes.values()):
            break
        await asyncio.sleep(0.002)
    return time.monotonic_ns()
