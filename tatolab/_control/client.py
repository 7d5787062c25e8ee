"""Talking to the runtime over its socket: ``Client`` blocks (the CLI), ``AsyncClient`` awaits (MCP).

Both speak only to a runtime of this user (SO_PEERCRED), and raise ``ControlError`` (a code,
a message and fixes as data) for a refusal; how it reads is the caller's (the CLI's errors.py).
"""

from __future__ import annotations

import _socket as socket  # the C module: socket.py (selectors, its enums) cost a command ~15% of its start
import os
import struct
import sys
import time
from pathlib import Path

from tatolab import _settings as settings
from tatolab._control import paths, protocol
from tatolab._control.errors import ControlError
from tatolab._safe_fs import owner_name

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    import asyncio
    from typing import Any, AsyncIterator, Callable, Iterator

TIMEOUT_ENV = "TATOLAB_CLI_TIMEOUT_S"
ANSWER_TIMEOUT_S = 60.0  # a request's answer (a load compiles the stream first)
CONNECT_TIMEOUT_S = 10.0
CONNECT_RETRY_S = 0.05


class NoRuntime(Exception):
    def __init__(self, path: Path, looked: list[str] | None = None) -> None:
        # where else it looked (XDG_RUNTIME_DIR unset: /run/user/<uid>, then /tmp), so a client
        # started with a minimal environment says why it looked where it did
        why = f" (it looked there because {_listed(looked)})" if looked else ""
        super().__init__(
            f"no runtime is running on this machine: nothing answers at {path}{why}. "
            "Start one by running `tatolabd` in a terminal."
        )


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _socket(path: Path | None) -> tuple[Path, list[str]]:
    """The socket to connect to, and where else was looked first (for the no-runtime message)."""
    if path is not None:
        return path, []
    place = paths.socket_place()
    return place.folder / "local-api.sock", place.looked


class RequestFailed(Exception):
    pass


class Refused(RequestFailed, ControlError):
    """The runtime refused the request: a ControlError (code, message, fixes) from its answer."""


class NoAnswer(RequestFailed):
    def __init__(self, path: Path, seconds: float) -> None:
        super().__init__(
            f"the runtime at {path} did not answer within {seconds:g} s; it may be overloaded or out of file "
            f"descriptors (its log: {paths.state_dir() / 'runtime.jsonl'}). Set {TIMEOUT_ENV} to wait longer."
        )


class RuntimeGone(RequestFailed):
    def __init__(self, exc: OSError | None = None) -> None:
        why = f" ({exc.strerror or exc})" if exc is not None else ""
        super().__init__(
            f"the runtime closed the connection before answering{why}: it stopped or crashed. "
            "`tatolab streams` shows whether it is back; its log says why it stopped."
        )


NOTICE_EVERY_S = 5.0  # the CLI says a load's place in line at most this often


def waiting_words(notice: dict[str, Any]) -> str:
    """``{"waiting": true, "place": 3, "in_line": 7, "at_once": 2}`` as a person reads it."""
    return (f"waiting for its turn: {notice.get('place')} of {notice.get('in_line')} in line "
            f"(the runtime compiles and starts {notice.get('at_once')} streams at once)")


def answer_timeout_s() -> float:
    return float(settings.value(TIMEOUT_ENV))  # checked as the command started (_settings.py)


class NotYourRuntime(RequestFailed):
    def __init__(self, path: Path, pid: int, uid: int) -> None:
        super().__init__(
            f"what answers at {path} is pid {pid} of user {owner_name(uid)}, not a runtime of yours, "
            f"so nothing was sent to it. Remove {path.parent} (someone else made it) and start `tatolabd` again."
        )


class _Lines:
    """The answers' lines off the socket: what socket.makefile("rb").readline() gave, without
    socket.py (the C socket has no makefile). The socket's timeout applies to each recv."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def readline(self) -> bytes:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end + 1])
                del self._buffer[:end + 1]
                return line
            chunk = self._sock.recv(1 << 16)
            if not chunk:  # closed: what is left (b"" at a line's end), as readline does
                line = bytes(self._buffer)
                self._buffer.clear()
                return line
            self._buffer += chunk

    def close(self) -> None:
        self._buffer.clear()


class Client:
    def __init__(self, path: Path | None = None) -> None:
        self.path, self._looked = _socket(path)
        self.timeout_s = answer_timeout_s()
        self.sock = self._connect(min(CONNECT_TIMEOUT_S, self.timeout_s))
        # the kernel says who listens: a socket planted in a shared folder is never spoken to
        pid, uid, _ = struct.unpack("3i", self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.getuid():
            self.sock.close()
            raise NotYourRuntime(self.path, pid, uid)
        self.sock.settimeout(None)
        self.file = _Lines(self.sock)
        self._said_at = 0.0

    def on_notice(self, notice: dict[str, Any]) -> None:
        """A load waiting its turn: say its place on stderr (the first time, then at most every few seconds)."""
        if not notice.get("waiting"):
            return
        now = time.monotonic()
        if self._said_at and now - self._said_at < NOTICE_EVERY_S:
            return
        self._said_at = now
        print(waiting_words(notice), file=sys.stderr, flush=True)

    def _connect(self, timeout_s: float) -> socket.socket:
        """A connection, or NoRuntime / NoAnswer. A runtime that accepts nothing (its backlog
        full: out of descriptors, or frozen) is tried again until ``timeout_s`` has passed."""
        deadline = time.monotonic() + timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout_s)
            try:
                sock.connect(str(self.path))
                return sock
            except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
                sock.close()
                raise NoRuntime(self.path, self._looked) from None
            except (socket.timeout, BlockingIOError):
                sock.close()
                if time.monotonic() >= deadline:
                    raise NoAnswer(self.path, timeout_s) from None
                time.sleep(CONNECT_RETRY_S)

    def request(self, op: str, **args: Any) -> Any:
        """Send one request and return its result; the answer must come within the timeout
        (what follows it, a log or a tap, may take as long as it takes)."""
        self.sock.settimeout(self.timeout_s)
        unsent: OSError | None = None
        try:
            self.sock.sendall(protocol.encode({"op": op, "args": args, "notices": True}))
        except socket.timeout:
            raise NoAnswer(self.path, self.timeout_s) from None
        except OSError as exc:
            unsent = exc  # it may have said why before closing (a refusal): read that first
        while True:  # notices first (a load waiting its turn): each restarts the wait for the answer
            try:
                line = self.file.readline()
            except socket.timeout:
                raise NoAnswer(self.path, self.timeout_s) from None
            except OSError as exc:
                raise RuntimeGone(unsent or exc) from None
            if not line:
                raise RuntimeGone(unsent)
            answer = protocol.decode(line)
            if "notice" not in answer:
                break
            self.on_notice(answer["notice"])
        self.sock.settimeout(None)
        if not answer.get("ok"):
            raise Refused.from_wire(answer)  # the CLI renders its fixes (tatolab/_control/words.py)
        return answer.get("result")

    def next_message(self) -> dict[str, Any] | None:
        """The next message, or None once the runtime closed the connection (or went down)."""
        try:
            line = self.file.readline()
        except OSError:
            return None
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
        self.on_notice: Callable[[dict[str, Any]], None] = lambda notice: None  # an MCP server may pass them on

    @classmethod
    async def connect(cls, path: Path | None = None) -> "AsyncClient":
        import asyncio  # here: the blocking CLI never loads asyncio

        path, looked = _socket(path)
        try:
            reader, writer = await asyncio.open_unix_connection(str(path), limit=protocol.MAX_LINE)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            raise NoRuntime(path, looked) from None
        sock = writer.get_extra_info("socket")
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.getuid():
            writer.close()
            raise NotYourRuntime(path, pid, uid)
        return cls(path, reader, writer)

    async def request(self, op: str, **args: Any) -> Any:
        """Send one request and return its answer; for an operation that talks, ``events()`` follows.
        Notices before it (a load waiting its turn) go to ``on_notice``."""
        self.writer.write(protocol.encode({"op": op, "args": args, "notices": True}))
        await self.writer.drain()
        answer = await self.next_message()
        while answer is not None and "notice" in answer:
            self.on_notice(answer["notice"])
            answer = await self.next_message()
        if answer is None:
            raise RequestFailed("the runtime closed the connection before answering")
        if not answer.get("ok"):
            raise Refused.from_wire(answer)
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
