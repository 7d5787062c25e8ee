"""How the CLI reports failure: one line on stderr, a non-zero exit."""

from __future__ import annotations

import sys


def fail(message: str, code: int = 1) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code
