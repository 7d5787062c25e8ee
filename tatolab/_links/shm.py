"""Shared-memory files that only this user can name, create or replace.

/dev/shm is writable by every user (mode 1777), so a name there is anyone's to take first:
another user could create the next generation of a ring before the writer does, or plant a
symlink where a file is about to be made. So every tatolab file lives in a folder of the
user's own, `/dev/shm/tatolab-<uid>`, mode 0700, checked (never through a symlink) to be the
user's after it is made: one another user made first is refused, naming its owner. Inside it
files are created O_EXCL|O_NOFOLLOW with mode 0600, and every file opened is checked with
fstat to be the user's own regular file before it is trusted (tatolab/_safe_fs.py does the
checks; here they raise RingError, which every reader of a ring handles).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from tatolab._safe_fs import UnsafePath, check_private_dir, create_private_file, open_own_file, private_dir

SHM_ROOT = "/dev/shm"
_FIX = "Remove it (an administrator can, if you cannot) and start again."


class RingError(RuntimeError):
    """A shared-memory file is missing, not this user's, or not a tatolab ring."""


def default_folder() -> str:
    return os.path.join(SHM_ROOT, f"tatolab-{os.getuid()}")


def private_folder(path: str | None = None) -> str:
    """Make (if needed) and check the user's own 0700 folder for shared-memory files; its path."""
    path = path or default_folder()
    try:
        private_dir(Path(path), "the folder of your shared-memory files", _FIX)
    except UnsafePath as exc:
        raise RingError(str(exc)) from None
    return path


def check_folder(path: str) -> None:
    """Refuse `path` unless it is a real folder (not a symlink) of this user that no one else can write."""
    try:
        check_private_dir(path, "the folder of a ring", f"Keep rings in {default_folder()} (tatolab makes it).")
    except FileNotFoundError:
        raise RingError(f"the shared-memory folder {path} does not exist") from None
    except UnsafePath as exc:
        raise RingError(str(exc)) from None


def create_exclusive(path: str, size: int) -> int:
    """A new file of `size` bytes, mode 0600, never a name someone planted; its descriptor."""
    try:
        fd = create_private_file(path, "a ring file")
    except UnsafePath as exc:
        raise RingError(str(exc)) from None
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        raise
    return fd


def open_owned(path: str) -> int:
    """Open `path` for reading and writing only if it is a regular file of this user; its descriptor.

    FileNotFoundError passes through (a writer may be replacing the file)."""
    try:
        return open_own_file(path, os.O_RDWR, "a ring file")
    except UnsafePath as exc:
        raise RingError(str(exc)) from None


def map_owned(path: str, min_bytes: int, what: str, length: int = 0) -> mmap.mmap:
    """Map `path` (opened as `open_owned` does), refusing a file shorter than `min_bytes` as not
    `what`; `length` bytes of it, or all of it with 0. FileNotFoundError passes through."""
    fd = open_owned(path)
    try:
        size = os.fstat(fd).st_size
        if size < min_bytes:
            raise RingError(f"{path} is not {what} (only {size} bytes)")
        return mmap.mmap(fd, length or size)
    finally:
        os.close(fd)
