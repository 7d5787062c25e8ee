"""A tatolabd on temporary paths for the benchmarks, stopped and cleaned up afterwards.

It is the tests' own (tests/harness.py): one launcher for an isolated runtime.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness import Runtime, wait_for  # noqa: E402,F401  (wait_for: for the benchmarks)


@contextlib.contextmanager
def isolated_runtime(prefix: str) -> Iterator[tuple[Path, dict[str, str], Path]]:
    """Yields (a scratch folder, the environment that points at this runtime, its socket)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        runtime = Runtime(Path(tmp))
        # as a user's machine runs: with .pyc files (where the environment says not to write them,
        # every command and node would compile the package from source, which no install does)
        runtime.env.pop("PYTHONDONTWRITEBYTECODE", None)
        quiet = None if os.environ.get("BENCH_RUNTIME_LOG") else subprocess.DEVNULL  # BENCH_RUNTIME_LOG=1 shows it
        runtime.start(output=quiet, timeout=20)
        try:
            yield runtime.root, runtime.env, runtime.socket
        finally:
            runtime.end_commands()
            runtime.stop()
