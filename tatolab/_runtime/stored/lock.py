"""One runtime per machine: an abstract Unix socket that the runtime holds for its whole life.

An abstract name is no file, so nothing can be planted at it, made unreadable or left
behind; the kernel frees it when the holder dies. Whoever holds it, a runtime or a
squatter, is named by user and pid: a second runtime connects and the kernel tells it the
holder's credentials (``SO_PEERCRED``); a holder that does not answer is found through the
kernel's socket table (``sock_diag``) and ``/proc``.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
from dataclasses import dataclass

from tatolab._safe_fs import owner_name

_ASK_TIMEOUT_S = 2.0
_COMMAND_LINE_CHARS = 200


@dataclass
class Holder:
    uid: int | None
    pid: int | None

    @property
    def user(self) -> str:
        return owner_name(self.uid) if self.uid is not None else "unknown"

    @property
    def executable(self) -> str:
        return _command_line(self.pid) if self.pid else "unknown"


class RuntimeAlreadyRunning(Exception):
    def __init__(self, holder: Holder, name: str) -> None:
        self.holder = holder
        pid = holder.pid if holder.pid is not None else "unknown"
        where = f"pid {pid}, user {holder.user}, executable {holder.executable} (lock @{name})"
        if holder.uid is None or holder.uid == os.getuid():
            fix = "Use that one, or stop it first."
        else:
            end = f"`sudo kill {holder.pid}`" if holder.pid is not None else \
                f"`sudo ss -xlp | grep @{name}` names the process holding it, then `sudo kill` that pid"
            fix = ("One user owns the runtime on a machine at a time: that user must stop it first, or an "
                   f"administrator can end it ({end}; the lock is no file: it is free once that process ends).")
        super().__init__(f"a runtime is already running on this machine: {where}. {fix}")


class MachineLock:
    """Held for the runtime's whole life; the kernel drops it if the process dies."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._sock: socket.socket | None = None

    @property
    def address(self) -> bytes:
        return b"\0" + self.name.encode()

    def acquire(self) -> None:
        for _ in range(5):  # the holder may go away between our bind and our question
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(self.address)
            except OSError as exc:
                sock.close()
                if exc.errno != errno.EADDRINUSE:
                    raise
                holder = ask_holder(self.address)
                if holder is not None:
                    raise RuntimeAlreadyRunning(holder, self.name) from None
                continue
            sock.listen(64)
            self._sock = sock
            threading.Thread(target=self._answer, args=(sock,), name="tatolab-machine-lock", daemon=True).start()
            return
        raise RuntimeAlreadyRunning(Holder(None, None), self.name)

    @staticmethod
    def _answer(sock: socket.socket) -> None:
        """Accept and close: a second runtime learns who we are from the kernel, not from us."""
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # released
            conn.close()

    def release(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            except OSError:
                pass
            self._sock.close()
            self._sock = None


def ask_holder(address: bytes) -> Holder | None:
    """Who holds ``address``; None when nobody does any more."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_ASK_TIMEOUT_S)
    try:
        probe.connect(address)
        creds = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", creds)
        return Holder(uid, pid)
    except (ConnectionRefusedError, BlockingIOError, TimeoutError, OSError):
        pass  # bound but not listening, or not accepting: look it up instead
    finally:
        probe.close()
    found = _find_in_socket_table(address)
    if found is None:
        return None
    uid, inode = found
    return Holder(uid, _pid_holding(inode))


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "unknown"
    text = " ".join(w.decode(errors="replace") for w in words if w)
    # any process may be the holder: its command line stays on one line and short
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return (text[:_COMMAND_LINE_CHARS] + "...") if len(text) > _COMMAND_LINE_CHARS else text or "unknown"


# sock_diag (linux/sock_diag.h, linux/unix_diag.h)
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_UDIAG_SHOW_NAME, _UDIAG_SHOW_UID = 0x1, 0x40
_UNIX_DIAG_NAME, _UNIX_DIAG_UID = 0, 7


def _find_in_socket_table(address: bytes) -> tuple[int | None, int] | None:
    """(uid, inode) of the Unix socket bound to ``address``, from the kernel's table."""
    try:
        nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG)
    except OSError:
        return None
    try:
        req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, _UDIAG_SHOW_NAME | _UDIAG_SHOW_UID,
                          0xFFFFFFFF, 0xFFFFFFFF)
        nl.sendall(struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0) + req)
        while True:
            data = nl.recv(65536)
            if not data:
                return None
            offset = 0
            while offset + 16 <= len(data):
                length, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, offset)
                if kind in (_NLMSG_DONE, _NLMSG_ERROR) or length < 16:
                    return None
                found = _match(data[offset + 16:offset + length], address)
                if found is not None:
                    return found
                offset += (length + 3) & ~3
    except OSError:
        return None
    finally:
        nl.close()


def _match(message: bytes, address: bytes) -> tuple[int | None, int] | None:
    if len(message) < 16:
        return None
    inode = struct.unpack_from("=I", message, 4)[0]
    name, uid = None, None
    offset = 16
    while offset + 4 <= len(message):
        length, kind = struct.unpack_from("=HH", message, offset)
        if length < 4:
            break
        value = message[offset + 4:offset + length]
        if kind == _UNIX_DIAG_NAME:
            name = value
        elif kind == _UNIX_DIAG_UID and len(value) >= 4:
            uid = struct.unpack_from("=I", value)[0]
        offset += (length + 3) & ~3
    return (uid, inode) if name == address else None


def _pid_holding(inode: int) -> int | None:
    """The process with the socket open, where /proc lets us see it (all of them as root)."""
    target = f"socket:[{inode}]"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") == target:
                    return int(entry)
            except OSError:
                continue
    return None
