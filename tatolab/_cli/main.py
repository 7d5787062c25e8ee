"""``tatolab``: the command line. Every command talks to the runtime; none runs a stream itself."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from tatolab import __version__
from tatolab._cli import dev, expose, kept, new, service, streams
from tatolab._cli import inspect as inspect_commands
from tatolab._cli.client import NoRuntime, RequestFailed
from tatolab._cli.output import fail

COMMAND_MODULES = [streams, dev, new, inspect_commands, kept, expose, service]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tatolab", description="Run live streams on this machine.")
    parser.add_argument("--version", action="version", version=f"tatolab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except (NoRuntime, RequestFailed) as exc:
        code = fail(str(exc))
    except BrokenPipeError:
        code = _stdout_closed()
    sys.exit(code)


def _stdout_closed() -> int:
    """Whoever read the output stopped reading (`tatolab streams | head -4`): end quietly, as
    `tatolab logs | head` does. Socket errors never get here: the client turns them into
    RequestFailed."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the flush at exit does not complain either
    except (OSError, ValueError):
        pass
    return 0
