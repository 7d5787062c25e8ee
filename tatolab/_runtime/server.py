"""The control socket: JSON lines in, JSON lines out (see protocol.py)."""

from __future__ import annotations

import asyncio
import resource
import time
import traceback
from typing import Any

from tatolab import _settings as settings
from tatolab._control import protocol
from tatolab._control.errors import ControlError
from tatolab._runtime import line as load_line
from tatolab._runtime.runtime import Runtime
from tatolab._runtime.ops import OPS, load_all


IDLE_TIMEOUT_ENV = "TATOLAB_IDLE_TIMEOUT_S"
IDLE_TIMEOUT_S = 30.0  # a connection that sends no request this long is closed
SPARE_DESCRIPTORS = 64  # never taken by connections: node restarts and log files need them
REFUSAL_NOTICE_S = 10.0  # a refused or failed accept is said at most this often


def idle_timeout_s() -> float:
    return settings.value(IDLE_TIMEOUT_ENV)  # checked as tatolabd started (_settings.py)


def max_connections() -> int:
    """Connections served at once: half of what is left of the descriptor limit after a reserve."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(8, (soft - SPARE_DESCRIPTORS) // 2)


class ControlServer:
    def __init__(self, runtime: Runtime, say: Any) -> None:
        load_all()
        self.runtime = runtime
        self.say = say  # the runtime's own log
        self.idle_s = idle_timeout_s()
        self.connections = 0
        self.refused = 0  # connections closed at once, or accepts that failed: too many descriptors in use
        self._refusal_said = 0.0

    def refusing(self, why: str) -> None:
        """Count a connection refused for want of descriptors; say so at most every few seconds,
        in one line (never a traceback per refusal)."""
        self.refused += 1
        now = time.monotonic()
        if now - self._refusal_said >= REFUSAL_NOTICE_S:
            self._refusal_said = now
            self.say("warning", f"refusing connections: {why} ({self.refused} refused so far); idle connections "
                     f"are closed after {self.idle_s:g} s", refused=self.refused)

    def exception_handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's own accept loop backs off a second when out of descriptors; this says it in
        one counted line instead of a traceback each time."""
        exc = context.get("exception")
        if context.get("message", "").startswith("socket.accept() out of system resource"):
            self.refusing(f"accepting failed: {getattr(exc, 'strerror', None) or exc}")
            return
        loop.default_exception_handler(context)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.connections >= max_connections():
            self.refusing(f"{self.connections} connections are open, the most the descriptor limit allows")
            writer.write(protocol.encode({"ok": False, "error": (
                f"the runtime serves {self.connections} connections already, the most its descriptor limit "
                "allows; try again shortly")}))
            writer.close()
            return
        self.connections += 1
        try:
            await self._serve(reader, writer)
        finally:
            self.connections -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    line = await asyncio.wait_for(_read_line(reader), self.idle_s)
                except asyncio.TimeoutError:
                    writer.write(protocol.encode({"ok": False, "error": f"no request within {self.idle_s:g} s; closing"}))
                    break
                except ConnectionError:
                    break
                if line is TOO_LONG:
                    await _send(writer, {"ok": False, "error": (
                        f"a request longer than {protocol.MAX_LINE // 2**20} MiB was refused; "
                        "send each request as one JSON line under that size")})
                    continue
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
            # a client that reads notices before the answer (its place in line) asks for them
            load_line.notice.set((lambda what: writer.write(protocol.encode({"notice": what})))
                            if request.get("notices") is True else None)
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


TOO_LONG = b"<too long>"


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    """The next request line; ``TOO_LONG`` (its bytes skipped) for one over the reader's limit."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial  # the last line, unterminated, or b"" at the end
    except asyncio.LimitOverrunError as exc:
        consumed = exc.consumed
    while True:  # discard the rest of the long line, keeping whatever follows it
        try:
            await reader.readexactly(consumed)
        except asyncio.IncompleteReadError:
            return b""
        try:
            await reader.readuntil(b"\n")
            return TOO_LONG
        except asyncio.IncompleteReadError:
            return TOO_LONG
        except asyncio.LimitOverrunError as exc:
            consumed = exc.consumed


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
