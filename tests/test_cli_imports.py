"""A CLI command imports only what it needs, so it starts about as fast as Python itself."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from tatolab._cli.commands import COMMANDS
from tatolab._cli.main import build_parser

HEAVY = ("asyncio", "psutil", "watchfiles", "msgspec", "zipfile", "tatolab._runtime.stored.logs", "tatolab._cli.dev",
         # each of these costs a command a tenth to a fifth of Python's own start (issue 28)
         "typing", "dataclasses", "inspect", "shutil", "datetime", "subprocess", "unicodedata", "socket", "selectors")
# --help, a mistyped command and no command are answered from the table of commands alone:
# no command's module is loaded, nor anything a command needs
HELP_HEAVY = HEAVY + ("tatolab._cli.wheels", "tatolab._surfaces", "tatolab._builtins", "importlib.metadata", "venv",
                      "tempfile", "tatolab._control.words",
                      *(f"tatolab._cli.{module}" for module in dict.fromkeys(m for m, _ in COMMANDS.values())))

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


@pytest.mark.parametrize("argv", [["--help"], ["strems"], []])
def test_help_a_typo_or_no_command_loads_no_command_module(argv, tmp_path):
    env = {"XDG_RUNTIME_DIR": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}
    probe = PROBE.replace(repr(HEAVY), repr(HELP_HEAVY))
    result = subprocess.run([sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True,
                            timeout=60)
    if argv == ["--help"]:
        for name, (_, line) in COMMANDS.items():
            assert name in result.stdout and line.split()[0] in result.stdout, result.stdout
    elif argv:
        assert "did you mean `tatolab streams`?" in result.stderr, result.stderr
    else:
        assert "the following arguments are required: COMMAND" in result.stderr, result.stderr
    assert "LOADED []" in result.stderr, result.stderr


def test_each_command_module_registers_the_commands_the_table_gives_it():
    # what --help lists from the table is what the modules define, line for line and in order
    parser = build_parser(None)
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(subparsers.choices) == list(COMMANDS)
    assert [(c.dest, c.help) for c in subparsers._choices_actions] == [(n, line) for n, (_, line) in COMMANDS.items()]
    for name, (module, _) in COMMANDS.items():
        only = build_parser([name])
        (sub,) = [a for a in only._actions if isinstance(a, argparse._SubParsersAction)]
        assert set(sub.choices) == {n for n, (m, _) in COMMANDS.items() if m == module}, name
