"""A CLI command imports only what it needs, so it starts about as fast as Python itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("asyncio", "psutil", "watchfiles", "msgspec", "zipfile", "tatolab._runtime.stored.logs", "tatolab._cli.dev")

PROBE = f"""
import atexit, sys
atexit.register(lambda: print("LOADED", sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr))
from tatolab._cli.main import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("argv", [["streams"], ["stop", "x"], ["graph"], ["rm", "x"], ["node", "rm", "s", "x"],
                                  ["link", "add", "s/a/out", "s/b/in"]])
def test_a_command_that_only_asks_the_runtime_loads_no_runtime_module(argv, tmp_path):
    env = {"XDG_RUNTIME_DIR": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True,
                            timeout=60)
    assert "no runtime is running" in result.stderr, result.stderr  # it got as far as asking
    assert "LOADED []" in result.stderr, result.stderr
