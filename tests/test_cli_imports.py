"""A CLI command imports only what it needs, so it starts about as fast as Python itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("asyncio", "psutil", "watchfiles", "msgspec", "zipfile", "tatolab._runtime.stored.logs", "tatolab._cli.dev",
         # each of these costs a command a tenth to a fifth of Python's own start (issue 28)
         "typing", "dataclasses", "inspect", "shutil", "datetime", "subprocess", "unicodedata", "socket", "selectors")
# --help loads every command's module (for its line of help), and nothing any command needs only as it runs
HELP_HEAVY = tuple(m for m in HEAVY if m != "tatolab._cli.dev") + (
    "tatolab._cli.wheels", "tatolab._surfaces", "tatolab._builtins", "importlib.metadata", "venv", "tempfile")

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


def test_help_loads_each_command_but_nothing_a_command_needs_only_as_it_runs(tmp_path):
    env = {"XDG_RUNTIME_DIR": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}
    probe = PROBE.replace(repr(HEAVY), repr(HELP_HEAVY))
    result = subprocess.run([sys.executable, "-c", probe, "--help"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert "streams" in result.stdout and "enable-virtual-camera" in result.stdout, result.stdout
    assert "LOADED []" in result.stderr, result.stderr
