"""Reading a stream's log: what `logs` answers, from the files, filtered, followed across rotations.

The runtime's ``logs`` operation reads through here, and so does `tatolab logs --dir` when no
runtime is asked; both get the same lines. The files are JSON Lines (tatolab/_runtime/stored/logs.py
writes them); a line is passed on as it was written, the filters read it as a record.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, AsyncIterator, BinaryIO

from tatolab import _records
from tatolab._control.errors import ControlError
from tatolab._control.paths import LOG_FILES_KEPT, log_files, rotated_log

FOLLOW_POLL_S = 0.1  # following looks for new lines this often: a record shows well within a second
FOLLOW_TAIL = 20  # records a follow shows from before it started, unless ``tail`` says otherwise

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``10m``, ``2h``, ``30s``, ``1d`` ago, or an ISO time (local time when it names no zone)."""
    now = now or datetime.now(timezone.utc)
    match = _DURATION.match(text)
    if match:
        try:
            return now - timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
        except OverflowError:  # 99999999999999999999d: before the year 1
            raise ControlError(
                f"since {text!r} reaches back further than any time can be written; give a duration such as "
                "30s, 10m, 2h or 1d (at most a few thousand years), or an ISO time (2025-05-01T14:30)",
                code="bad_value", details={"argument": "since"}) from None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ControlError(
            f"since {text!r} is neither a duration (30s, 10m, 2h, 1d) nor an ISO time (2025-05-01T14:30)",
            code="bad_value", details={"argument": "since"},
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # the user's local time
    return when


def level_at_least(level: str) -> set[str]:
    if level not in _records.LEVELS:
        raise ControlError(f"level {level!r} is not a level; choose one of {', '.join(_records.LEVELS)}",
                           code="bad_value", details={"argument": "level"})
    return set(_records.LEVELS[_records.LEVELS.index(level):])


def record_matches(
    record: dict[str, Any], *, node: str | None, levels: set[str] | None, since: datetime | None
) -> bool:
    if node is not None and record.get("node") != node:
        return False
    if levels is not None and record.get("level", "info") not in levels:
        return False
    if since is not None:
        try:
            when = datetime.fromisoformat(record.get("time", ""))
        except ValueError:
            return False
        if when < since:
            return False
    return True


@dataclass(frozen=True)
class LogFilter:
    node: str | None = None
    levels: set[str] | None = None
    since: datetime | None = None

    @classmethod
    def of(cls, node: str | None, level: str | None, since: str | None) -> "LogFilter":
        """From an operation's arguments; a ControlError names the one that is not understood."""
        return cls(node, level_at_least(level) if level else None, parse_since(since) if since else None)

    def keeps(self, line: bytes) -> bool:
        try:
            record = json.loads(line)
        except ValueError:
            return False
        return isinstance(record, dict) and record_matches(record, node=self.node, levels=self.levels,
                                                           since=self.since)


class LineBuffer:
    """Whole lines from appended bytes; an unterminated last line waits for its end."""

    def __init__(self) -> None:
        self.partial = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self.partial + chunk
        lines = data.split(b"\n")
        self.partial = lines.pop()
        return [line for line in lines if line.strip()]


def read_lines(path: Path) -> list[bytes]:
    """Complete lines of a file; an unterminated last line (a writer cut short) is skipped."""
    try:
        return LineBuffer().feed(path.read_bytes())
    except FileNotFoundError:
        return []


async def follow_lines(
    path: Path,
    current: BinaryIO | None = None,
    buffer: LineBuffer | None = None,
    *,
    poll_s: float = FOLLOW_POLL_S,
    kept: int = LOG_FILES_KEPT,
) -> AsyncIterator[bytes]:
    """Whole lines appended to ``path`` after what ``current`` has read, across rotations, forever.

    Without ``current`` it waits for the file to appear and reads it from its start.
    """
    buffer = buffer or LineBuffer()
    while current is None:
        try:
            current = open(path, "rb")
        except FileNotFoundError:
            await asyncio.sleep(poll_s)
    inode = os.fstat(current.fileno()).st_ino
    try:
        while True:
            chunk = current.read()
            if chunk:
                for line in buffer.feed(chunk):
                    yield line
                continue
            try:
                info = os.stat(path)
            except FileNotFoundError:
                await asyncio.sleep(poll_s)
                continue
            if info.st_ino == inode:
                if info.st_size < current.tell():  # truncated in place: start over
                    current.seek(0)
                    buffer = LineBuffer()
                await asyncio.sleep(poll_s)
                continue
            # Rotated: our file is now x.jsonl.1 (or older). Finish it, then read the ones
            # rotated after it, then go on with the new live file.
            for line in buffer.feed(current.read()):
                yield line
            current.close()
            newer: list[Path] = []
            for index in range(1, kept):
                candidate = rotated_log(path, index)
                try:
                    if os.stat(candidate).st_ino == inode:
                        break
                except FileNotFoundError:
                    break
                newer.append(candidate)
            for missed in reversed(newer):
                for line in read_lines(missed):
                    yield line
            current = open(path, "rb")
            inode = os.fstat(current.fileno()).st_ino
            buffer = LineBuffer()
    finally:
        current.close()


async def read_log(path: Path, keep: LogFilter, *, tail: int | None = None, follow: bool = False,
                   poll_s: float = FOLLOW_POLL_S) -> AsyncIterator[bytes]:
    """The lines of the log at ``path`` that ``keep`` keeps: the last ``tail`` of them (all by
    default; ``FOLLOW_TAIL`` when following), then, when following, every new one."""
    if not follow and not path.exists():
        raise FileNotFoundError(path)
    # Read what is there now, the live file through the handle a follow goes on reading.
    lines = [line for p in log_files(path) if p != path for line in read_lines(p)]
    live: BinaryIO | None = None
    buffer = LineBuffer()
    try:
        live = open(path, "rb")
        lines += buffer.feed(live.read())
    except FileNotFoundError:
        pass
    try:
        lines = [line for line in lines if keep.keeps(line)]
        tail = tail if tail is not None else (FOLLOW_TAIL if follow else None)
        if tail is not None:
            lines = lines[-tail:] if tail else []
        for line in lines:
            yield line
        if follow:
            following, live = follow_lines(path, live, buffer, poll_s=poll_s), None
            async for line in following:
                if keep.keeps(line):
                    yield line
    finally:
        if live is not None:
            live.close()
