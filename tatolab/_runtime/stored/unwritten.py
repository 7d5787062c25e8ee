"""Writes the runtime could not make (a full disk, no descriptor left): counted per file,
said once when they start failing and once when they work again, never raised.

A log line or a record that cannot be written must never end a node's supervisor, a stop
or a start; `tatolab streams` lists what is being lost (in the ``streams`` operation's answer).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TypedDict


class WriteFailure(TypedDict, total=False):
    path: str
    error: str | None
    lost: int  # writes lost so far
    failing: bool  # still failing (else: it writes there again)


@dataclass
class Failure:
    path: str
    error: str
    count: int = 1


_failing: dict[str, Failure] = {}
_recovered: dict[str, int] = {}  # writes lost to files that work again


def reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def failed(path: os.PathLike | str, exc: OSError) -> bool:
    """Count one lost write to ``path``; True for the first of a run of failures."""
    key = str(path)
    found = _failing.get(key)
    if found is not None:
        found.count += 1
        found.error = reason(exc)
        return False
    _failing[key] = Failure(key, reason(exc))
    tell(f"cannot write {key}: {reason(exc)}; what goes there is counted and dropped until it can be written "
         "(free space on that disk, or raise `ulimit -n`)")
    return True


def worked(path: os.PathLike | str) -> int:
    """``path`` can be written again; returns how many writes to it were lost meanwhile."""
    found = _failing.pop(str(path), None)
    if found is None:
        return 0
    _recovered[found.path] = _recovered.get(found.path, 0) + found.count
    tell(f"{found.path} can be written again; {found.count} write(s) to it were lost")
    return found.count


def report() -> list[WriteFailure]:
    """What is failing now, and what was lost to files that work again."""
    rows: list[WriteFailure] = [
        {"path": f.path, "error": f.error, "lost": f.count, "failing": True} for f in _failing.values()
    ]
    rows += [{"path": p, "lost": n, "failing": False} for p, n in _recovered.items() if p not in _failing]
    return rows


def tell(message: str) -> None:
    """One line on the runtime's stderr, which may itself be gone."""
    try:
        print(f"tatolabd: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def reset() -> None:
    _failing.clear()
    _recovered.clear()
