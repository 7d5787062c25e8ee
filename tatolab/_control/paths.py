"""Where the runtime's files live: the one place for the socket, state and lock paths."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: every command starts here
if TYPE_CHECKING:
    from typing import Mapping

from tatolab import _settings as settings
from tatolab._links import shm
from tatolab._safe_fs import UnsafePath, open_own_file, owner_name, write_private_file
from tatolab._value import Value


RUN_USER = Path("/run/user")  # pam_systemd's per-user folders: what XDG_RUNTIME_DIR usually is
TMP = Path("/tmp")
PLACES_FILE = "places.json"  # in the state folder: the private names used instead of taken ones


class Place(Value):
    """Where a folder of the runtime's is, how it was chosen, and whether its usual name was taken."""

    __slots__ = ("folder", "looked", "usual", "taken")

    def __init__(self, folder: Path, looked: list[str] | None = None, usual: Path | None = None,
                 taken: str | None = None) -> None:
        self.folder = folder
        self.looked: list[str] = [] if looked is None else looked  # each place looked at first, and why not there
        self.usual = usual  # the usual name in a shared folder (/tmp, /dev/shm)
        self.taken = taken  # what another user made at ``usual``, when they did (words)


def _not_private(path: Path) -> str | None:
    """Why ``path`` is not a real folder of the user's with mode 0700 (None when it is)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.getuid():
        return f"belongs to {owner_name(info.st_uid)}"
    if stat.S_IMODE(info.st_mode) != 0o700:
        return f"has mode {stat.S_IMODE(info.st_mode):o}, not 700"
    return None


def _taken(path: Path) -> str | None:
    """What another user put at ``path``, the usual name in a shared folder (None: free, or the user's)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if info.st_uid == os.getuid() and stat.S_ISDIR(info.st_mode):
        return None
    kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "a folder" if stat.S_ISDIR(info.st_mode) else "a file"
    return f"{kind} of {owner_name(info.st_uid)}"


def _usual_or_recorded(kind: str, usual: Path, looked: list[str]) -> Place:
    taken = _taken(usual)
    if taken is None:
        return Place(usual, looked)
    recorded = recorded_place(kind, usual)
    return Place(recorded or usual, looked + [f"{usual} is {taken}"], usual, taken)


def socket_place(environ: Mapping[str, str] | None = None, *, run_user: Path = RUN_USER, tmp: Path = TMP) -> Place:
    """Where the control socket's folder is; the runtime and every client choose it the same way.

    ``$XDG_RUNTIME_DIR/streamlib``; without XDG_RUNTIME_DIR (an agent's host may start the CLI
    with a minimal environment) ``/run/user/<uid>/streamlib`` when that folder is the user's
    with mode 0700 (pam_systemd makes it), else ``/tmp/streamlib-<uid>``, or, when another user
    took that name first, the private name the runtime recorded instead (``claim``).
    """
    # "streamlib" is the docs' name for this folder (their no-runtime message quotes it), a contract.
    runtime_dir = settings.value("XDG_RUNTIME_DIR", environ)
    if runtime_dir:
        return Place(Path(runtime_dir) / "streamlib")
    looked = ["XDG_RUNTIME_DIR is unset"]
    mine = run_user / str(os.getuid())
    why = _not_private(mine)
    if why is None:
        return Place(mine / "streamlib", looked)
    return _usual_or_recorded("socket", tmp / f"streamlib-{os.getuid()}", looked + [f"{mine} {why}"])


def socket_dir() -> Path:
    return socket_place().folder


def socket_path() -> Path:
    return socket_dir() / "local-api.sock"


def shm_place() -> Place:
    """The user's folder of shared-memory files: /dev/shm/tatolab-<uid>, or, when another user took
    that name first, the private name the runtime recorded instead (``claim``)."""
    return _usual_or_recorded("shm", Path(shm.default_folder()), [])


def recorded_place(kind: str, usual: Path) -> Path | None:
    """The private name recorded for ``kind`` in the state folder, if it is still a folder of the
    user's own (0700) beside ``usual``; None otherwise. The record is the user's alone (0600)."""
    try:
        fd = open_own_file(state_dir() / PLACES_FILE, os.O_RDONLY, "the record of your private folder names")
    except (OSError, UnsafePath):
        return None
    with os.fdopen(fd, "rb") as file:
        try:
            recorded = json.loads(file.read(65536)).get(kind)
        except (ValueError, AttributeError):
            return None
    if not isinstance(recorded, str):
        return None
    path = Path(recorded)
    if path.parent != usual.parent or not path.name.startswith(usual.name + "-") or _not_private(path):
        return None
    return path


def claim(place: Place, kind: str) -> Path:
    """The runtime's side of ``socket_place``/``shm_place``: when another user took the usual name,
    make (or reuse) a fresh private name beside it and record it for the clients; the folder to use.

    Raises UnsafePath when the chosen folder cannot be the user's (XDG_RUNTIME_DIR's is refused,
    as before: the user named that folder)."""
    if place.taken is None:
        return place.folder
    assert place.usual is not None
    if place.folder != place.usual:
        return place.folder  # recorded at an earlier start and still the user's own
    import tempfile  # here, not at the top: `tatolab streams` never needs it

    folder = Path(tempfile.mkdtemp(prefix=place.usual.name + "-", dir=place.usual.parent))  # mode 0700
    state = state_dir()
    record = state / PLACES_FILE
    try:
        fd = open_own_file(record, os.O_RDONLY, "the record of your private folder names")
        with os.fdopen(fd, "rb") as file:
            places = json.loads(file.read(65536))
        if not isinstance(places, dict):
            places = {}
    except (OSError, ValueError):
        places = {}
    places[kind] = str(folder)
    # (the state folder is the user's own 0700 folder: no one else can swap names)
    write_private_file(record, json.dumps(places).encode(), "the record of your private folder names")
    return folder


def state_dir() -> Path:
    state_home = settings.value("XDG_STATE_HOME")
    base = Path(state_home) if state_home else Path.home() / ".local" / "state"
    return base / "tatolab"


MACHINE_LOCK_NAME = "tatolab-machine-lock"


def machine_lock_name() -> str:
    """The abstract Unix socket name of the one-per-machine lock (no file: nothing to plant).

    ``TATOLAB_MACHINE_LOCK`` gives runtimes side by side (tests) a lock of their own.
    """
    override = os.environ.get("TATOLAB_MACHINE_LOCK")
    if not override:
        return MACHINE_LOCK_NAME
    name = f"{MACHINE_LOCK_NAME}:{override}"
    if len(name.encode()) > 100:  # an abstract name holds at most 107 bytes
        import hashlib  # here, not at the top: `tatolab streams` never needs it

        name = f"{MACHINE_LOCK_NAME}:{hashlib.sha1(override.encode()).hexdigest()}"
    return name


def shm_dir() -> Path:
    """The user's own 0700 folder under /dev/shm (made and checked here), where every ring
    and status file lives: no other user can create, replace or open a name in it."""
    return Path(shm.private_folder(str(shm_place().folder)))


def shm_namespace(state: Path | None = None, *, make_folder: bool = True) -> str:
    """Prefix, as a full path in ``shm_dir()``, of every shared-memory file the runtime whose
    state folder is ``state`` (this one's by default) creates.

    It depends on the state folder, so isolated runtimes (tests, side by side)
    never reap each other's files.
    """
    import hashlib

    digest = hashlib.sha1(str((state or state_dir()).resolve()).encode()).hexdigest()[:10]
    folder = shm_dir() if make_folder else shm_place().folder
    return str(folder / f"tatolab-{digest}")


def surface_pool() -> str:
    """The runtime's surface pool (its control file; each slot's pixels in ``<this>-<slot>``)."""
    return f"{shm_namespace()}+surfaces"


def stream_shm_prefix(namespace: str, instance: int) -> str:
    """Prefix of one loaded stream's files (each load of a stream is a new instance)."""
    return f"{namespace}-{instance}+"


def loaded_stream_prefix(instance: int) -> str:
    """Prefix of the files of this runtime's loaded stream number ``instance``."""
    return stream_shm_prefix(shm_namespace(), instance)


def ring_base(prefix: str, node: str, port: str) -> str:
    """The ring of output ``node``/``port`` (its generations add ``.0``, ``.1``...: tatolab/_links/ring/layout.py)."""
    return f"{prefix}{node}+{port}"


def status_file(prefix: str, node: str) -> str:
    # "#" is never in a URL-safe name, so this cannot meet a ring file
    return f"{prefix}{node}#status"


# -- a stream's log ----------------------------------------------------------------------------

LOG_FILES_KEPT = 3  # the live file plus two rotated ones: a chatty node cannot fill the disk


def stream_log(project: Path | str, stream: str) -> Path:
    """The live log file of ``stream`` loaded from ``project``."""
    return Path(project) / ".streamlib" / "logs" / f"{stream}.jsonl"


def rotated_log(path: Path, index: int) -> Path:
    """The ``index``-th older file of the log at ``path`` (``x.jsonl.1`` is the newest rotated one)."""
    return path.with_name(f"{path.name}.{index}")


def log_files(path: Path, kept: int = LOG_FILES_KEPT) -> list[Path]:
    """The log's files that exist, oldest first: ``x.jsonl.2``, ``x.jsonl.1``, ``x.jsonl``."""
    return [p for p in [rotated_log(path, i) for i in range(kept - 1, 0, -1)] + [path] if p.exists()]
