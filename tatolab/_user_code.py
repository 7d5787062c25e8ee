"""Running a project's code (its modules, its stream function, a node class's import) and
turning what it raises into one error for the person who wrote it: a Tatolab error says
where in their code it was raised, anything else shows their traceback without our frames."""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable, Iterator

import tatolab
from tatolab._errors import TatolabError

_PACKAGE_DIR = os.path.dirname(os.path.abspath(tatolab.__file__))


@contextlib.contextmanager
def user_code(
    refused: Callable[[str], BaseException], raised: Callable[[BaseException, str], BaseException]
) -> Iterator[None]:
    """Run the block as the user's code. A ``TatolabError`` it raises (the SDK refusing what
    the code asked) becomes ``refused(message and where)``; anything else but Ctrl-C becomes
    ``raised(the exception, its traceback in the user's frames)``. Both replace the original
    (``from None``): the user reads their own code's story, once."""
    try:
        yield
    except TatolabError as exc:
        raise refused(with_location(str(exc), exc)) from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise raised(exc, formatted(exc)) from None


def _is_internal(filename: str) -> bool:
    return filename.startswith("<frozen importlib") or os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)


def formatted(exc: BaseException) -> str:
    """The traceback, without the frames of Tatolab and importlib."""
    te = traceback.TracebackException.from_exception(exc)
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if not _is_internal(f.filename)])
    return "".join(te.format()).rstrip()


def with_location(message: str, exc: BaseException) -> str:
    """Append where in the user's code a Tatolab error was raised."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_internal(f.filename)]
    if not frames:
        return message
    frame = frames[-1]
    code = f": {frame.line.strip()}" if frame.line else ""
    return f"{message}\n  (at {frame.filename}, line {frame.lineno}{code})"
