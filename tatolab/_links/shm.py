"""Shared-memory files that only this user can name, create or replace.

/dev/shm is writable by every user (mode 1777), so a name there is anyone's to take first:
another user could create the next generation of a ring before the writer does, or plant a
symlink where a file is about to be made. So every tatolab file lives in a folder of the
user's own, `/dev/shm/tatolab-<uid>`, mode 0700, checked with lstat after creation (a folder
another user made first, or a symlink, is refused by name and owner). Inside it files are
created with O_EXCL|O_NOFOLLOW and mode 0600, and every file opened is checked with fstat to
belong to this user before it is trusted.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat

SHM_ROOT = "/dev/shm"


class RingError(RuntimeError):
    """A shared-memory file is missing, not this user's, or not a tatolab ring."""


def owner_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def default_folder() -> str:
    return os.path.join(SHM_ROOT, f"tatolab-{os.geteuid()}")


def private_folder(path: str | None = None) -> str:
    """Make (if needed) and check the user's own 0700 folder for shared-memory files; its path."""
    path = path or default_folder()
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_folder(path, ours=True)
    return path


def check_folder(path: str, *, ours: bool = False) -> None:
    """Refuse `path` unless it is a real folder (not a symlink) of this user that no one else can write.

    `ours`: the folder is tatolab's own (private_folder), so a mode opened up since is closed
    again instead of refused."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise RingError(f"the shared-memory folder {path} does not exist") from None
    me = os.geteuid()
    if not stat.S_ISDIR(info.st_mode):
        raise RingError(
            f"{path} is not a folder but a {_kind(info.st_mode)} owned by {owner_name(info.st_uid)}; "
            "tatolab keeps its shared memory in a folder of your own there: remove it and start again"
        )
    if info.st_uid != me:
        raise RingError(
            f"the shared-memory folder {path} belongs to {owner_name(info.st_uid)}, not to you "
            f"({owner_name(me)}); another user may be trying to read your streams: remove it "
            "(as root) and start again"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        if not ours:
            raise RingError(
                f"{path} can be written by other users (mode {mode:o}); shared-memory files must live "
                f"in a folder only you can write, such as {default_folder()}"
            )
        # tatolab's own folder, opened up since: close it (files already inside are
        # fstat-checked when opened, so one planted meanwhile is still refused)
        os.chmod(path, 0o700)


def create_exclusive(path: str, size: int) -> int:
    """A new file of `size` bytes, mode 0600, that did not exist (never a symlink); its descriptor."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        _unlink_quietly(path)
        raise
    return fd


def open_owned(path: str) -> int:
    """Open `path` for reading and writing only if it is a regular file of this user; its descriptor."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
            raise RingError(f"{path} is a symlink; tatolab never follows one in shared memory") from None
        raise
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or not stat.S_ISREG(info.st_mode):
            raise RingError(
                f"{path} is a {_kind(info.st_mode)} owned by {owner_name(info.st_uid)}, not a file of yours "
                f"({owner_name(os.geteuid())}); refusing to use it. Remove it and start the stream again"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    return "special file"


def _unlink_quietly(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
