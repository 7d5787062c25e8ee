"""Where the runtime's files live: the one place for the socket, state and lock paths."""

from __future__ import annotations

import os
from pathlib import Path

from tatolab._links import shm


def socket_dir() -> Path:
    # "streamlib" is the docs' name for this folder (their no-runtime message quotes it), a contract.
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return Path(runtime_dir) / "streamlib"
    return Path(f"/tmp/streamlib-{os.getuid()}")


def socket_path() -> Path:
    return socket_dir() / "local-api.sock"


def state_dir() -> Path:
    state_home = os.environ.get("XDG_STATE_HOME")
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
    return Path(shm.private_folder())


def shm_namespace(state: Path | None = None, *, make_folder: bool = True) -> str:
    """Prefix, as a full path in ``shm_dir()``, of every shared-memory file the runtime whose
    state folder is ``state`` (this one's by default) creates.

    It depends on the state folder, so isolated runtimes (tests, side by side)
    never reap each other's files.
    """
    import hashlib

    digest = hashlib.sha1(str((state or state_dir()).resolve()).encode()).hexdigest()[:10]
    folder = shm_dir() if make_folder else Path(shm.default_folder())
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
