"""The Runtime: the streams it runs, and the one way each starts and stops."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

from tatolab._graph import Graph
from tatolab._media.v4l2 import resolve_camera
from tatolab._control.errors import ControlError, Fix, Reason
from tatolab._control.source import StreamSource
from tatolab._control.words import fixes_in_turn
from tatolab._links import ring
from tatolab._control import paths
from tatolab._runtime.processes.compiler import compile_stream, project_python
from tatolab._runtime.processes.environment import command_env
from tatolab._runtime.lifecycle.line import Line
from tatolab._runtime.stored.recording_marks import CutRecording, RecordingMarks
from tatolab._runtime.lifecycle.kept import KeptLoadFailed, KeptStreams, preflight, strip_reason
from tatolab._runtime.machine import machine_name
from tatolab._runtime.lifecycle.nodes import restart_nodes, start_nodes, stop_nodes
from tatolab._runtime.stored.records import DamagedRecord, KeptRecord
from tatolab._runtime.rules import cameras, caps, names
from tatolab._runtime.stored.snapshots import SnapshotError
from tatolab._runtime.processes.starter import ProcessStarter
from tatolab._runtime.processes.starter import shared as shared_starter
from tatolab._runtime.lifecycle.streams import LoadedStream
from tatolab._runtime.lifecycle.wiring import release_remote, rewire
from tatolab._runtime.relay.relay import Relay
from tatolab._runtime.relay.pulls import set_state, wanted_pulls
from tatolab._runtime.relay.wanted import wanted
from tatolab._words import counted


T = TypeVar("T")


def open_project(project: str | Path) -> tuple[Path, Path]:
    """The project folder and its interpreter, or the error that says what to fix."""
    folder = Path(project).resolve()
    if not folder.is_dir():
        raise ControlError(f"{folder} is not a folder", code="not_a_folder",
                           fixes=[Fix("load", {"project": None}, "pass a project folder")])
    return folder, project_python(folder)  # or CompileError, a refusal with its fix


def request_env(value: Any) -> dict[str, str] | None:
    """The loading command's environment from a request, less the runtime's own variables."""
    try:
        return command_env(value)
    except ValueError as exc:
        raise ControlError(str(exc)) from None


# Why a stream ended, by the operation that ended it (the CLI words them "stopped by `tatolab stop`").
STOPPED = Reason("stopped by a stop request", code="ended_by", details={"ended": "stopped", "op": "stop"})
REMOVED = Reason("removed by an rm request", code="ended_by", details={"ended": "removed", "op": "rm"})
REPLACED_BY_KEEP = Reason("replaced by a new kept load", code="ended_by",
                          details={"ended": "replaced", "op": "load", "args": {"mode": "kept"}, "new": True})


def stopped_meanwhile(stream: LoadedStream) -> ControlError:
    why = stream.end_reason if stream.end_reason.text else Reason("unloaded")
    return ControlError(f"{stream.name} was stopped meanwhile ({why.text})", code="stopped_meanwhile",
                        details={"name": stream.name, "why": why.to_wire()})


class Superseded(Exception):
    """A start no longer wanted by the time it holds the lock (its record changed meanwhile);
    ``current`` is the stream running under that name instead, if any."""

    def __init__(self, current: LoadedStream | None = None) -> None:
        super().__init__("superseded")
        self.current = current


@dataclass
class StreamStart:
    """One start of a stream, as ``Runtime.start_stream`` does it; what differs between run,
    run -d, a dev reload and a kept stream's start is said here."""

    stream: LoadedStream
    python: Path
    replacing: LoadedStream | None = None  # stops completely before ``stream`` starts
    reason: Reason | str = "replaced by a new version"  # why ``replacing`` stops
    # `run -d` (and a kept stream's start) from this project: its own kept record and running
    # kept stream of that name yield to it (the running one is replaced)
    keeping_from: Path | None = None
    # Under the lock, before anything changes: raises ControlError (refused) or Superseded.
    check: Callable[[], None] | None = None
    # After the name check, before the old version stops: may still refuse (run -d: the copy of sources).
    prepare: Callable[[], Awaitable[None]] | None = None
    commit: Callable[[], None] | None = None  # the old version has stopped (run -d: the record is written)
    failed: Callable[[str], None] | None = None  # the start failed, with this reason
    started: Callable[[], None] | None = None  # the start worked
    # a kept stream loading as the runtime starts (at boot, say): a camera not there yet is waited
    # for by its node, not a reason to mark the stream failed
    devices_may_come: bool = False


class Runtime:
    """The streams this runtime runs, and the one way each starts and stops.

    Every start (`run`, `run -d`, a `dev` reload, a kept stream from its record) goes through
    ``start_stream``, and every stop through ``_unload``; both hold the load lock, which only
    this class takes, so a stream never starts between another's replacement and its start.
    How node processes start is the ``starter``'s (a fake one drives a Runtime in tests).
    """

    def __init__(self, kept: KeptStreams | None = None, starter: ProcessStarter | None = None) -> None:
        self.streams: dict[str, LoadedStream] = {}
        self.starter = starter or shared_starter()  # starts every node and compile process
        self.kept = kept if kept is not None else KeptStreams(paths.state_dir())
        self._load_lock = asyncio.Lock()
        self._unloading: set[asyncio.Task] = set()
        self.closing = False  # set by shutdown: no stream starts after it
        self.relay: Relay | None = None  # the MoQ relay serving exposed outputs (tatolabd sets it: use_relay)
        self.line = Line()  # loads compiled and started at once; the others wait in it (line.py)
        self.recordings: dict[str, Any] = {}  # id -> recordings.Recording (ops/record.py)
        self.foxglove: Any = None  # the Foxglove server's side here (foxglove/service.py; tatolabd sets it)
        self.recording_marks = RecordingMarks(self.kept.state)  # those in progress, for the next runtime

    def recall_cut_recordings(self) -> None:
        """List the recordings the previous runtime died with as cut, with their files, and say so."""
        from tatolab._runtime.lifecycle.recordings import skip_ids

        for mark in self.recording_marks.left_behind():
            cut = CutRecording(mark)
            self.recordings[cut.id] = cut
            skip_ids(cut.id)
            self.kept.say("warning", cut.line(), recording=cut.id, path=cut.path)

    # -- starting ------------------------------------------------------------------------------

    async def start_stream(self, start: StreamStart) -> LoadedStream | None:
        """Start ``start.stream`` under its name, replacing ``start.replacing``; None when superseded.

        The name is checked first, so a refused start leaves the old version running. The old
        version stops completely before the new one starts: two versions of a node never run
        at once (they would share files and devices). Cancelling the caller does not cut it short.
        """
        async def run() -> LoadedStream | None:
            async with self._load_lock:
                if self.closing:
                    raise ControlError("the runtime is stopping")
                try:
                    if start.check is not None:
                        start.check()
                except Superseded as superseded:
                    return superseded.current
                name, old = start.stream.name, start.replacing
                if old is not None and self.streams.get(old.name) is not old:
                    raise stopped_meanwhile(old)
                held = self.streams.get(name)
                if old is None and held is not None and held.mode == "kept" and held.project == start.keeping_from:
                    old = held
                self.check_name_free(name, replacing=old, keeping_from=start.keeping_from)
                self.check_node_caps(name, len(start.stream.graph["nodes"]), replacing=old)
                self.check_cameras(name, start.stream.graph, replacing=old, missing_ok=start.devices_may_come)
                if start.prepare is not None:
                    await start.prepare()
                if old is not None:
                    await self._unload(old, start.reason)
                if start.commit is not None:
                    start.commit()
                try:
                    self._start(start.stream, start.python)
                except ControlError as exc:
                    if start.failed is not None:
                        start.failed(str(exc))
                    raise
                if start.started is not None:
                    start.started()
                return start.stream

        return await asyncio.shield(asyncio.ensure_future(run()))

    def _start(self, stream: LoadedStream, python: Path) -> None:
        """Under the lock: make its rings, start its nodes; links between streams wire themselves at once."""
        self.streams[stream.name] = stream
        stream.starter = self.starter
        try:
            start_nodes(stream, python)
        # shared memory full, or a graph it cannot wire: raised before any node starts, nothing half-started stays
        except (OSError, ring.RingError, KeyError, TypeError, ValueError) as exc:
            self.streams.pop(stream.name, None)
            ring.reap(paths.loaded_stream_prefix(stream.instance))  # rings are made before any node starts
            if stream.log is not None:
                stream.log.close()
            raise ControlError(f"stream {stream.name} could not start: {exc}") from None
        self.rewire()

    async def load(self, source: StreamSource, *, mode: str = "attached",
                   env: dict[str, str] | None = None) -> LoadedStream:
        """Compile and start a stream; ``env`` is the loading command's environment (environment.py)."""
        project, python = open_project(source.project)
        source = replace(source, project=project)
        async with self.line.turn("load"):  # many at once wait their turn, each told its place
            graph = await compile_stream(source, env=env, starter=self.starter)  # or CompileError
            if mode == "kept":
                return await self._keep(source, python, graph, env)
            stream = LoadedStream(name=graph["stream"], project=project, graph=graph, mode=mode, env=env)
            started = await self.start_stream(StreamStart(stream, python))
        assert started is not None
        return started

    async def _keep(self, source: StreamSource, python: Path, graph: Graph,
                    env: dict[str, str] | None) -> LoadedStream:
        """`run -d`: snapshot the project's modules, record the stream, replacing this project's
        earlier version of it (record, snapshot and running stream), and start it."""
        name, project = graph["stream"], source.project
        stream = LoadedStream(name=name, project=project, graph=graph, mode="kept", env=env)
        record: list[KeptRecord] = []

        async def prepare() -> None:
            try:
                stream.sources = await asyncio.to_thread(self.kept.snapshot, name, project)
            except SnapshotError as exc:
                prefix = f"{name} cannot be kept: "
                why = exc.reason
                raise ControlError(prefix + why.text, code=why.code, fixes=why.fixes,
                                   details={**why.details, "prefix": prefix} if why.code else why.details) from None

        def commit() -> None:
            assert stream.sources is not None
            try:
                record.append(self.kept.keep(name, source, python, graph, env=env, sources=stream.sources))
            except OSError as exc:
                self.kept.not_loading(name)
                path = exc.filename or self.kept.store.path(name)
                raise ControlError(
                    f"stream {name} cannot be kept: its record could not be written to {path} "
                    f"({exc.strerror or exc}); free space on that disk", code="record_unwritten",
                    fixes=[Fix("load", {"mode": "kept"}, "load it kept again"),
                           Fix("load", {"mode": "attached"}, "run it attached")]) from None

        def failed(reason: str) -> None:
            self.kept.not_loading(name)
            self.kept.mark_failed(record[0], Reason(reason))  # recorded, but not running: say so

        started = await self.start_stream(StreamStart(
            stream, python, keeping_from=project, reason=REPLACED_BY_KEEP,
            prepare=prepare, commit=commit, failed=failed, started=lambda: self.kept.loaded(name)))
        assert started is not None
        return started

    async def replace(self, project: Path, graph: Graph, *, old: LoadedStream | None = None,
                      mode: str = "attached", reason: str = "replaced by a new version",
                      env: dict[str, str] | None = None) -> LoadedStream:
        """Start the compiled ``graph`` in place of ``old`` (which may have another name, or be None)."""
        project, python = open_project(project)
        stream = LoadedStream(name=graph["stream"], project=project, graph=graph, mode=mode, env=env)
        started = await self.start_stream(StreamStart(stream, python, replacing=old, reason=reason))
        assert started is not None
        return started

    async def restart_nodes(self, stream: LoadedStream, graph: Graph, names: list[str]) -> None:
        """A new version of ``stream`` in place (same shape), restarting only ``names`` (a dev reload
        that provably keeps the other nodes: rules/reload.py)."""
        async def swap() -> None:
            async with self._load_lock:
                if self.closing:
                    raise ControlError("the runtime is stopping")
                if self.streams.get(stream.name) is not stream:
                    raise stopped_meanwhile(stream)
                self.check_cameras(stream.name, graph, replacing=stream)
                await restart_nodes(stream, graph, names)

        await asyncio.shield(asyncio.ensure_future(swap()))

    def running(self, name: str) -> LoadedStream:
        """The running stream ``name``, or the refusal a change to it gets (stopped, or no such stream)."""
        stream = self.streams.get(name)
        if stream is not None:
            return stream
        record = self.kept.holder(name)
        if isinstance(record, KeptRecord):
            raise ControlError(f"stream {name} is not running ({record.state}); a live change applies to a running "
                               "stream", code="not_running", fixes=[Fix("start", {"name": name}, "start it first")],
                               details={"stream": name})
        raise self.unknown(name)

    async def change_live(self, name: str, change: Callable[[LoadedStream], Awaitable[T]]) -> T:
        """Apply ``change`` to running stream ``name`` under the load lock, so no start, stop or reload
        of it runs meanwhile; cancelling the caller does not cut it short."""
        async def run() -> T:
            async with self._load_lock:
                if self.closing:
                    raise ControlError("the runtime is stopping")
                return await change(self.running(name))

        return await asyncio.shield(asyncio.ensure_future(run()))

    async def start_kept(self, name: str, record: KeptRecord, *, at_runtime_start: bool = False) -> LoadedStream | None:
        """Load a kept stream from its record. On a load problem it is marked failed and
        ``KeptLoadFailed`` is raised; returns None if the record changed meanwhile. At the runtime's
        start a device the stream names may not be there yet (a USB camera at boot): its node waits."""
        kept = self.kept
        if name in self.streams:
            return self.streams[name]
        kept.loading(name)
        try:
            problem = await preflight(record, self.starter)
            current = record

            def check() -> None:
                nonlocal current
                now = kept.holder(name)
                if not isinstance(now, KeptRecord) or now.stopped or now.project != record.project:
                    raise Superseded()  # stopped, removed or replaced while it was being checked
                if name in self.streams:
                    raise Superseded(self.streams[name])
                current = now
                if problem:
                    kept.mark_failed(now, strip_reason(problem))
                    raise KeptLoadFailed(name, strip_reason(problem))

            def failed(reason: str) -> None:  # its rings could not be made
                kept.mark_failed(current, strip_reason(reason))
                raise KeptLoadFailed(name, strip_reason(reason))

            stream = LoadedStream(name=name, project=Path(record.project), graph=record.graph, mode="kept",
                                  env=record.env, sources=Path(record.sources) if record.sources else None)
            try:
                started = await self.start_stream(StreamStart(stream, Path(record.python), check=check,
                                                              keeping_from=Path(record.project), failed=failed,
                                                              devices_may_come=at_runtime_start))
            except ControlError:
                if self.closing:
                    return None
                raise
            if started is stream:
                kept.loaded(name)
            return started
        finally:
            kept.not_loading(name)

    async def load_kept_at_start(self) -> None:
        """Load every kept stream that is neither stopped nor failed, one at a time (so a crash
        while loading names the one stream being loaded); one that cannot load is marked failed
        and the others still start."""
        kept = self.kept
        for record in kept.store.read_all():
            if isinstance(record, DamagedRecord):
                # the runtime's terminal is read by a person: the fixes in the CLI's words, by the one renderer
                kept.say("error", f"kept stream {record.name} is skipped: {record.reason}. "
                         f"{fixes_in_turn(record.fixes)}", stream=record.name,
                         fixes=[{"op": f.op, "args": f.args, "does": f.does} for f in record.fixes])
                continue
            if record.stopped or record.failed:
                continue
            try:
                stream = await self.start_kept(record.name, record, at_runtime_start=True)
            except KeptLoadFailed:
                continue  # already reported by mark_failed
            except Exception as exc:  # a bug must not keep the other streams from starting
                current = kept.holder(record.name)
                if isinstance(current, KeptRecord):
                    kept.mark_failed(current, Reason(f"loading it failed: {exc!r}"))
                continue
            if stream is not None:
                kept.say("info", f"kept stream {record.name} loaded from its record "
                         f"({counted(len(record.graph['nodes']), 'node')}, project {record.project})",
                         stream=record.name)

    def check_name_free(self, stream_name: str, *, replacing: LoadedStream | None = None,
                        keeping_from: Path | None = None) -> None:
        """Refuse a name another stream holds (rules/names.py); every start goes through here."""
        record = self.kept.holder(stream_name)
        holder = self.streams.get(stream_name)
        refused = names.refusal(
            stream_name,
            record=None if record is None else names.Recorded(
                project=str(record.project), damaged=isinstance(record, DamagedRecord),
                state="failed" if isinstance(record, DamagedRecord) else record.state),
            loaded=None if holder is None or holder is replacing else names.Loaded(str(holder.project), holder.mode),
            keeping_from=str(keeping_from) if keeping_from is not None else None,
        )
        if refused is not None:
            raise refused

    def check_node_caps(self, stream_name: str, nodes: int, *, replacing: LoadedStream | None = None,
                        adding: str | None = None) -> None:
        """Refuse a stream (or a node added live) past the node caps (rules/caps.py)."""
        others = sum(len(s.graph["nodes"]) for s in self.streams.values()
                     if s is not replacing and s.name != stream_name)
        refused = caps.refusal(stream_name, nodes, others, adding=adding)
        if refused is not None:
            raise refused

    def use_relay(self, relay: Relay) -> None:
        self.relay = relay
        relay.on_pull_state = lambda pull, waiting: set_state(self.streams, pull, waiting)

    def check_cameras(self, stream_name: str, graph: Graph, *, replacing: LoadedStream | None = None,
                      missing_ok: bool = False) -> None:
        """Refuse a stream whose camera another stream holds, or (unless ``missing_ok``) that names no
        camera here (rules/cameras.py)."""
        loading, missing = cameras.cameras_of(stream_name, graph, resolve_camera)
        if missing_ok:
            missing = []
        if not loading and not missing:
            return
        running = [use for other in self.streams.values() if other is not replacing and other.name != stream_name
                   for use in cameras.cameras_of(other.name, other.graph, resolve_camera)[0]]
        refused = cameras.refusal(stream_name, loading, missing, running)
        if refused is not None:
            raise refused

    def rewire(self) -> None:
        rewire(self.streams, self.kept.rows(set(self.streams)), machine_name())
        if self.relay is not None:
            self.relay.sync(wanted(self.streams, machine_name()), wanted_pulls(self.streams))
        if self.foxglove is not None:
            self.foxglove.sync(wanted(self.streams, machine_name()))

    def list_streams(self) -> list[dict[str, Any]]:
        """Loaded streams, then kept ones not loaded now (stopped, failed with a reason, or about to load)."""
        loaded = [
            {"name": s.name, "state": s.mode, "nodes": len(s.graph["nodes"]), "project": str(s.project),
             **({"changes": len(s.changes)} if s.changes else {})}
            for s in self.streams.values()
        ]
        return loaded + self.kept.rows(set(self.streams))

    def unknown(self, name: str) -> ControlError:
        """The error for a name that is neither loaded nor kept, listing what exists."""
        known = ", ".join(f"{row['name']} ({row['state']})" for row in self.list_streams()) or "none"
        return ControlError(f"no stream named {name} on this machine; its streams: {known}")

    async def stop(self, name: str, reason: Reason = STOPPED) -> dict[str, Any]:
        """Unload a stream; a kept one is recorded as stopped first, so it stays stopped across restarts."""
        async with self._load_lock:  # never between a `run -d` replacing this stream and its start
            return await self._stop(name, reason)

    async def _stop(self, name: str, reason: Reason) -> dict[str, Any]:
        record = self.kept.holder(name)
        if isinstance(record, DamagedRecord):
            raise record.refusal("stopped")
        stream = self.streams.get(name)
        if record is None and stream is None:
            raise self.unknown(name)
        if record is not None:
            self.kept.set_stopped(record, True)
        if stream is not None:
            await self._unload(stream, reason)
            self.kept.unloaded(name)
        return {"name": name, "state": "stopped", "kept": record is not None}

    async def remove(self, name: str) -> dict[str, Any]:
        """Forget a stream: unload it, and remove its kept record and copy of sources."""
        async with self._load_lock:  # never between a `run -d` replacing this stream and its start
            record = self.kept.holder(name)
            stream = self.streams.get(name)
            if record is None and stream is None:
                raise self.unknown(name)
            if isinstance(record, KeptRecord):
                self.kept.set_stopped(record, True)  # a crash before the record is gone leaves it stopped, not back
            if stream is not None:
                await self.unload_if_current(stream, REMOVED)
            if record is not None:
                self.kept.forget(name)
            project = record.project if record is not None else str(stream.project) if stream is not None else None
            return {"name": name, "forgotten": record is not None, "project": project}

    async def _unload(self, stream: LoadedStream, reason: Reason | str, *, by_runtime: bool = False) -> None:
        """Unload ``stream``; shutdown waits for unloads in progress, so none is cut short."""
        try:
            if self.streams.get(stream.name) is stream:
                self.streams.pop(stream.name)
                release_remote(self.streams, stream)  # its reader records on other streams' rings
                self.rewire()  # readers of its outputs are cut before its rings go
        finally:
            task = asyncio.create_task(stop_nodes(stream, reason, by_runtime=by_runtime))
            self._unloading.add(task)
            task.add_done_callback(self._unloading.discard)
            await asyncio.shield(task)

    async def unload_if_current(self, stream: LoadedStream, reason: Reason | str) -> None:
        """Unload ``stream`` unless it was already replaced or stopped."""
        if self.streams.get(stream.name) is stream:
            await self._unload(stream, reason)

    async def shutdown(self) -> None:
        self.closing = True
        from tatolab._runtime.lifecycle.recordings import stop_all

        await stop_all(self.recordings)  # each file finished and indexed before its streams go
        if self.foxglove is not None:
            await self.foxglove.close()  # it gives its reader records back before the rings go
        async with self._load_lock:  # a load or replace in progress finishes first, then is unloaded
            streams = list(self.streams.values())
        await asyncio.gather(
            *(self._unload(s, "the runtime stopped", by_runtime=True) for s in streams),
            *self._unloading,
            return_exceptions=True,
        )
        await self.starter.close()  # the warm interpreters, once no node of theirs is left
