"""A tatolabd on temporary paths for the benchmarks, stopped and cleaned up afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

BIN = Path(sys.executable).parent


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


@contextlib.contextmanager
def isolated_runtime(prefix: str) -> Iterator[tuple[Path, dict[str, str], Path]]:
    """Yields (a scratch folder, the environment that points at this runtime, its socket)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        root = Path(tmp)
        env = dict(os.environ, XDG_RUNTIME_DIR=str(root / "run"), XDG_STATE_HOME=str(root / "state"),
                   TATOLAB_MACHINE_LOCK=str(root / "machine.lock"))
        env.pop("VIRTUAL_ENV", None)
        (root / "run").mkdir()
        sock = root / "run" / "streamlib" / "local-api.sock"
        quiet = None if os.environ.get("BENCH_RUNTIME_LOG") else subprocess.DEVNULL  # BENCH_RUNTIME_LOG=1 shows it
        daemon = subprocess.Popen([str(BIN / "tatolabd")], env=env, stdout=quiet, stderr=quiet)
        try:
            deadline = time.monotonic() + 20
            while not _answers(sock):
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise RuntimeError(f"tatolabd did not answer at {sock}")
                time.sleep(0.05)
            yield root, env, sock
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
