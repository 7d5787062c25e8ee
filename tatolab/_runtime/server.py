"""The control socket: JSON lines in, JSON lines out (see protocol.py)."""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

from tatolab._control import protocol
from tatolab._control.errors import ControlError
from tatolab._runtime.runtime import Runtime
from tatolab._runtime.ops import OPS, load_all


class ControlServer:
    def __init__(self, runtime: Runtime, say: Any) -> None:
        load_all()
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
                result = await self._answer(line, writer)
                if result is not None:
                    await self._converse(result, reader, writer)
                    break
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _answer(self, line: bytes, writer: asyncio.StreamWriter) -> Any:
        """Run one request and send its answer; returns an event iterator to keep talking."""
        try:
            request = protocol.decode(line)
            operation = OPS.get(request.get("op"))  # type: ignore[arg-type]
            if operation is None:
                raise protocol.ProtocolError(
                    f"unknown op {request.get('op')!r}; the runtime knows: {', '.join(sorted(OPS))}"
                )
            args = request.get("args") or {}
            if not isinstance(args, dict):
                raise protocol.ProtocolError("args must be a JSON object")
            result = await operation.function(self.runtime, **operation.check(args))
        except ControlError as exc:
            await _send(writer, {"ok": False, **exc.to_wire()})
            return None
        except protocol.ProtocolError as exc:
            await _send(writer, {"ok": False, "code": "protocol", "error": str(exc)})
            return None
        except Exception as exc:  # a bug must not take the runtime down
            self.say("error", f"request failed: {exc}", traceback=traceback.format_exc())
            await _send(writer, {"ok": False, "code": "internal", "error": f"internal error in the runtime: {exc}"})
            return None
        if hasattr(result, "__aiter__"):
            first = await anext(result, None)  # the opening event carries the answer
            try:
                await _send(writer, {"ok": True, "result": first})
            except ConnectionError:
                await result.aclose()  # the client left already: its finally unloads what it loaded
                raise
            return result
        await _send(writer, {"ok": True, "result": result})
        return None

    async def _converse(self, events: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Send events until they end or the client hangs up; hanging up closes the iterator."""

        async def pump() -> None:
            async for event in events:
                await _send(writer, event)

        pumping = asyncio.create_task(pump())
        hangup = asyncio.create_task(_wait_eof(reader))
        try:
            await asyncio.wait({pumping, hangup}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hangup.cancel()
            if not pumping.done():
                pumping.cancel()
                try:
                    await pumping
                except (asyncio.CancelledError, ConnectionError):
                    pass
            await events.aclose()


async def _send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    writer.write(protocol.encode(message))
    await writer.drain()


async def _wait_eof(reader: asyncio.StreamReader) -> None:
    while True:
        try:
            chunk = await reader.read(4096)
        except ConnectionError:
            return
        if not chunk:
            return
