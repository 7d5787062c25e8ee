"""``tatolabd``: the one runtime on this machine."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from tatolab import __version__, _records
from tatolab import _settings as settings
from tatolab._safe_fs import UnsafePath, private_dir
from tatolab._links import ring
from tatolab._control import paths, protocol
from tatolab._runtime.processes import groups
from tatolab._runtime.stored import namespaces, unwritten
from tatolab._runtime.lifecycle.kept import KeptStreams
from tatolab._runtime.processes.reaper import Reaper
from tatolab._runtime.runtime import Runtime
from tatolab._runtime.processes.starter import WarmStarter
from tatolab._runtime.machine import machine_name
from tatolab._runtime.relay.config import ConfigError
from tatolab._runtime.relay.relay import Relay
from tatolab._runtime.foxglove.service import Foxglove
from tatolab._runtime.stored.lock import MachineLock, RuntimeAlreadyRunning
from tatolab._runtime.stored.logs import RotatingJsonl
from tatolab._runtime.server import ControlServer


class RuntimeLog:
    """The runtime's own log: JSON Lines in its state folder, and a short line on stderr."""

    def __init__(self, state: Path) -> None:
        self.file = RotatingJsonl(state / "runtime.jsonl")

    def __call__(self, level: str, message: str, **fields: Any) -> None:
        record = _records.make_record(message, level=level, fields=fields)
        self.file.write(_records.dumps(record))  # a write that fails is counted, never raised
        unwritten.tell(message)


def refuse_if_answering(path: Path) -> None:
    if not path.exists():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()  # left by a runtime that died
    else:
        raise SystemExit(f"error: another runtime answers at {path}; stop it first")
    finally:
        probe.close()


def claim_place(place: paths.Place, kind: str, state: Path, say: RuntimeLog) -> Path:
    """The folder to use for ``place``: when another user took its usual name in /tmp or /dev/shm
    first (which the user cannot remove), a private one of the user's own, said once."""
    try:
        folder = paths.claim(place, kind)
    except OSError as exc:  # the record could not be written: the clients would not find it
        raise SystemExit(f"error: {place.usual} is {place.taken}, and the private name used instead could not be "
                         f"recorded in {state / paths.PLACES_FILE} ({exc.strerror or exc}); free space there, "
                         f"or ask an administrator to remove {place.usual}") from None
    if place.taken:
        say("warning", f"{place.usual} is {place.taken}, not yours, so this runtime uses {folder} instead (recorded "
            f"in {state / paths.PLACES_FILE}, where every tatolab command finds it); an administrator can remove "
            f"{place.usual}", usual=str(place.usual), used=str(folder))
    return folder


async def serve(lock: MachineLock) -> None:
    try:
        state = private_dir(paths.state_dir(), "the runtime's state folder",
                            "Remove it, or set XDG_STATE_HOME to a folder of yours, and start `tatolabd` again.")
    except UnsafePath:
        raise
    except OSError as exc:  # a full disk: it runs on, kept streams just cannot be recorded
        state = paths.state_dir()
        unwritten.failed(state, exc)
    say = RuntimeLog(state)
    sock_path = claim_place(paths.socket_place(), "socket", state, say) / "local-api.sock"
    private_dir(sock_path.parent, "the control socket's folder",
                "Remove it (an administrator can, if you cannot), or set XDG_RUNTIME_DIR to a folder of yours, "
                "and start `tatolabd` again.")
    refuse_if_answering(sock_path)
    try:
        ring.link_memory_limit()  # TATOLAB_LINK_MEMORY_MB: refuse a bad value now, not at each stream
        claim_place(paths.shm_place(), "shm", state, say)
        namespace = paths.shm_namespace()
        reaped = ring.reap(namespace)
        others = namespaces.reap_dead(os.path.dirname(namespace), keep=namespace)
        namespaces.claim(namespace)
    except (ValueError, ring.RingError, UnsafePath) as exc:  # or the shared-memory folder is not this user's alone
        raise SystemExit(f"error: {exc}") from None
    if reaped:
        say("info", f"removed {reaped} shared-memory files left by an earlier runtime")
    if others:
        say("info", f"removed {others} shared-memory files left by runtimes that died (other state folders)")
    ended = groups.reap_remembered()
    if ended:
        say("info", f"ended {ended} process groups left by the nodes of an earlier runtime")
    reaper = Reaper(say)
    await reaper.start()  # before any node: should this runtime be killed, it ends their groups

    kept = KeptStreams(state, say)
    runtime = Runtime(kept)
    if isinstance(runtime.starter, WarmStarter):
        runtime.starter.say = say  # it says when a new SDK in a project's .venv was picked up
    try:
        runtime.use_relay(Relay(state, say, machine_name()))
    except ConfigError as exc:  # a refused start: before the marker says this run is running
        raise SystemExit(f"error: {exc}") from None
    runtime.foxglove = Foxglove(runtime.starter, say, settings.value("TATOLAB_FOXGLOVE_PORT"))
    server = ControlServer(runtime, say)
    # the two-crash rule, from the marker the previous run left; after every refusal above, so a
    # start refused for a setting never leaves a marker the next start takes for a crash
    runtime.begin()
    runtime.relay.start()  # type: ignore[union-attr]
    asyncio.get_running_loop().set_exception_handler(server.exception_handler)
    # Handlers before the socket listens: a client that sees the socket answer may stop us at
    # once (a test's start then stop), and a SIGTERM's default action would skip the cleanup below.
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stopping.set)
    old_umask = os.umask(0o177)
    try:
        listener = await asyncio.start_unix_server(server.handle, path=str(sock_path), limit=protocol.MAX_LINE)
    finally:
        os.umask(old_umask)
    os.chmod(sock_path, 0o600)

    say("info", f"tatolabd {__version__} running (pid {os.getpid()}), listening on {sock_path}",
        socket=str(sock_path), state=str(state), relay_port=runtime.relay.port if runtime.relay else None)
    runtime.recall_cut_recordings()
    loading = asyncio.create_task(runtime.load_kept_at_start(), name="load kept streams")
    clean = False
    try:
        await stopping.wait()
        clean = True
    finally:
        say("info", "stopping: ending every stream")
        listener.close()
        loading.cancel()
        await asyncio.gather(loading, return_exceptions=True)
        try:
            await runtime.shutdown()
            await runtime.relay.close()  # type: ignore[union-attr]
            if clean:
                runtime.stopped_cleanly()  # a clean stop ends every crash streak
        finally:  # whatever went wrong above, no file or process group outlives the runtime
            ring.reap(paths.shm_namespace())
            groups.reap_remembered()
            await reaper.stop()
        try:
            sock_path.unlink()
        except FileNotFoundError:
            pass
        say("info", "stopped cleanly")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tatolabd", description="The Tatolab runtime: runs every stream on this machine.")
    parser.add_argument("--version", action="version", version=f"tatolabd {__version__}")
    parser.parse_args(argv)
    settings.refuse_bad(settings.RUNTIME)  # every TATOLAB_* setting it reads, before anything starts
    lock = MachineLock(paths.machine_lock_name())
    try:
        lock.acquire()
        asyncio.run(serve(lock))
    except (RuntimeAlreadyRunning, UnsafePath) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    finally:
        lock.release()
