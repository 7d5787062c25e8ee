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


def shm_namespace() -> str:
    """Prefix, as a full path in ``shm_dir()``, of every shared-memory file this runtime creates.

    It depends on the state folder, so isolated runtimes (tests, side by side)
    never reap each other's files.
    """
    import hashlib

    digest = hashlib.sha1(str(state_dir().resolve()).encode()).hexdigest()[:10]
    return str(shm_dir() / f"tatolab-{digest}")


def surface_pool() -> str:
    """The runtime's surface pool (its control file; each slot's pixels in ``<this>-<slot>``)."""
    return f"{shm_namespace()}+surfaces"
