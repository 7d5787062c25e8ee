"""``python -m tatolab._runtime.foxglove.main``: the Foxglove server, in a process of its own the
runtime starts from its own install (service.py), as it starts the MoQ relay's encoder: frames are
read, encoded and sent here, never on the runtime's loop or in its process.

The runtime writes JSON lines on stdin: first ``{"token", "host", "port", "pool"}``, then
``{"outputs": {address: ring base}}`` each time the exposed outputs change, and the answers to
this process's asks: ``{"reader": address, "index": n}`` (or ``"error"``). This process writes
JSON lines on stdout: ``{"event": "serving", "port": n}`` once it listens (or ``"error"``),
``{"event": "claim", "address": a}`` / ``{"event": "release", "address": a, "index": n}`` for a
ring's reader record, and ``{"event": "clients", "clients": n}`` when that changes. Stdin closing
ends it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from typing import Any

from tatolab._host.orphans import die_with_parent
from tatolab._runtime.foxglove.live import Lender, Live
from tatolab._runtime.foxglove.server import Hub

_out_lock = threading.Lock()


def _say(event: dict[str, Any]) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def main() -> int:
    die_with_parent()
    config = json.loads(sys.stdin.readline() or "{}")
    from tatolab._surfaces import pool as surfaces

    surfaces.configure(config["pool"])
    hub = Hub("tatolab", config["token"])
    lender = Lender(_say)
    live = Live(hub, lender, config["pool"])
    stop = asyncio.Event()

    async def run() -> None:
        loop = asyncio.get_running_loop()

        def read_stdin() -> None:
            for line in sys.stdin:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if "outputs" in message:
                    loop.call_soon_threadsafe(live.sync, dict(message["outputs"]))
                elif "reader" in message:
                    lender.answered(message)
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=read_stdin, name="tatolab-foxglove-stdin", daemon=True).start()
        try:
            await hub.serve(config.get("host", "127.0.0.1"), int(config.get("port", 0)),
                            lambda port: _say({"event": "serving", "port": port, "pid": os.getpid()}), stop)
        except OSError as exc:
            _say({"event": "error", "error": f"cannot listen on port {config.get('port')}: {exc.strerror or exc}"})

    try:
        asyncio.run(run())
    finally:
        live.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
