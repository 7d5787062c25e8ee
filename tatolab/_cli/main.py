"""``tatolab``: the command line. Every command talks to the runtime; none runs a stream itself.

A command imports only the module that defines it: `tatolab streams` never loads asyncio,
the wheel packer or systemd's helpers. Help and unknown commands load them all.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from tatolab import __version__
from tatolab._cli.client import NoRuntime, RequestFailed
from tatolab._cli.output import fail

# module (under tatolab._cli) -> the commands it registers, in the order help lists them
COMMAND_MODULES = {
    "streams": ("run", "streams", "stop"),
    "dev": ("dev",),
    "new": ("new",),
    "inspect": ("graph", "tap", "logs"),
    "kept": ("start", "rm"),
    "expose": ("expose",),
    "service": ("service",),
}


def _modules_for(argv: Sequence[str]) -> list[str]:
    """The one module defining the command in ``argv``, or all of them (help, a typo, no command)."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    for module, commands in COMMAND_MODULES.items():
        if command in commands:
            return [module]
    return list(COMMAND_MODULES)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tatolab", description="Run live streams on this machine.")
    parser.add_argument("--version", action="version", version=f"tatolab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _modules_for(argv) if argv is not None else COMMAND_MODULES:
        importlib.import_module(f"tatolab._cli.{module}").register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    try:
        code = args.func(args)
    except (NoRuntime, RequestFailed) as exc:
        code = fail(str(exc))
    except BrokenPipeError:
        code = fail("the runtime went away")
    sys.exit(code)
