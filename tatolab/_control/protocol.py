"""The control protocol: one JSON object per line over the runtime's Unix socket.

A request is ``{"op": NAME, "args": {...}}``. The runtime answers with one
``{"ok": true, "result": ...}`` or a refusal ``{"ok": false, "code": CODE, "error": MESSAGE,
"fixes": [{"op", "args", "does"}], "details": {...}}`` (errors.py). An operation that talks
(an attached load, dev, tap, logs) keeps the connection open after its answer and sends
``{"event": ...}`` lines until it ends; closing the connection ends it (an attached stream
is unloaded). ``operations`` lists every operation with its JSON Schemas (operations.py).

A request that adds ``"notices": true`` may get ``{"notice": {...}}`` lines before its answer:
``{"waiting": true, "place": 3, "in_line": 7, "at_once": 2, "what": "load"}`` while a load waits
its turn (runtime/line.py), ``{"waiting": false, ...}`` when its turn came or while it still
works; each says the runtime is on it, so a client waits on rather than time out.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

MAX_LINE = 16 * 1024 * 1024  # the longest line either side reads (the server's and clients' limit)


class ProtocolError(Exception):
    pass


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), default=str).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"not a JSON object: {exc}") from None
    except RecursionError:
        raise ProtocolError("not a request: JSON nested too deeply to read") from None
    if not isinstance(message, dict):
        raise ProtocolError("a request must be a JSON object like {\"op\": \"streams\", \"args\": {}}")
    return message
