"""The runtime's operations: one set, called by the CLI over the socket (and by MCP later)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tatolab._links import ring
from tatolab._runtime import paths
from tatolab._runtime.compiler import CompileError, compile_stream, project_python
from tatolab._runtime.environment import command_env
from tatolab._runtime.kept import KeptStreams
from tatolab._runtime.machine import machine_name
from tatolab._runtime.records import DamagedRecord
from tatolab._runtime.snapshots import SnapshotError
from tatolab._runtime.starter import ProcessStarter
from tatolab._runtime.starter import shared as shared_starter
from tatolab._runtime.streams import LoadedStream
from tatolab._runtime.wiring import release_remote, rewire


class ControlError(Exception):
    """A request that cannot be done; the message is for the person who asked."""


def open_project(project: str | Path) -> tuple[Path, Path]:
    """The project folder and its interpreter, or the error that says what to fix."""
    folder = Path(project).resolve()
    if not folder.is_dir():
        raise ControlError(f"{folder} is not a folder; pass a project folder with --dir")
    try:
        return folder, project_python(folder)
    except CompileError as exc:
        raise ControlError(str(exc)) from None


def request_env(value: Any) -> dict[str, str] | None:
    """The loading command's environment from a request, less the runtime's own variables."""
    try:
        return command_env(value)
    except ValueError as exc:
        raise ControlError(str(exc)) from None


class Runtime:
    def __init__(self, kept: KeptStreams | None = None, starter: ProcessStarter | None = None) -> None:
        self.streams: dict[str, LoadedStream] = {}
        self.starter = starter or shared_starter()  # starts every node and compile process
        self.kept = kept if kept is not None else KeptStreams(paths.state_dir())
        self._load_lock = asyncio.Lock()
        self._unloading: set[asyncio.Task] = set()
        self.closing = False  # set by shutdown: no stream starts after it

    async def load(
        self,
        project: str,
        *,
        target: str | None = None,
        file: str | None = None,
        name: str | None = None,
        mode: str = "attached",
        env: dict[str, str] | None = None,
    ) -> LoadedStream:
        """Compile and start a stream; ``env`` is the loading command's environment (environment.py)."""
        project_dir, python = open_project(project)
        try:
            graph = await compile_stream(project_dir, target=target, file=file, name=name, env=env,
                                         starter=self.starter)
        except CompileError as exc:
            raise ControlError(str(exc)) from None
        async with self._load_lock:
            if self.closing:
                raise ControlError("the runtime is stopping")
            stream_name = graph["stream"]
            if mode == "kept":
                return await self._keep(stream_name, project_dir, python, graph, target=target, file=file, env=env)
            self.check_name_free(stream_name)
            stream = LoadedStream(name=stream_name, project=project_dir, graph=graph, mode=mode, env=env)
            self.start_stream(stream, python)
        return stream

    async def _keep(self, name: str, project: Path, python: Path, graph: dict[str, Any], *,
                    target: str | None, file: str | None, env: dict[str, str] | None) -> LoadedStream:
        """`run -d`, under the load lock: snapshot the project's modules, record the stream,
        replacing this project's earlier version of it (record, snapshot and running stream), and start it."""
        old = self.streams.get(name)
        if old is not None and not (old.mode == "kept" and old.project == project):
            old = None
        self.check_name_free(name, replacing=old, keeping_from=project)
        try:
            sources = await asyncio.to_thread(self.kept.snapshot, name, project)
        except SnapshotError as exc:
            raise ControlError(f"{name} cannot be kept: {exc}") from None
        if old is not None:
            await self._unload(old, "replaced by a new `tatolab run -d`")
        try:
            record = self.kept.keep(name, project, python, graph, target=target, file=file, env=env,
                                   sources=sources)
        except OSError as exc:
            self.kept.not_loading(name)
            path = exc.filename or self.kept.store.path(name)
            raise ControlError(
                f"stream {name} cannot be kept: its record could not be written to {path} ({exc.strerror or exc}); "
                "free space on that disk and run `tatolab run -d` again, or run it attached"
            ) from None
        stream = LoadedStream(name=name, project=project, graph=graph, mode="kept", env=env, sources=sources)
        try:
            self.start_stream(stream, python)
        except ControlError as exc:
            self.kept.not_loading(name)
            self.kept.mark_failed(record, str(exc))  # recorded, but not running: say so
            raise
        self.kept.loaded(name)
        return stream

    def check_name_free(self, stream_name: str, *, replacing: LoadedStream | None = None,
                        keeping_from: Path | None = None) -> None:
        """Refuse a name another stream holds; every load (run, run -d, dev) goes through here.

        A kept stream's record holds its name even while it is stopped or failed; only
        `run -d` from the record's own project (``keeping_from``) may replace it.
        """
        record = self.kept.holder(stream_name)
        if record is not None and not (
            keeping_from is not None and (isinstance(record, DamagedRecord) or Path(record.project) == keeping_from)
        ):
            state = "failed" if isinstance(record, DamagedRecord) else record.state
            raise ControlError(
                f"a stream named {stream_name} is kept from {record.project} ({state}); a kept stream holds its "
                f"name even while stopped: remove it first with `tatolab rm {stream_name}`, or load this one under "
                f"another name with --name"
            )
        holder = self.streams.get(stream_name)
        if holder is None or holder is replacing:
            return
        if holder.mode == "kept":
            raise ControlError(
                f"a stream named {stream_name} is kept from {holder.project}; a kept stream holds its name: "
                f"remove it first with `tatolab rm {stream_name}`, or load this one under another name with --name"
            )
        raise ControlError(
            f"a stream named {stream_name} is already loaded from {holder.project} ({holder.mode}); "
            f"stop it with `tatolab stop {stream_name}`, or load this one under another name with --name"
        )

    async def replace(
        self,
        project: Path,
        graph: dict[str, Any],
        *,
        old: LoadedStream | None = None,
        mode: str = "attached",
        reason: str = "replaced by a new version",
        env: dict[str, str] | None = None,
    ) -> LoadedStream:
        """Start the compiled ``graph`` in place of ``old`` (which may have another name, or be None).

        The name is checked first, so a refused replacement leaves ``old`` running. ``old``
        stops completely before the new version starts: two versions of a node never run at
        once (they would share files and devices). Cancelling the caller does not cut this short.
        """
        project, python = open_project(project)

        async def swap() -> LoadedStream:
            async with self._load_lock:
                if self.closing:
                    raise ControlError("the runtime is stopping")
                if old is not None and self.streams.get(old.name) is not old:
                    raise ControlError(f"{old.name} was stopped meanwhile ({old.end_reason or 'unloaded'})")
                self.check_name_free(graph["stream"], replacing=old)
                if old is not None:
                    await self._unload(old, reason)
                stream = LoadedStream(name=graph["stream"], project=project, graph=graph, mode=mode, env=env)
                self.start_stream(stream, python)
                return stream

        return await asyncio.shield(asyncio.ensure_future(swap()))

    async def restart_nodes(self, stream: LoadedStream, graph: dict[str, Any], names: list[str]) -> None:
        """A new version of ``stream`` in place (same shape), restarting only ``names``."""
        async def swap() -> None:
            async with self._load_lock:
                if self.closing:
                    raise ControlError("the runtime is stopping")
                if self.streams.get(stream.name) is not stream:
                    raise ControlError(f"{stream.name} was stopped meanwhile ({stream.end_reason or 'unloaded'})")
                await stream.restart_nodes(graph, names)

        await asyncio.shield(asyncio.ensure_future(swap()))

    def start_stream(self, stream: LoadedStream, python: Path) -> None:
        """Start ``stream`` under its name; links between streams wire themselves at once."""
        self.streams[stream.name] = stream
        stream.starter = self.starter
        try:
            stream.start(python)
        # shared memory full, or a graph it cannot wire: raised before any node starts, nothing half-started stays
        except (OSError, ring.RingError, KeyError, TypeError, ValueError) as exc:
            self.streams.pop(stream.name, None)
            ring.reap(stream.shm_prefix)  # rings are made before any node starts
            if stream.log is not None:
                stream.log.close()
            raise ControlError(f"stream {stream.name} could not start: {exc}") from None
        self.rewire()

    def rewire(self) -> None:
        rewire(self.streams, self.kept.rows(set(self.streams)), machine_name())

    def list_streams(self) -> list[dict[str, Any]]:
        """Loaded streams, then kept ones not loaded now (stopped, failed with a reason, or about to load)."""
        loaded = [
            {"name": s.name, "state": s.mode, "nodes": len(s.graph["nodes"]), "project": str(s.project)}
            for s in self.streams.values()
        ]
        return loaded + self.kept.rows(set(self.streams))

    def unknown(self, name: str) -> ControlError:
        """The error for a name that is neither loaded nor kept, listing what exists."""
        known = ", ".join(f"{row['name']} ({row['state']})" for row in self.list_streams()) or "none"
        return ControlError(f"no stream named {name} on this machine; its streams: {known}")

    async def stop(self, name: str, reason: str = "stopped by `tatolab stop`") -> dict[str, Any]:
        """Unload a stream; a kept one is recorded as stopped first, so it stays stopped across restarts."""
        async with self._load_lock:  # never between a `run -d` replacing this stream and its start
            return await self._stop(name, reason)

    async def _stop(self, name: str, reason: str) -> dict[str, Any]:
        record = self.kept.holder(name)
        if isinstance(record, DamagedRecord):
            raise ControlError(f"{name} cannot be stopped: {record.reason}. {record.fix}")
        stream = self.streams.get(name)
        if record is None and stream is None:
            raise self.unknown(name)
        if record is not None:
            self.kept.set_stopped(record, True)
        if stream is not None:
            await self._unload(stream, reason)
            self.kept.unloaded(name)
        return {"name": name, "state": "stopped", "kept": record is not None}

    async def _unload(self, stream: LoadedStream, reason: str, *, by_runtime: bool = False) -> None:
        """Unload ``stream``; shutdown waits for unloads in progress, so none is cut short."""
        try:
            if self.streams.get(stream.name) is stream:
                self.streams.pop(stream.name)
                release_remote(self.streams, stream)  # its reader records on other streams' rings
                self.rewire()  # readers of its outputs are cut before its rings go
        finally:
            task = asyncio.create_task(stream.stop(reason, by_runtime=by_runtime))
            self._unloading.add(task)
            task.add_done_callback(self._unloading.discard)
            await asyncio.shield(task)

    async def unload_if_current(self, stream: LoadedStream, reason: str) -> None:
        """Unload ``stream`` unless it was already replaced or stopped."""
        if self.streams.get(stream.name) is stream:
            await self._unload(stream, reason)

    async def shutdown(self) -> None:
        self.closing = True
        async with self._load_lock:  # a load or replace in progress finishes first, then is unloaded
            streams = list(self.streams.values())
        await asyncio.gather(
            *(self._unload(s, "the runtime stopped", by_runtime=True) for s in streams),
            *self._unloading,
            return_exceptions=True,
        )
        await self.starter.close()  # the warm interpreters, once no node of theirs is left
