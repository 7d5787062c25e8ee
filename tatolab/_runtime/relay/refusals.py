"""Refused network sessions, counted and said in summary: a flood of them cannot wipe the log.

A refusal is said at once, with its path cut to ``PATH_SHOWN`` characters, when its listener has
not said that reason (its words less the numbers and quoted parts an attacker chooses) in
``REASON_EVERY_S``. Every other refusal is only counted, by reason, and said in one summary line
per listener at the end of an interval: ``EVERY_S`` after the first one counted, doubling while the
flood goes on (up to ``MOST_EVERY_S``), back to ``EVERY_S`` once a whole interval passes without
one. So a flood of any size, whatever paths it asks for, writes one line every 10 minutes at most
once it has lasted an hour (plus one per reason every 10 minutes). moq's server does not say a
session's peer address, so the listener (loopback or public) is the source a summary names.

Plain state, the clock passed in: the relay thread calls it (tatolab/_runtime/relay/listen.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

EVERY_S = 10.0
MOST_EVERY_S = 600.0
REASON_EVERY_S = 600.0
PATH_SHOWN = 80
_NUMBERS = re.compile(r"\d+")


def _kind_of(reason: str) -> str:
    """A reason less what the client chose in it: a quoted part (an algorithm's name) onwards, numbers."""
    return _NUMBERS.sub("_", reason.split(" '", 1)[0])[:120]


def shown_path(path: str) -> str:
    """A path as a log line shows it: cut, its length said, so a long one cannot bloat the line."""
    return path if len(path) <= PATH_SHOWN else f"{path[:PATH_SHOWN]}... ({len(path)} characters)"


@dataclass
class _Interval:
    began: float
    length: float
    counted: dict[str, int] = field(default_factory=dict)  # reason -> refusals not said one by one


class Refusals:
    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s = every_s
        self.total: dict[str, int] = {}  # listener -> sessions refused since the relay started
        self._open: dict[str, _Interval] = {}
        self._next: dict[str, tuple[float, float]] = {}  # listener -> (when its last interval ended, next length)
        self._said: dict[tuple[str, str], float] = {}  # (listener, reason's kind) -> when last said at once

    def refused(self, kind: str, path: str, reason: str, now: float) -> tuple[str | None, float | None]:
        """Count one refusal: (the line to say now, or None; when ``summary`` is due, or None when a
        call is already due)."""
        self.total[kind] = self.total.get(kind, 0) + 1
        key = (kind, _kind_of(reason))
        if now - self._said.get(key, -REASON_EVERY_S) >= REASON_EVERY_S:
            if len(self._said) > 256:
                self._said.clear()
            self._said[key] = now
            return f"MoQ relay refused a session for {shown_path(path)} ({kind}): {reason}", None
        interval = self._open.get(kind)
        due = None
        if interval is None:
            ended, length = self._next.get(kind, (-MOST_EVERY_S, self.every_s))
            if now - ended >= length:  # a whole quiet interval: the flood is over, start short again
                length = self.every_s
            interval = self._open[kind] = _Interval(now, length)
            due = now + length
        counted = interval.counted  # by the reason's kind: a client varying its words adds no entries
        counted[key[1]] = counted.get(key[1], 0) + 1
        return None, due

    def summary(self, kind: str, now: float) -> str | None:
        """The line for ``kind``'s interval once it has ended (None: none open, or not over yet)."""
        interval = self._open.get(kind)
        if interval is None or now - interval.began < interval.length:
            return None
        del self._open[kind]
        self._next[kind] = (now, min(interval.length * 2, MOST_EVERY_S))
        n = sum(interval.counted.values())
        reasons = "; ".join(f"{count} {reason}" for reason, count in
                            sorted(interval.counted.items(), key=lambda item: -item[1])[:5])
        return (f"MoQ relay refused {n} more session{'s' if n != 1 else ''} on the {kind} listener in "
                f"{now - interval.began:.0f} s, not logged one by one ({reasons}); "
                f"{self.total[kind]} refused there since the relay started")
