"""``tatolab``: the command line. Every command talks to the runtime; none runs a stream itself.

A command imports only the module that defines it: `tatolab streams` never loads asyncio,
the wheel packer or systemd's helpers. Help and unknown commands load none (commands.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any, Iterator, NoReturn, Sequence

from tatolab import __version__
from tatolab import _settings as settings
from tatolab._control.errors import ControlError
from tatolab._cli.commands import COMMANDS, add
from tatolab._cli.output import fail

# argparse words its own texts ("show this help message and exit", "usage:") through gettext,
# whose every lookup imports locale and stats catalogue files; Python ships no translation of
# them, so the lookups only cost each command a tenth of its start. Used as they are written:
setattr(argparse, "_", lambda text: text)
setattr(argparse, "ngettext", lambda one, many, n: one if n == 1 else many)

def _width() -> int:
    """The terminal's width less 2, as argparse's HelpFormatter works it out, once a process.

    argparse makes a formatter for every add_argument (to check its metavar), and each asks
    shutil for the terminal's size: importing shutil (with bz2, lzma) costs a command more than
    parsing does. COLUMNS first, then the terminal on stdout, else 80, as shutil does."""
    global _WIDTH
    if _WIDTH is None:
        try:
            columns = int(os.environ.get("COLUMNS", "0"))
        except ValueError:
            columns = 0
        if columns <= 0:
            try:
                columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):
                columns = 0
        _WIDTH = (columns or 80) - 2
    return _WIDTH


_WIDTH: int | None = None


class _Parser(argparse.ArgumentParser):
    """argparse, with a suggestion for a mistyped command, and names that start with ``-``."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        return self.formatter_class(prog=self.prog, width=_width())  # type: ignore[call-arg]

    def _parse_optional(self, arg_string: str) -> Any:
        # A stream, node or port name may start with "-" (`tatolab stop -x`, `logs --stream -x`):
        # a single-dash word that is no option of this command is a value, not an unknown option.
        found = super()._parse_optional(arg_string)
        tuples = found if isinstance(found, list) else [found] if found is not None else []
        if tuples and all(t[0] is None for t in tuples) and not arg_string.startswith("--"):
            return None
        return found

    def error(self, message: str) -> NoReturn:
        wrong = re.search(r"invalid choice: ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", message)
        if wrong:
            import ast
            import difflib

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


def _module_for(argv: Sequence[str]) -> str | None:
    """The module defining the command in ``argv``; None for help, a typo or no command."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    found = COMMANDS.get(command) if command is not None else None
    return found[0] if found is not None else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: its command's module imported and registered, or, for help, a typo
    or no command, every command's line from the table (parsing ends there, so no command's own
    arguments are needed). ``None``: every command, each module registered (for tests)."""
    parser = _Parser(prog="tatolab", description="Run live streams on this machine.")
    parser.add_argument("--version", action="version", version=f"tatolab {__version__}")
    # prog given: argparse would otherwise build a help formatter (and import shutil) to work it out
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", prog=parser.prog)
    if argv is None:
        modules = list(dict.fromkeys(module for module, _ in COMMANDS.values()))
    else:
        module = _module_for(argv)
        modules = [module] if module is not None else []
    for module in modules:
        importlib.import_module(f"tatolab._cli.{module}").register(commands)
    if not modules:
        for name in COMMANDS:
            add(commands, name)
    for sub in _subcommand_parsers(parser):
        # the innermost command's default wins, so an unknown argument is reported with its usage
        sub.set_defaults(usage_parser=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "usage_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    settings.refuse_bad(settings.CLI)  # TATOLAB_CLI_TIMEOUT_S=abc: said now, with what is allowed
    try:
        code = args.func(args)
    except BrokenPipeError:
        code = _stdout_closed()
    except Exception as exc:
        said = _said(exc)
        if said is None:
            raise  # not a refusal: a bug, with its traceback
        code = said
    sys.exit(code)


def _said(exc: Exception) -> int | None:
    """A refusal (with its fixes), no runtime or a failed request, said in one line; None for
    anything else. (The client is imported here: --help never needs it.)"""
    from tatolab._control.client import NoRuntime, RequestFailed

    if isinstance(exc, ControlError):
        from tatolab._control.words import render

        return fail(render(exc))
    if isinstance(exc, (NoRuntime, RequestFailed)):
        return fail(str(exc))
    return None


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
