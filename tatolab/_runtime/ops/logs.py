"""`logs`: reading or following a stream's log, in one request."""

from __future__ import annotations

from pathlib import Path
from typing import AsyncGenerator, Literal, TypedDict

from tatolab._control import paths
from tatolab._control.errors import ControlError
from tatolab._control.operations import Events
from tatolab._safe_fs import UnsafePath, check_private_dir
from tatolab._runtime.runtime import Runtime
from tatolab._runtime.stored.logread import LogFilter, read_log
from tatolab._runtime.ops import op


class Reading(TypedDict):
    event: Literal["reading"]
    stream: str
    log: str  # the live log file


class Line(TypedDict):
    event: Literal["line"]
    line: str  # one record, as the JSON line written in the file


class End(TypedDict):
    event: Literal["end"]


@op("logs")
async def logs(
    runtime: Runtime,
    stream: str,
    node: str | None = None,
    level: str | None = None,
    since: str | None = None,
    tail: int | None = None,
    follow: bool = False,
) -> Events[Reading, Line | End]:
    """The records of ``stream``'s log, oldest first, across its rotated files: only ``node``'s,
    only at ``level`` (debug, info, warning, error, critical) or above, only since ``since``
    (30s, 10m, 2h, 1d or an ISO time), only the last ``tail`` (default: all; 20 when following).
    With ``follow`` it goes on with every new record until the client hangs up; else ``end``."""
    keep = LogFilter.of(node, level, since)
    row = next((r for r in runtime.list_streams() if r["name"] == stream), None)
    if row is None:
        raise runtime.unknown(stream)
    if not row.get("project") or row["project"] == "-":
        raise ControlError(f"stream {stream} has no project folder, so it has no log file")
    path = paths.stream_log(row["project"], row["name"])
    for folder in (path.parent.parent, path.parent):  # .streamlib and its logs: never read through a link
        try:
            check_private_dir(folder, "a folder of the stream's log", "Remove it (`rm` removes a link itself).")
        except FileNotFoundError:
            break
        except UnsafePath as exc:
            raise ControlError(str(exc)) from None
    return log_events(stream, path, keep, tail=tail, follow=follow)


def log_events(stream: str, path: Path, keep: LogFilter, *, tail: int | None,
               follow: bool) -> AsyncGenerator[Reading | Line | End, None]:
    """The events of a ``logs`` answer; `tatolab logs --dir` reads through this too, with no runtime."""
    if tail is not None and (isinstance(tail, bool) or not isinstance(tail, int) or tail < 0):
        raise ControlError(f"tail must be a whole number, 0 or more (the last N records), not {tail!r}",
                           code="bad_value", details={"argument": "tail"})
    if not follow and not path.exists():
        raise ControlError(f"stream {stream} has written no log yet (expected {path})", code="no_log")
    return _events(stream, path, keep, tail=tail, follow=follow)


async def _events(stream: str, path: Path, keep: LogFilter, *, tail: int | None,
                  follow: bool) -> AsyncGenerator[Reading | Line | End, None]:
    yield {"event": "reading", "stream": stream, "log": str(path)}
    async for line in read_log(path, keep, tail=tail, follow=follow):
        yield {"event": "line", "line": line.decode("utf-8", "replace")}
    yield {"event": "end"}
