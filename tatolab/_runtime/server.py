"""The control socket: JSON lines in, JSON lines out (see protocol.py)."""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

from tatolab._runtime import protocol
from tatolab._runtime.control import ControlError, Runtime
from tatolab._runtime.streams import LoadedStream


class ControlServer:
    def __init__(self, runtime: Runtime, say: Any) -> None:
        self.runtime = runtime
        self.say = say  # the runtime's own log

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, ConnectionError):
                    break
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    request = protocol.decode(line)
                    stream = await self._dispatch(request, writer)
                except (ControlError, protocol.ProtocolError) as exc:
                    await self._send(writer, {"ok": False, "error": str(exc)})
                    continue
                except Exception as exc:  # a bug must not take the runtime down
                    self.say("error", f"request failed: {exc}", traceback=traceback.format_exc())
                    await self._send(writer, {"ok": False, "error": f"internal error: {exc}"})
                    continue
                if stream is not None:
                    await self._attached(stream, reader, writer)
                    break
        finally:
            writer.close()

    async def _dispatch(self, request: dict[str, Any], writer: asyncio.StreamWriter) -> LoadedStream | None:
        op = request.get("op")
        args = request.get("args") or {}
        if not isinstance(args, dict):
            raise protocol.ProtocolError("args must be a JSON object")
        if op == "load":
            if "project" not in args:
                raise protocol.ProtocolError("load needs args.project, the project folder")
            attach = args.get("mode", "attached") == "attached"
            stream = await self.runtime.load(
                args["project"], target=args.get("target"), file=args.get("file"),
                name=args.get("name"), mode="attached" if attach else "kept",
            )
            await self._send(writer, {"ok": True, "result": {
                "name": stream.name, "project": str(stream.project), "nodes": len(stream.graph["nodes"])}})
            return stream if attach else None
        if op == "streams":
            result: Any = self.runtime.list_streams()
        elif op == "stop":
            result = await self.runtime.stop(_require(args, "name"))
        elif op == "ping":
            result = {"pong": True}
        else:
            known = "load, streams, stop, ping"
            raise protocol.ProtocolError(f"unknown op {op!r}; the runtime knows: {known}")
        await self._send(writer, {"ok": True, "result": result})
        return None

    async def _attached(self, stream: LoadedStream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Stream the log to the terminal until it hangs up (which unloads) or the stream ends."""
        assert stream.log is not None
        queue = stream.log.watch()
        hangup = asyncio.create_task(_wait_eof(reader))
        ended = asyncio.create_task(stream.ended.wait())
        try:
            while True:
                next_record = asyncio.create_task(queue.get())
                done, _ = await asyncio.wait({next_record, hangup, ended}, return_when=asyncio.FIRST_COMPLETED)
                if next_record in done:
                    await self._send(writer, {"event": "log", "record": next_record.result()})
                else:
                    next_record.cancel()
                if hangup in done:
                    await self.runtime.unload_if_current(stream, "its terminal closed")
                    return
                if ended in done:
                    while not queue.empty():
                        await self._send(writer, {"event": "log", "record": queue.get_nowait()})
                    await self._send(writer, {"event": "ended", "reason": stream.end_reason,
                                            "runtime_down": stream.ended_by_runtime})
                    return
        except ConnectionError:
            await self.runtime.unload_if_current(stream, "its terminal closed")
        finally:
            stream.log.unwatch(queue)
            hangup.cancel()
            ended.cancel()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        writer.write(protocol.encode(message))
        await writer.drain()


def _require(args: dict[str, Any], key: str) -> Any:
    if key not in args:
        raise protocol.ProtocolError(f"this request needs args.{key}")
    return args[key]


async def _wait_eof(reader: asyncio.StreamReader) -> None:
    while True:
        try:
            chunk = await reader.read(4096)
        except ConnectionError:
            return
        if not chunk:
            return
