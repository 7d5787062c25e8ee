"""``tatolab``: the command line. Every command talks to the runtime; none runs a stream itself."""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import re
import sys
from typing import Iterator, NoReturn, Sequence

from tatolab import __version__
from tatolab._cli import dev, exchange, expose, kept, new, sdk, service, streams
from tatolab._cli import inspect as inspect_commands
from tatolab._cli.client import NoRuntime, RequestFailed
from tatolab._cli.output import fail

COMMAND_MODULES = [streams, dev, new, sdk, inspect_commands, exchange, kept, expose, service]


class _Parser(argparse.ArgumentParser):
    """argparse, with a suggestion for a mistyped command."""

    def error(self, message: str) -> NoReturn:
        wrong = re.search(r"invalid choice: ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", message)
        if wrong:
            typed = ast.literal_eval(wrong.group(1))
            choices = [name for action in self._actions if isinstance(action, argparse._SubParsersAction)
                       for name in action.choices]
            close = difflib.get_close_matches(typed, choices, n=1, cutoff=0.6)
            if close:
                message = f"{message}; did you mean `{self.prog} {close[0]}`?"
        super().error(message)


def _subcommand_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield sub
                yield from _subcommand_parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tatolab", description="Run live streams on this machine.")
    parser.add_argument("--version", action="version", version=f"tatolab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    for sub in _subcommand_parsers(parser):
        # the innermost command's default wins, so an unknown argument is reported with its usage
        sub.set_defaults(usage_parser=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "usage_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
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
