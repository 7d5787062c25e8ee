"""The runtime's operations: one set, called by the CLI over the socket (and by MCP later)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tatolab._runtime.compiler import CompileError, compile_stream, project_python
from tatolab._runtime.streams import LoadedStream


class ControlError(Exception):
    """A request that cannot be done; the message is for the person who asked."""


class Runtime:
    def __init__(self) -> None:
        self.streams: dict[str, LoadedStream] = {}
        self._load_lock = asyncio.Lock()
        self._unloading: set[asyncio.Task] = set()

    async def load(
        self,
        project: str,
        *,
        target: str | None = None,
        file: str | None = None,
        name: str | None = None,
        mode: str = "attached",
    ) -> LoadedStream:
        project_dir = Path(project).resolve()
        if not project_dir.is_dir():
            raise ControlError(f"{project_dir} is not a folder; pass a project folder with --dir")
        try:
            python = project_python(project_dir)
            graph = await compile_stream(project_dir, target=target, file=file, name=name)
        except CompileError as exc:
            raise ControlError(str(exc)) from None
        async with self._load_lock:
            stream_name = graph["stream"]
            holder = self.streams.get(stream_name)
            if holder is not None:
                raise ControlError(
                    f"a stream named {stream_name} is already loaded from {holder.project} ({holder.mode}); "
                    f"stop it with `tatolab stop {stream_name}`, or load this one under another name with --name"
                )
            stream = LoadedStream(name=stream_name, project=project_dir, graph=graph, mode=mode)
            self.streams[stream_name] = stream
            stream.start(python)
        return stream

    def list_streams(self) -> list[dict[str, Any]]:
        return [
            {"name": s.name, "state": s.mode, "nodes": len(s.graph["nodes"]), "project": str(s.project)}
            for s in self.streams.values()
        ]

    def _find(self, name: str) -> LoadedStream:
        stream = self.streams.get(name)
        if stream is None:
            known = ", ".join(sorted(self.streams)) or "none"
            raise ControlError(f"no stream named {name} is loaded; loaded streams: {known}")
        return stream

    async def stop(self, name: str, reason: str = "stopped by `tatolab stop`") -> dict[str, Any]:
        stream = self._find(name)
        await self._unload(stream, reason)
        return {"name": name, "state": "stopped"}

    async def _unload(self, stream: LoadedStream, reason: str, *, by_runtime: bool = False) -> None:
        """Unload ``stream``; shutdown waits for unloads in progress, so none is cut short."""
        if self.streams.get(stream.name) is stream:
            self.streams.pop(stream.name)
        task = asyncio.create_task(stream.stop(reason, by_runtime=by_runtime))
        self._unloading.add(task)
        task.add_done_callback(self._unloading.discard)
        await asyncio.shield(task)

    async def unload_if_current(self, stream: LoadedStream, reason: str) -> None:
        """Unload ``stream`` unless it was already replaced or stopped."""
        if self.streams.get(stream.name) is stream:
            await self._unload(stream, reason)

    async def shutdown(self) -> None:
        streams = list(self.streams.values())
        await asyncio.gather(
            *(self._unload(s, "the runtime stopped", by_runtime=True) for s in streams),
            *self._unloading,
            return_exceptions=True,
        )
