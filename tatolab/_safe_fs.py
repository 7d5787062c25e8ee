"""Folders and files in places other users can write to (/tmp, /dev/shm, a shared runtime folder).

Nothing here follows a symbolic link or trusts a folder or file another user owns: a path
someone else planted is refused with a message naming it and its owner. Once a folder is
checked to be the user's own with mode 0700, nobody else can add or replace a name in it,
so what the runtime creates inside is safe.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Sequence

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
DEFAULT_FIX = "Remove it and try again."


class UnsafePath(OSError):
    """A path another user could control: named, with its owner, and what to do.

    An OSError, so code that reports a file it cannot make or open reports this too."""

    def __init__(self, path: Path | str, problem: str, what: str, fix: str = DEFAULT_FIX) -> None:
        self.path = Path(path)
        super().__init__(f"{path} {problem}; {what} must be yours alone, so Tatolab will not use it. {fix}")


def owner_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _describe(path: Path | str, info: os.stat_result) -> str:
    """What a path found where a folder or file of ours should be is, for the refusal."""
    owner = owner_name(info.st_uid)
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"is a symbolic link to {target} owned by {owner}"
    if info.st_uid != os.getuid():
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a file"
        return f"is {kind} owned by {owner}, not by you"
    if stat.S_ISDIR(info.st_mode):
        return f"is a folder owned by {owner}"
    return f"is not a regular file (owner {owner})"


def _refuse(path: Path | str, what: str, fix: str = DEFAULT_FIX) -> UnsafePath:
    try:
        info = os.lstat(path)
    except OSError as exc:
        return UnsafePath(path, f"cannot be checked ({exc.strerror})", what, fix)
    return UnsafePath(path, _describe(path, info), what, fix)


def private_dir(path: Path, what: str = "this folder", fix: str = DEFAULT_FIX) -> Path:
    """Make ``path`` a folder of the user's own with mode 0700, or refuse.

    Only the last component is created here and checked: it is the one that may sit in a
    folder other users can write to. A folder that is the user's own but open to others
    (made by an older version) is tightened to 0700.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, PRIVATE_DIR_MODE)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refuse(path, what, fix) from None
        raise
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            raise UnsafePath(path, _describe(path, info), what, fix)
        if stat.S_IMODE(info.st_mode) != PRIVATE_DIR_MODE:
            os.fchmod(fd, PRIVATE_DIR_MODE)  # the fd is this very folder, never a link's target
    finally:
        os.close(fd)
    return path


def check_private_dir(path: Path | str, what: str = "this folder", fix: str = DEFAULT_FIX) -> None:
    """Refuse ``path`` unless it is a real folder (not a link) of the user's that no one else can write.

    FileNotFoundError passes through: the caller names what should have made it."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise UnsafePath(path, _describe(path, info), what, fix)
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        raise UnsafePath(path, f"can be written by other users (mode {mode:o})", what, fix)


def open_folders_below(base: Path, parts: Sequence[str], what: str, fix: str = DEFAULT_FIX) -> int:
    """A descriptor of the folder ``base/parts[0]/parts[1]/...``: each part made (mode 0700) if
    missing and opened from its parent's descriptor without following a link (``openat``,
    ``O_NOFOLLOW``), and refused unless it is the user's own. The last one is tightened to 0700.

    ``base`` itself is opened as named (a project folder the user chose). Use the descriptor with
    ``dir_fd=`` for every name inside, so nothing planted later on the way is ever followed."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    path = Path(base)
    try:
        for part in parts:
            path = path / part
            try:
                os.mkdir(part, PRIVATE_DIR_MODE, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refuse(path, what, fix) from None
                raise
            os.close(fd)
            fd = child
            info = os.fstat(fd)
            if info.st_uid != os.getuid():
                raise UnsafePath(path, _describe(path, info), what, fix)
        if parts and stat.S_IMODE(os.fstat(fd).st_mode) != PRIVATE_DIR_MODE:
            os.fchmod(fd, PRIVATE_DIR_MODE)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _check_own_file(fd: int, path: Path | str, what: str) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        raise UnsafePath(path, _describe(path, info), what)


def create_private_file(path: Path | str, what: str = "this file", flags: int = os.O_RDWR) -> int:
    """Create a new file only the user can open and return its descriptor.

    ``O_EXCL|O_NOFOLLOW``: a name someone planted (a link, a file) is never opened; a leftover
    regular file of the user's own (a crash) is replaced.
    """
    flags |= os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, PRIVATE_FILE_MODE)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        raise UnsafePath(path, _describe(path, info), what)
    os.unlink(path)
    try:
        return os.open(path, flags, PRIVATE_FILE_MODE)
    except FileExistsError:
        raise _refuse(path, what) from None


def write_private_file(path: Path, data: bytes, what: str = "this file") -> None:
    """Replace ``path`` with ``data`` whole, 0600, synced: written beside it (``<name>.<pid>.new``,
    made as create_private_file does, so two processes writing at once never share one) and
    renamed over it, so a crash leaves the old or the new; a failed write leaves no temporary."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.new")
    fd = create_private_file(tmp, what, os.O_WRONLY)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def open_own_file(path: Path | str, flags: int, what: str = "this file", dir_fd: int | None = None) -> int:
    """Open an existing (or, with ``O_CREAT``, new: mode 0600) regular file that must be the user's own.

    A file of the user's own that others can read (made by an older version) is tightened to 0600.
    ``O_TRUNC`` empties it only once it is known to be the user's. With ``dir_fd``, ``path`` is a
    name in that folder (``open_folders_below``).
    """
    truncate = bool(flags & os.O_TRUNC)
    # O_NONBLOCK: a planted FIFO must not hang the open; it is refused below like any non-file
    opening = (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, opening, PRIVATE_FILE_MODE, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            raise _refuse(path, what) from None
        raise
    _check_own_file(fd, path, what)
    if not flags & os.O_NONBLOCK:
        os.set_blocking(fd, True)
    if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    if truncate:
        os.ftruncate(fd, 0)
    return fd
