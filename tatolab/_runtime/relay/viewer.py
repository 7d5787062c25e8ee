"""The viewer page: served by the relay over HTTP on loopback, on the relay's port number (TCP),
while the relay listens. It lists the exposed outputs and shows one live, bags as a table, reading
it over WebTransport from the relay with the certificate pinned (viewer/index.html)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Callable

FOLDER = Path(__file__).with_name("viewer")
MAX_REQUEST = 8192
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".json": "application/json"}
NOT_BUILT = ("<!doctype html><meta charset=utf-8><title>tatolab viewer</title><p>The viewer page's MoQ client "
             "(moq-viewer.js, which every install of tatolab carries) is missing from this install: install "
             "tatolab again, then reload this page.</p>")


def page(path: str, outputs: Callable[[], dict]) -> tuple[int, str, bytes]:
    """(status, content type, body) for GET ``path``."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    bundle = FOLDER / "moq-viewer.js"
    if path in ("/", "/index.html"):
        if not bundle.exists():
            return 200, TYPES[".html"], NOT_BUILT.encode()
        return 200, TYPES[".html"], (FOLDER / "index.html").read_bytes()
    if path == "/moq-viewer.js" and bundle.exists():
        return 200, TYPES[".js"], bundle.read_bytes()
    if path == "/outputs.json":
        return 200, TYPES[".json"], json.dumps(outputs()).encode()
    return 404, "text/plain; charset=utf-8", b"not found\n"


async def serve(host: str, port: int, outputs: Callable[[], dict]) -> asyncio.base_events.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, _, rest = head[:MAX_REQUEST].decode("latin-1").partition(" ")
            target = rest.split(" ", 1)[0]
            if method != "GET":
                status, kind, body = 405, "text/plain; charset=utf-8", b"only GET\n"
            else:
                status, kind, body = page(target, outputs)
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}[status]
            writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                         "Cache-Control: no-store\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port, limit=MAX_REQUEST)
