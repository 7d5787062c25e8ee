"""Argument types for numbers: a value out of range is refused by argparse with what is allowed
(``logs --tail -5``, ``exchange --timeout -1``), never passed on to fail later."""

from __future__ import annotations

import argparse
import math

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Callable


def whole_number(low: int, allowed: str) -> Callable[[str], int]:
    """A whole number of at least ``low``; ``allowed`` says so in words for the refusal."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed: give {allowed}")
        return value
    return parse


def seconds(allowed: str) -> Callable[[str], float]:
    """A number of seconds, 0 or more (0 is "never" where the option says so)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 <= value < math.inf:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed: give {allowed}")
        return value
    return parse
