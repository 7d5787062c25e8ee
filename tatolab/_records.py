"""The log record: one JSON object per line, the same shape everywhere.

Node processes write them, the runtime files them under ``<project>/.streamlib/logs/``
and prints them in attached terminals.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

LEVELS = ("debug", "info", "warning", "error", "critical")


def make_record(
    message: str,
    *,
    level: str = "info",
    stream: str | None = None,
    node: str | None = None,
    fields: dict[str, Any] | None = None,
    ts_ns: int | None = None,
) -> dict[str, Any]:
    return {
        "ts_ns": time.monotonic_ns() if ts_ns is None else ts_ns,
        "time": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
        "level": level,
        "stream": stream,
        "node": node,
        "message": message,
        "fields": fields or {},
    }


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, default=repr, ensure_ascii=False)


def format_for_terminal(record: dict[str, Any]) -> str:
    when = record.get("time", "")[11:23]
    where = record.get("node") or "runtime"
    stream = record.get("stream")
    if stream:
        where = f"{stream}/{where}"
    level = record.get("level", "info")
    fields = record.get("fields") or {}
    extra = "".join(f" {k}={v!r}" for k, v in fields.items() if k != "traceback")
    line = f"{when} {level:<7} {where}: {record.get('message', '')}{extra}"
    if "traceback" in fields:
        line += "\n" + str(fields["traceback"]).rstrip()
    return line
