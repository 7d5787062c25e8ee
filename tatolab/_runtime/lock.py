"""One runtime per machine: an exclusive lock on a file that names its holder."""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import sys
from pathlib import Path


class RuntimeAlreadyRunning(Exception):
    def __init__(self, holder: dict, lock_path: Path) -> None:
        self.holder = holder
        pid = holder.get("pid", "?")
        user = holder.get("user", "?")
        exe = holder.get("executable", "?")
        super().__init__(
            f"a runtime is already running on this machine: pid {pid}, user {user}, "
            f"executable {exe} (lock {lock_path}). Use that one, or stop it first."
        )


class MachineLock:
    """Held for the runtime's whole life; the kernel drops it if the process dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RuntimeAlreadyRunning(holder, self.path) from None
        except PermissionError:
            os.close(fd)
            raise
        holder = {
            "pid": os.getpid(),
            "user": pwd.getpwuid(os.getuid()).pw_name,
            "executable": f"{sys.executable} {' '.join(sys.argv)}".strip(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None


def _read_holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}
