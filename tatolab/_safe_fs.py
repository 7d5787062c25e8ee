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
    from typing import Callable, Sequence

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


# -- files the user names (a recording's --out): anywhere, so every step on the way is checked --

MAX_LINKS = 40  # links followed on one path (the kernel's own limit)
MAX_NUMBERED = 9999


def _passable(info: os.stat_result) -> str | None:
    """Why a folder on a path must not be gone through (someone else could swap what is in it), or None.

    Its owner must be the user or root; others may not write to it unless it is sticky (``/tmp``),
    where only an entry's owner may replace it, and each entry is checked for its owner in turn.
    Its group may write to it when that is the user's own group (or root's), as trust.py allows."""
    if info.st_uid not in (os.getuid(), 0):
        return f"is a folder owned by {owner_name(info.st_uid)}, not by you or root"
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o020 and info.st_gid in (os.getgid(), 0):
        mode &= ~0o020
    if mode & 0o022 and not mode & stat.S_ISVTX:
        return f"is a folder other users can write to (mode {stat.S_IMODE(info.st_mode):o}), not sticky"
    return None


def open_checked_folder(path: Path | str, what: str, fix: str = DEFAULT_FIX) -> tuple[int, Path]:
    """A descriptor of the folder at the absolute ``path``, and where it really is.

    Walked from ``/`` one name at a time with ``openat``: each folder opened ``O_NOFOLLOW`` and
    ``fstat``-checked as ``_passable``; a missing one made (mode 0700); a link followed only when
    it is the user's or root's (in a folder nobody else can change, so nobody else chose where it
    points); ``..`` goes back to the folder walked before, as the kernel does. Anything else (a
    folder or link another user owns or could swap) is refused naming it, so a name planted on the
    way never sends a file elsewhere."""
    if not os.path.isabs(path):
        raise UnsafePath(path, "is not an absolute path", what, "Give the whole path.")
    todo = [p for p in str(path).split("/") if p not in ("", ".")][::-1]
    chain = [(os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), Path("/"))]  # the folders walked
    links = 0
    try:
        while todo:
            part = todo.pop()
            fd, where = chain[-1]
            if part == "..":
                if len(chain) > 1:
                    os.close(chain.pop()[0])
                continue
            here = where / part
            try:
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                try:
                    os.mkdir(part, PRIVATE_DIR_MODE, dir_fd=fd)
                except FileExistsError:
                    pass
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                if info.st_uid not in (os.getuid(), 0):
                    raise UnsafePath(here, _describe(here, info), what, fix)
                links += 1
                if links > MAX_LINKS:
                    raise UnsafePath(path, f"goes through more than {MAX_LINKS} links", what, fix)
                target = os.readlink(part, dir_fd=fd)
                if target.startswith("/"):
                    while len(chain) > 1:
                        os.close(chain.pop()[0])
                todo += [p for p in target.split("/") if p not in ("", ".")][::-1]
                continue
            if not stat.S_ISDIR(info.st_mode):
                raise UnsafePath(here, f"is not a folder (owner {owner_name(info.st_uid)})", what,
                                 "Give a path whose folders are folders.")
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped since the stat
                    raise _refuse(here, what, fix) from None
                raise
            chain.append((child, here))
            why = _passable(os.fstat(child))
            if why is not None:
                raise UnsafePath(here, why, what, fix)
        fd, where = chain.pop()
        return fd, where
    finally:
        for fd, _ in chain:
            os.close(fd)


def numbered(name: str, n: int) -> str:
    """``name`` itself for 0, else ``<stem>-NNNN<suffix>`` (Mp4Sink's numbering)."""
    if n == 0:
        return name
    stem, dot, suffix = name.rpartition(".")
    if not stem:
        stem, dot, suffix = name, "", ""
    return f"{stem}-{n:04d}{dot}{suffix}"


def create_new_file(path: Path | str, what: str = "the recording",
                    fix: str = "Choose a folder of your own (or root's) that no other user can write to.",
                    names: Callable[[str, int], str] | None = None) -> tuple[int, Path]:
    """Create a file no one else can open (0600) at ``path``, or at the next free name when one is
    there (``<stem>-0001<suffix>``...), never opening or replacing anything that exists: its
    descriptor (write-only) and the path it got.

    Every recording (``tatolab record``, MCP ``record_start``) is created here: its folder is
    reached by ``open_checked_folder`` (missing folders made 0700), the file made with
    ``O_CREAT|O_EXCL|O_NOFOLLOW`` in that descriptor, so two recordings never share a file and a
    link or file planted under the name is never written through or over. ``names(name, n)``, when
    given, names the nth try instead (numbered files of one recording: ``out-1.mcap``, ``out-2.mcap``...)."""
    path = Path(path)
    if not path.name or path.name in (".", ".."):
        raise UnsafePath(path, "names no file", what, "Give a file's path, like /home/you/recording.mcap.")
    folder, _ = open_checked_folder(path.parent, what, fix)
    try:
        for n in range(MAX_NUMBERED + 1):
            name = (names or numbered)(path.name, n)
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             PRIVATE_FILE_MODE, dir_fd=folder)
            except FileExistsError:
                continue
            return fd, path.with_name(name)
        raise UnsafePath(path, f"and {MAX_NUMBERED} numbered names after it are taken", what,
                         "Give another name or folder.")
    finally:
        os.close(folder)
