"""One stream per camera across all of this user's runtimes: an flock on a file per device in the
user's own shared-memory folder, holding the name of the stream that has it.

The runtime refuses a second stream of its own at load (tatolab/_runtime/rules/cameras.py); this
covers a second runtime (another state folder, a test's). The kernel lets go of the lock when the
node's process ends, however it ends (its file then stays, to be taken by the next one).
"""

from __future__ import annotations

import fcntl
import hashlib
import os

from tatolab._control import paths
from tatolab._safe_fs import open_own_file


class CameraLock:
    def __init__(self, device: str, holder: str) -> None:
        digest = hashlib.sha1(device.encode()).hexdigest()[:16]
        self.path = paths.shm_dir() / f"tatolab-camera-{digest}.lock"
        self.holder = holder  # "stream/node"
        self.fd: int | None = None

    def acquire(self) -> str | None:
        """None once this node holds the camera, else who holds it ("stream/node")."""
        while self.fd is None:
            fd = open_own_file(self.path, os.O_RDWR | os.O_CREAT, "a camera's lock")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held_by = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another stream"
                os.close(fd)
                return held_by
            if not self._still_there(fd):  # its holder let go and unlinked it meanwhile: lock the new one
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, self.holder.encode(), 0)
            self.fd = fd
        return None

    def _still_there(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Unlink, then unlock: whoever opened the old file finds it gone, and opens the path again."""
        if self.fd is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            os.close(self.fd)
            self.fd = None
