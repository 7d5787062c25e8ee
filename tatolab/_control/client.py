"""Talking to the runtime over its socket: ``Client`` blocks (the CLI), ``AsyncClient`` awaits (MCP).

Both speak only to a runtime of this user (SO_PEERCRED), and raise ``ControlError`` (a code,
a message and fixes as data) for a refusal; how it reads is the caller's (the CLI's errors.py).
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

from tatolab._control import paths, protocol
from tatolab._control.errors import ControlError
from tatolab._safe_fs import owner_name


class NoRuntime(Exception):
    def __init__(self, path: Path) -> None:
        super().__init__(
            f"no runtime is running on this machine: nothing answers at {path}. "
            "Start one by running `tatolabd` in a terminal."
        )


class RequestFailed(Exception):
    pass


class NotYourRuntime(RequestFailed):
    def __init__(self, path: Path, pid: int, uid: int) -> None:
        super().__init__(
            f"what answers at {path} is pid {pid} of user {owner_name(uid)}, not a runtime of yours, "
            f"so nothing was sent to it. Remove {path.parent} (someone else made it) and start `tatolabd` again."
        )


class Client:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.socket_path()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(str(self.path))
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            self.sock.close()
            raise NoRuntime(self.path) from None
        # the kernel says who listens: a socket planted in a shared folder is never spoken to
        pid, uid, _ = struct.unpack("3i", self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.getuid():
            self.sock.close()
            raise NotYourRuntime(self.path, pid, uid)
        self.file = self.sock.makefile("rb")

    def request(self, op: str, **args: Any) -> Any:
        self.sock.sendall(protocol.encode({"op": op, "args": args}))
        answer = self.next_message()
        if answer is None:
            raise RequestFailed("the runtime closed the connection before answering")
        if not answer.get("ok"):
            raise ControlError.from_wire(answer)  # the CLI renders its fixes (tatolab/_cli/errors.py)
        return answer.get("result")

    def next_message(self) -> dict[str, Any] | None:
        line = self.file.readline()
        if not line:
            return None
        return protocol.decode(line)

    def events(self) -> Iterator[dict[str, Any]]:
        while True:
            message = self.next_message()
            if message is None:
                return
            yield message

    def close(self) -> None:
        try:
            self.file.close()
            self.sock.close()
        except OSError:
            pass


class AsyncClient:
    """The runtime's socket for an asyncio program (an MCP server): the same checks and messages
    as ``Client``; a refusal raises ``ControlError`` with its code and fixes as data."""

    def __init__(self, path: Path, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.path = path
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, path: Path | None = None) -> "AsyncClient":
        path = path or paths.socket_path()
        try:
            reader, writer = await asyncio.open_unix_connection(str(path), limit=protocol.MAX_LINE)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            raise NoRuntime(path) from None
        sock = writer.get_extra_info("socket")
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.getuid():
            writer.close()
            raise NotYourRuntime(path, pid, uid)
        return cls(path, reader, writer)

    async def request(self, op: str, **args: Any) -> Any:
        """Send one request and return its answer; for an operation that talks, ``events()`` follows."""
        self.writer.write(protocol.encode({"op": op, "args": args}))
        await self.writer.drain()
        answer = await self.next_message()
        if answer is None:
            raise RequestFailed("the runtime closed the connection before answering")
        if not answer.get("ok"):
            raise ControlError.from_wire(answer)
        return answer.get("result")

    async def next_message(self) -> dict[str, Any] | None:
        try:
            line = await self.reader.readline()
        except (OSError, ValueError):
            return None
        return protocol.decode(line) if line else None

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        while (message := await self.next_message()) is not None:
            yield message

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass
