"""`tatolab graph`, `tap` and `logs`: seeing inside running streams."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from tatolab import _records
from tatolab._records import KEPT_FILES
from tatolab._cli.client import Client
from tatolab._cli.output import fail
from tatolab._words import counted

FOLLOW_POLL_S = 0.1  # -f looks for new lines this often: a record shows well within a second
FOLLOW_TAIL = 20  # records -f shows from before it started, unless --tail says otherwise


# --- graph -------------------------------------------------------------------------------------

def cmd_graph(args: argparse.Namespace) -> int:
    request = {"stream": args.stream} if args.stream else {}
    print(json.dumps(Client().request("graph", **request), indent=2))
    return 0


def trouble_lines(nodes: list[dict[str, Any]]) -> list[str]:
    """One line per node in trouble, for under the ``tatolab streams`` table."""
    lines = []
    for node in nodes:
        restarts = node["restarts"]
        state = "hung" if node.get("hung") else node["state"]
        text = f"{node['stream']}/{node['name']} {state}, restarted {counted(restarts, 'time')}"
        if node.get("last_error"):
            text += f"; last error: {node['last_error'].splitlines()[0]}"
        lines.append(text + f". `tatolab logs --stream {node['stream']} --node {node['name']}` shows more.")
    return lines


# --- tap ---------------------------------------------------------------------------------------

def cmd_tap(args: argparse.Namespace) -> int:
    client = Client()
    try:
        opened = client.request(
            "tap", address=args.address, count=args.count, timeout=args.timeout or None, profile=args.profile
        )
        address = opened["address"]
        started = time.monotonic()
        for event in client.events():
            kind = event.get("event")
            if kind == "bag":
                print(json.dumps({k: event[k] for k in ("n", "ts_ns", "size", "bag")}), flush=True)
            elif kind == "end":
                print(tap_summary(address, event, args.count, time.monotonic() - started), file=sys.stderr)
                short = args.count is not None and event["got"] < args.count
                return 1 if short or event["reason"] == "error" else 0
        return fail("the runtime went away during the tap")
    except KeyboardInterrupt:
        return 130
    finally:
        client.close()  # hanging up releases the tap's reader record


def tap_summary(address: str, end: dict[str, Any], count: int | None, seconds: float) -> str:
    got = end["got"]
    wanted = f" of {count}" if count is not None else ""
    bags = "bag" if (count if count is not None else got) == 1 else "bags"
    line = f"tap: got {got}{wanted} {bags} from {address} in {seconds:.1f} s"
    if end["reason"] == "timeout":
        line += " (timed out)" if got else " (timed out: nothing was written to it meanwhile)"
    elif end["reason"] == "stream stopped":
        line += " (the stream stopped)"
    elif end["reason"] == "error":
        line += f" ({end.get('error')})"
    if end.get("dropped"):
        skipped = end["dropped"]
        line += f"; the tap skipped {counted(skipped, 'bag')}"
    return line


# --- logs --------------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``10m``, ``2h``, ``30s``, ``1d`` ago, or an ISO time (local time when it names no zone)."""
    now = now or datetime.now(timezone.utc)
    match = _DURATION.match(text)
    if match:
        return now - timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since {text!r} is neither a duration (30s, 10m, 2h, 1d) nor an ISO time (2025-05-01T14:30)"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # the user's local time
    return when


def level_at_least(level: str) -> set[str]:
    if level not in _records.LEVELS:
        raise ValueError(f"--level {level!r} is not a level; choose one of {', '.join(_records.LEVELS)}")
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


def log_files(path: Path, kept: int = KEPT_FILES) -> list[Path]:
    """The stream's log files, oldest first: ``x.jsonl.2``, ``x.jsonl.1``, ``x.jsonl``."""
    rotated = [path.with_name(f"{path.name}.{i}") for i in range(kept - 1, 0, -1)]
    return [p for p in rotated + [path] if p.exists()]


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


def follow_lines(
    path: Path,
    current: BinaryIO | None = None,
    buffer: LineBuffer | None = None,
    *,
    poll_s: float = FOLLOW_POLL_S,
    kept: int = KEPT_FILES,
) -> Iterator[bytes]:
    """Whole lines appended to ``path`` after what ``current`` has read, across rotations, forever.

    Without ``current`` it waits for the file to appear and reads it from its start.
    """
    buffer = buffer or LineBuffer()
    while current is None:
        try:
            current = open(path, "rb")
        except FileNotFoundError:
            time.sleep(poll_s)
    inode = os.fstat(current.fileno()).st_ino
    while True:
        chunk = current.read()
        if chunk:
            yield from buffer.feed(chunk)
            continue
        try:
            info = os.stat(path)
        except FileNotFoundError:
            time.sleep(poll_s)
            continue
        if info.st_ino == inode:
            if info.st_size < current.tell():  # truncated in place: start over
                current.seek(0)
                buffer = LineBuffer()
            time.sleep(poll_s)
            continue
        # Rotated: our file is now x.jsonl.1 (or older). Finish it, then read the ones
        # rotated after it, then go on with the new live file.
        yield from buffer.feed(current.read())
        current.close()
        rotated = [path.with_name(f"{path.name}.{i}") for i in range(1, kept)]
        newer: list[Path] = []
        for candidate in rotated:
            try:
                if os.stat(candidate).st_ino == inode:
                    break
            except FileNotFoundError:
                break
            newer.append(candidate)
        for missed in reversed(newer):
            yield from read_lines(missed)
        current = open(path, "rb")
        inode = os.fstat(current.fileno()).st_ino
        buffer = LineBuffer()


def _log_path(args: argparse.Namespace) -> Path:
    if args.dir:
        return Path(args.dir).resolve() / ".streamlib" / "logs" / f"{args.stream}.jsonl"
    return Path(Client().request("stream_log", stream=args.stream)["log"])


def cmd_logs(args: argparse.Namespace) -> int:
    try:
        since = parse_since(args.since) if args.since else None
        levels = level_at_least(args.level) if args.level else None
    except ValueError as exc:
        return fail(str(exc))
    path = _log_path(args)

    def show(line: bytes) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            return
        if not record_matches(record, node=args.node, levels=levels, since=since):
            return
        if args.json:
            sys.stdout.write(line.decode("utf-8", "replace") + "\n")
        else:
            sys.stdout.write(_records.format_for_terminal(record) + "\n")

    if not args.follow and not path.exists():
        return fail(f"stream {args.stream} has written no log yet (expected {path})")
    # Read what is there now, the live file through the handle -f goes on reading.
    lines = [line for p in log_files(path) if p != path for line in read_lines(p)]
    live: BinaryIO | None = None
    buffer = LineBuffer()
    try:
        live = open(path, "rb")
        lines += buffer.feed(live.read())
    except FileNotFoundError:
        pass
    tail = args.tail if args.tail is not None else (FOLLOW_TAIL if args.follow else None)
    if tail is not None:
        lines = [line for line in lines if _matches_line(line, args.node, levels, since)][-tail:] if tail else []
    try:
        for line in lines:
            show(line)
        sys.stdout.flush()
        if not args.follow:
            return 0
        for line in follow_lines(path, live, buffer):
            show(line)
            sys.stdout.flush()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `tatolab logs ... | head`
        sys.stderr.close()
        return 0
    return 0


def _matches_line(line: bytes, node: str | None, levels: set[str] | None, since: datetime | None) -> bool:
    try:
        return record_matches(json.loads(line), node=node, levels=levels, since=since)
    except ValueError:
        return False


# --- registration ------------------------------------------------------------------------------

def register(commands: Any) -> None:
    graph = commands.add_parser("graph", help="print the live graph (nodes, links, counters) as JSON")
    graph.add_argument("--stream", help="only this stream")
    graph.set_defaults(func=cmd_graph)

    tap = commands.add_parser("tap", help="print the bags an output sends, without slowing it")
    tap.add_argument("address", help="<stream>/<node>/<port> (or <machine>/<stream>/<node>/<port>)")
    tap.add_argument("--count", type=int, help="stop after this many bags")
    tap.add_argument("--timeout", type=float, default=10.0, help="stop after this many seconds (default 10; 0: never)")
    tap.add_argument(
        "--profile", choices=("newest", "ordered"), default="newest",
        help="newest (default): the latest bag each time, skipping; ordered: every bag in order until lapped",
    )
    tap.set_defaults(func=cmd_tap)

    logs = commands.add_parser("logs", help="read or follow a stream's log")
    logs.add_argument("--stream", required=True, help="the stream whose log to read")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    logs.add_argument("--node", help="only records of this node")
    logs.add_argument("--level", help="only records at this level or above (debug, info, warning, error, critical)")
    logs.add_argument("--since", help="only records since: 30s, 10m, 2h, 1d, or an ISO time")
    logs.add_argument("--json", action="store_true", help="print the records as JSON lines, unchanged")
    logs.add_argument("--tail", type=int, help="only the last N matching records (default: all; 20 with -f)")
    logs.add_argument("--dir", help="read the log in this project folder without asking the runtime")
    logs.set_defaults(func=cmd_logs)
