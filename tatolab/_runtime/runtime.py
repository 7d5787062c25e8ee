"""The Runtime: the streams it runs, and the one way each starts and stops."""

from __future__ import annotations

import asyncio
import time
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
from tatolab._runtime.core.effects import (Effect, LoadFailed, MarkFailed, Refuse, RefuseDamaged, Reply, RestartNodes,
                                           Snapshot, StartNodes, Superseded, Unknown, Unload, WriteRecord)
from tatolab._runtime.core.streams import (ATTACHED, KEEP, RECORD, REMOVED, REPLACED, REPLACED_BY_KEEP, STOPPED,
                                           Held, Load, Ref, Streams, Version)
from tatolab._runtime.processes.compiler import compile_stream, project_python
from tatolab._runtime.processes.environment import command_env
from tatolab._runtime.lifecycle.line import Line
from tatolab._runtime.stored.recording_marks import CutRecording, RecordingMarks
from tatolab._runtime.lifecycle.kept import KeptLoadFailed, KeptStreams, preflight, strip_reason
from tatolab._runtime.machine import machine_name
from tatolab._runtime.lifecycle.nodes import restart_nodes, start_nodes, stop_nodes
from tatolab._runtime.stored.records import DamagedRecord, KeptRecord
from tatolab._runtime.rules import cameras
from tatolab._runtime.rules.reload import Imported, Saved
from tatolab._runtime.stored.snapshots import SnapshotError
from tatolab._runtime.processes.starter import ProcessStarter
from tatolab._runtime.processes.starter import shared as shared_starter
from tatolab._runtime.lifecycle.streams import LoadedStream
from tatolab._runtime.lifecycle.wiring import release_remote, rewire
from tatolab._runtime.relay.relay import Relay
from tatolab._runtime.relay.pulls import set_state, wanted_pulls
from tatolab._runtime.relay.wanted import wanted

__all__ = ["REMOVED", "REPLACED_BY_KEEP", "STOPPED", "Runtime", "open_project", "request_env"]

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


class Runtime:
    """The streams this runtime runs, and the one way each starts and stops: the driver of the
    lifecycle's core (core/streams.py), which decides; this class carries out its effects.

    Every start (`run`, `run -d`, a `dev` reload, a kept stream from its record) goes through
    ``start_stream``, and every stop through the core's ``Unload``; both hold the load lock, which
    only this class takes, so a stream never starts between another's replacement and its start.
    How node processes start is the ``starter``'s (a fake one drives a Runtime in tests).
    """

    def __init__(self, kept: KeptStreams | None = None, starter: ProcessStarter | None = None) -> None:
        self.streams: dict[str, LoadedStream] = {}
        self.starter = starter or shared_starter()  # starts every node and compile process
        self.kept = kept if kept is not None else KeptStreams(paths.state_dir())
        self._load_lock = asyncio.Lock()
        self._unloading: set[asyncio.Task] = set()
        self.core = Streams()  # what runs under each name, and what each command does to it
        self._pending: dict[int, Start] = {}  # starts under way, by version
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

    # -- the runtime's start and clean stop ----------------------------------------------------

    def begin(self) -> None:
        """Apply the two-crash rule to the previous run's marker (kept.py), and mark this run running."""
        self.core.began(self.kept.begin())

    def stopped_cleanly(self) -> None:
        self._carry_now(self.core.stopped_cleanly())

    # -- starting ------------------------------------------------------------------------------

    async def start_stream(self, start: Start) -> LoadedStream | None:
        """Start ``start.stream`` under its name, replacing ``start.asked.replacing``; None when superseded.

        The core checks the name first, so a refused start leaves the old version running. The old
        version stops completely before the new one starts: two versions of a node never run
        at once (they would share files and devices). Cancelling the caller does not cut it short.
        """
        async def run() -> LoadedStream | None:
            async with self._load_lock:
                held = self.kept.holder(start.stream.name)  # under the lock: stopped, removed or replaced meanwhile?
                if start.asked.how == RECORD:
                    start.record = held
                asked = replace(start.asked, record=_held(held))
                version = start.stream.instance
                self._pending[version] = start
                try:
                    done, value = await self._carry(self.core.check(asked))
                    if done:  # superseded: the version running instead, if any
                        return self._by_id(value)
                    await self._carry(self.core.go(version, time.monotonic_ns()))
                    self._carry_now(self.core.started(version, time.monotonic_ns(),
                                                      at_runtime_start=asked.devices_may_come))
                    return start.stream
                finally:
                    self._pending.pop(version, None)
                    self.core.abandon(version)  # refused or cut short: nothing of it stays in the core

        return await asyncio.shield(asyncio.ensure_future(run()))

    def _by_id(self, version: int | None) -> LoadedStream | None:
        """The driver's stream for one of the core's versions (running, or starting)."""
        found = [s for s in self.streams.values() if s.instance == version]
        found += [s.stream for s in self._pending.values() if s.stream.instance == version]
        return found[0] if found else None

    async def _carry(self, effects: list[Effect]) -> tuple[bool, Any]:
        """Carry out the core's effects in order: (True, its answer) on a Reply or Superseded, else
        (False, None); a refusal is raised."""
        for effect in effects:
            if isinstance(effect, Reply):
                return True, effect.value
            if isinstance(effect, Superseded):
                return True, effect.current
            if isinstance(effect, Unload):
                stream = self._by_id(effect.version)
                if stream is not None:
                    await self._unload(stream, effect.reason, by_runtime=effect.by_runtime)
            elif isinstance(effect, Snapshot):
                await self._snapshot(self._pending[effect.version])
            elif isinstance(effect, WriteRecord):
                self._write_record(self._pending[effect.version])
            elif isinstance(effect, StartNodes):
                self._start(self._pending[effect.version])
            else:
                self._carry_now([effect])
        return False, None

    def _carry_now(self, effects: list[Effect]) -> Any:
        """The effects that need no waiting: refusals, and storage's (the marker, records, the log: kept.py);
        returns a Reply's value."""
        for effect in effects:
            if isinstance(effect, Refuse):
                raise effect.error
            if isinstance(effect, RefuseDamaged):
                record = self.kept.holder(effect.name)
                assert isinstance(record, DamagedRecord)
                raise record.refusal(effect.what)
            if isinstance(effect, Unknown):
                raise self.unknown(effect.name)
            if isinstance(effect, LoadFailed):
                raise KeptLoadFailed(effect.name, effect.reason)
            if isinstance(effect, Reply):
                return effect.value
            starting = [s.record for s in self._pending.values() if isinstance(effect, MarkFailed)
                        and s.stream.name == effect.name and s.record is not None]
            self.kept.carry(effect, starting[0] if starting else None)  # the marker, records, the log
        return None

    async def _snapshot(self, start: Start) -> None:
        """`run -d`: copy the project's modules (a refusal here leaves the old version running)."""
        name = start.stream.name
        try:
            start.stream.sources = await asyncio.to_thread(self.kept.snapshot, name, start.stream.project)
        except SnapshotError as exc:
            prefix = f"{name} cannot be kept: "
            why = exc.reason
            raise ControlError(prefix + why.text, code=why.code, fixes=why.fixes,
                               details={**why.details, "prefix": prefix} if why.code else why.details) from None

    def _write_record(self, start: Start) -> None:
        """`run -d`: the old version has stopped; record the new one before it starts."""
        stream = start.stream
        assert start.source is not None and stream.sources is not None
        try:
            start.record = self.kept.keep(stream.name, start.source, start.python, stream.graph, env=stream.env,
                                          sources=stream.sources)
        except OSError as exc:
            self._carry_now(self.core.record_unwritten(stream.instance))
            path = exc.filename or self.kept.store.path(stream.name)
            raise ControlError(
                f"stream {stream.name} cannot be kept: its record could not be written to {path} "
                f"({exc.strerror or exc}); free space on that disk", code="record_unwritten",
                fixes=[Fix("load", {"mode": "kept"}, "load it kept again"),
                       Fix("load", {"mode": "attached"}, "run it attached")]) from None

    def _start(self, start: Start) -> None:
        """Under the lock: make its rings, start its nodes; links between streams wire themselves at once."""
        stream = start.stream
        self.streams[stream.name] = stream
        stream.starter = self.starter
        try:
            start_nodes(stream, start.python)
        # shared memory full, or a graph it cannot wire: raised before any node starts, nothing half-started stays
        except (OSError, ring.RingError, KeyError, TypeError, ValueError) as exc:
            self.streams.pop(stream.name, None)
            ring.reap(paths.loaded_stream_prefix(stream.instance))  # rings are made before any node starts
            if stream.log is not None:
                stream.log.close()
            error = ControlError(f"stream {stream.name} could not start: {exc}")
            reason = strip_reason(str(error)) if start.asked.how == RECORD else Reason(str(error))
            self._carry_now(self.core.start_failed(stream.instance, reason))
            raise error from None
        self.rewire()

    def _asking(self, stream: LoadedStream, how: str, **fields: Any) -> Load:
        """The core's view of a stream about to start: its name, project, mode, node count, the cameras
        it opens (resolved once) and those it names that are not here."""
        uses, missing = cameras.cameras_of(stream.name, stream.graph, resolve_camera)
        version = Version(stream.instance, stream.name, str(stream.project), stream.mode, len(stream.graph["nodes"]),
                          tuple(uses), graph=stream.graph)
        return Load(version, how, missing=tuple(missing), **fields)

    async def load(self, source: StreamSource, *, mode: str = "attached",
                   env: dict[str, str] | None = None) -> LoadedStream:
        """Compile and start a stream; ``env`` is the loading command's environment (environment.py).
        Kept (`run -d`): snapshot the project's modules, record the stream, replacing this project's
        earlier version of it (record, snapshot and running stream), and start it."""
        project, python = open_project(source.project)
        source = replace(source, project=project)
        async with self.line.turn("load"):  # many at once wait their turn, each told its place
            graph = await compile_stream(source, env=env, starter=self.starter)  # or CompileError
            stream = LoadedStream(name=graph["stream"], project=project, graph=graph, mode=mode, env=env)
            how = KEEP if mode == "kept" else ATTACHED
            asked = self._asking(stream, how, reason=REPLACED_BY_KEEP if how == KEEP else REPLACED)
            started = await self.start_stream(Start(stream, python, asked, source=source))
        assert started is not None
        return started

    async def replace(self, project: Path, graph: Graph, *, old: LoadedStream | None = None,
                      mode: str = "attached", reason: str = "replaced by a new version",
                      env: dict[str, str] | None = None) -> LoadedStream:
        """Start the compiled ``graph`` in place of ``old`` (which may have another name, or be None)."""
        project, python = open_project(project)
        stream = LoadedStream(name=graph["stream"], project=project, graph=graph, mode=mode, env=env)
        asked = self._asking(stream, ATTACHED, reason=Reason(reason),
                          replacing=None if old is None else Ref(old.name, old.instance))
        started = await self.start_stream(Start(stream, python, asked))
        assert started is not None
        return started

    def in_place(self, old: LoadedStream | None, graph: Graph) -> bool:
        """A dev reload: whether ``graph`` replaces ``old`` node by node (restart_nodes), else whole (replace)."""
        return self.core.in_place(None if old is None else Ref(old.name, old.instance), graph)

    async def restart_nodes(self, stream: LoadedStream, graph: Graph, saved: list[Saved]) -> RestartNodes:
        """A new version of ``stream`` in place (same shape), restarting only the nodes that may run changed
        code or config, given the files saved since it loaded (rules/reload.py); which restarted and why,
        and which were kept."""
        async def swap() -> RestartNodes:
            async with self._load_lock:
                uses, missing = cameras.cameras_of(stream.name, graph, resolve_camera)
                imports = {name: None if node.imports is None else Imported(frozenset(node.imports),
                                                                            frozenset(node.imported_files))
                           for name, node in stream.nodes.items()}
                effects = self.core.reload(Ref(stream.name, stream.instance), graph, saved, imports, uses, missing)
                self._carry_now([effect for effect in effects if not isinstance(effect, RestartNodes)])
                [restart] = [effect for effect in effects if isinstance(effect, RestartNodes)]
                await restart_nodes(stream, graph, list(restart.why))
                return restart

        return await asyncio.shield(asyncio.ensure_future(swap()))

    def running(self, name: str) -> LoadedStream:
        """The running stream ``name``, or the refusal a change to it gets (stopped, or no such stream)."""
        found = self._by_id(self._carry_now(self.core.live(name, _held(self.kept.holder(name)))))
        assert found is not None
        return found

    async def change_live(self, name: str, change: Callable[[LoadedStream], Awaitable[T]]) -> T:
        """Apply ``change`` to running stream ``name`` under the load lock, so no start, stop or reload
        of it runs meanwhile; cancelling the caller does not cut it short."""
        async def run() -> T:
            async with self._load_lock:
                if self.core.closing:
                    raise ControlError("the runtime is stopping")
                stream = self.running(name)
                try:
                    return await change(stream)
                finally:  # its graph may have grown or shrunk: the caps and cameras count it as it is
                    uses, _ = cameras.cameras_of(name, stream.graph, resolve_camera)
                    self.core.reshaped(name, stream.graph, uses)

        return await asyncio.shield(asyncio.ensure_future(run()))

    async def start(self, name: str) -> dict[str, Any]:
        """`tatolab start`: load a stopped kept stream (or retry a failed one) from its record."""
        record = self.kept.holder(name)
        already = self._carry_now(self.core.start(name, _held(record)))
        assert isinstance(record, KeptRecord)
        if already is not None:
            return {"name": name, "state": "kept", "project": record.project, "already": True}
        retried = record.failed is not None
        try:
            loaded = await self.start_kept(name, record)
        except KeptLoadFailed as exc:
            raise ControlError(f"{name} failed again: {exc.reason}", code="failed_again", fixes=[
                Fix("start", {"name": name}, "retries it"), Fix("rm", {"name": name}, "forgets it")],
                details={"name": name, "why": exc.reason.to_wire()}) from None
        if loaded is None:
            raise ControlError(f"{name} changed while it was starting (stopped, removed or replaced)",
                               code="changed_meanwhile", fixes=[Fix("streams", {}, "see")])
        return {"name": name, "state": "kept", "project": record.project, "retried": retried,
                "nodes": len(loaded.graph["nodes"])}

    async def start_kept(self, name: str, record: KeptRecord, *, at_runtime_start: bool = False) -> LoadedStream | None:
        """Load a kept stream from its record. On a load problem it is marked failed and
        ``KeptLoadFailed`` is raised; returns None if the record changed meanwhile. At the runtime's
        start a device the stream names may not be there yet (a USB camera at boot): its node waits."""
        running = self._carry_now(self.core.loading(name))
        if running is not None:
            return self._by_id(running)
        try:
            problem = await preflight(record, self.starter)
            stream = LoadedStream(name=name, project=Path(record.project), graph=record.graph, mode="kept",
                                  env=record.env, sources=Path(record.sources) if record.sources else None)
            asked = self._asking(stream, RECORD, kept_project=record.project, devices_may_come=at_runtime_start,
                              problem=None if problem is None else strip_reason(problem))
            try:
                return await self.start_stream(Start(stream, Path(record.python), asked))
            except ControlError:
                if self.core.closing:
                    return None
                raise
        finally:
            self._carry_now(self.core.loading_done(name))

    async def load_kept_at_start(self) -> None:
        """Load every kept stream that is neither stopped nor failed, one at a time (so a crash
        while loading names the one stream being loaded); one that cannot load is marked failed
        and the others still start."""
        kept = self.kept
        records = kept.store.read_all()
        for record in records:
            if isinstance(record, DamagedRecord):
                # the runtime's terminal is read by a person: the fixes in the CLI's words, by the one renderer
                kept.say("error", f"kept stream {record.name} is skipped: {record.reason}. "
                         f"{fixes_in_turn(record.fixes)}", stream=record.name,
                         fixes=[{"op": f.op, "args": f.args, "does": f.does} for f in record.fixes])
        by_name = {r.name: r for r in records if isinstance(r, KeptRecord)}
        for name in self.core.at_start({n: held for n, r in by_name.items() if (held := _held(r)) is not None}):
            try:
                await self.start_kept(name, by_name[name], at_runtime_start=True)
            except KeptLoadFailed:
                continue  # already reported by mark_failed
            except Exception as exc:  # a bug must not keep the other streams from starting
                current = kept.holder(name)
                if isinstance(current, KeptRecord):
                    kept.mark_failed(current, Reason(f"loading it failed: {exc!r}"))

    def check_node_caps(self, stream_name: str, nodes: int, *, adding: str | None = None) -> None:
        """Refuse a node added live past the node caps (rules/caps.py)."""
        refused = self.core.caps_refusal(stream_name, nodes, adding=adding)
        if refused is not None:
            raise refused

    def check_cameras(self, stream_name: str, graph: Graph, *, replacing: LoadedStream | None = None) -> None:
        """Refuse a live change whose camera another stream holds, or that names no camera here."""
        uses, missing = cameras.cameras_of(stream_name, graph, resolve_camera)
        refused = self.core.cameras_refusal(stream_name, tuple(uses), tuple(missing),
                                            replacing=self.core.running.get(stream_name) if replacing else None)
        if refused is not None:
            raise refused

    def use_relay(self, relay: Relay) -> None:
        self.relay = relay
        relay.on_pull_state = lambda pull, waiting: set_state(self.streams, pull, waiting)

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

    # -- stopping ------------------------------------------------------------------------------

    async def stop(self, name: str, reason: Reason = STOPPED) -> dict[str, Any]:
        """Unload a stream; a kept one is recorded as stopped first, so it stays stopped across restarts."""
        async with self._load_lock:  # never between a `run -d` replacing this stream and its start
            return (await self._carry(self.core.stop(name, _held(self.kept.holder(name)), reason)))[1]

    async def remove(self, name: str) -> dict[str, Any]:
        """Forget a stream: unload it, and remove its kept record and copy of sources."""
        async with self._load_lock:  # never between a `run -d` replacing this stream and its start
            return (await self._carry(self.core.remove(name, _held(self.kept.holder(name)))))[1]

    async def _unload(self, stream: LoadedStream, reason: Reason | str, *, by_runtime: bool = False) -> None:
        """Unload ``stream`` (the core has let it go); shutdown waits for unloads in progress, so none is cut short."""
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
        """Unload ``stream`` unless it was already replaced or stopped (its terminal hung up)."""
        why = reason if isinstance(reason, Reason) else Reason(reason)
        await self._carry(self.core.detach(Ref(stream.name, stream.instance), why))

    async def shutdown(self) -> None:
        self.core.closing = True  # no stream starts after this
        from tatolab._runtime.lifecycle.recordings import stop_all

        await stop_all(self.recordings)  # each file finished and indexed before its streams go
        if self.foxglove is not None:
            await self.foxglove.close()  # it gives its reader records back before the rings go
        async with self._load_lock:  # a load or replace in progress finishes first, then is unloaded
            stopping = self.core.shutdown()
            streams = [(s, e) for e in stopping if isinstance(e, Unload) and (s := self._by_id(e.version)) is not None]
        await asyncio.gather(
            *(self._unload(s, e.reason, by_runtime=True) for s, e in streams),
            *self._unloading,
            return_exceptions=True,
        )
        await self.starter.close()  # the warm interpreters, once no node of theirs is left


@dataclass
class Start:
    """One start as the driver carries it out: the stream, its interpreter, what the core decides
    from (``asked``), and what `run -d` records (``source``)."""

    stream: LoadedStream
    python: Path
    asked: Load
    source: StreamSource | None = None
    record: KeptRecord | DamagedRecord | None = None  # the record written, or read under the lock


def _held(record: KeptRecord | DamagedRecord | None) -> Held | None:
    """The core's view of a kept record."""
    if record is None:
        return None
    if isinstance(record, DamagedRecord):
        return Held(record.project, "failed", damaged=True)
    return Held(record.project, record.state)
