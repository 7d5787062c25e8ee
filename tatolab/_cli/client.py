"""Talking to the runtime over its socket, for the CLI."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path
from typing import Any, Iterator

from tatolab._runtime import paths, protocol
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
            raise RequestFailed(answer.get("error", "the runtime refused the request"))
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
