"""The viewer page: served by the relay over HTTP on loopback, on the relay's port number (TCP),
while the relay listens. It lists the outputs its token may read and shows one live, bags as a
table, reading it over WebTransport from the relay with the certificate pinned (viewer/index.html).

The page and ``outputs.json`` need the same token as the relay (the page: ``?jwt=`` in the URL it
is opened with; ``outputs.json``: ``Authorization: Bearer``); the static client (``moq-viewer.js``)
does not. A request whose ``Host`` is not a name this relay serves on loopback is refused (DNS
rebinding: a web page of elsewhere resolving its own name to 127.0.0.1). Nothing is logged per
request, and every answer says ``Referrer-Policy: no-referrer``.
"""

from __future__ import annotations

import asyncio
import html
import json
import urllib.parse
from pathlib import Path
from typing import Callable

from tatolab._runtime.relay.tokens import Grant, Keeper, Refused, token_of

FOLDER = Path(__file__).with_name("viewer")
MAX_REQUEST = 8192
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".json": "application/json", ".txt": "text/plain; charset=utf-8"}
NOT_BUILT = ("<!doctype html><meta charset=utf-8><title>tatolab viewer</title><p>The viewer page's MoQ client "
             "(moq-viewer.js, which every install of tatolab carries) is missing from this install: install "
             "tatolab again, then reload this page.</p>")
REFUSED = ("<!doctype html><meta charset=utf-8><meta name=referrer content=no-referrer>"
           "<title>tatolab viewer: {title}</title><h1>{heading}</h1>"
           "<p id=why>{why}</p><p>A viewer link carries a token (<code>?jwt=...</code>) that says which outputs "
           "it may show. Ask the output's owner for its link: <code>tatolab url &lt;stream&gt;/&lt;node&gt;/"
           "&lt;port&gt;</code> prints it.</p>")
# a refusal's heading, by the start of its reason (tokens.py's words); anything else: not valid here
HEADINGS = (("the token was revoked", "This link was revoked"), ("the token has expired", "This link has expired"),
            ("the URL has no token", "This link is incomplete"), ("the token is too long", "This link is incomplete"),
            ("the token is not a JWT", "This link is incomplete"))


def heading(reason: str) -> str:
    """The page's heading for a refused token: what happened to the link, in a few words."""
    return next((words for start, words in HEADINGS if reason.startswith(start)), "This link does not open here")


class BadRequest(ValueError):
    """A request head this page will not read (two Host headers: which one was meant is unknowable)."""
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           421: "Misdirected Request"}

Answer = tuple[int, str, bytes]


def host_ok(host: str | None, port: int) -> bool:
    """Whether ``host`` (a request's Host header) names this page: a loopback name with our port."""
    if not host:
        return False
    return host.strip().lower() in {f"{name}:{port}" for name in LOOPBACK_NAMES}


def page(target: str, headers: dict[str, str], port: int, outputs: Callable[[Grant], dict],
         keeper: Keeper) -> Answer:
    """(status, content type, body) for GET ``target`` with ``headers`` (lower-case names)."""
    if not host_ok(headers.get("host"), port):
        return 421, TYPES[".txt"], (f"this page answers only as 127.0.0.1:{port} or localhost:{port}\n").encode()
    parts = urllib.parse.urlsplit(target)
    path = parts.path
    bundle = FOLDER / "moq-viewer.js"
    if path == "/moq-viewer.js" and bundle.exists():
        return 200, TYPES[".js"], bundle.read_bytes()
    if path in ("/", "/index.html"):
        try:
            keeper.check(token_of(parts.query), "")
        except Refused as refused:
            said = heading(refused.reason)
            return 401, TYPES[".html"], REFUSED.format(title=said.removeprefix("This ").lower(), heading=said,
                                                       why=html.escape(refused.reason)).encode()
        if not bundle.exists():
            return 200, TYPES[".html"], NOT_BUILT.encode()
        return 200, TYPES[".html"], (FOLDER / "index.html").read_bytes()
    if path == "/outputs.json":
        auth = headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        try:
            grant = keeper.check(token, "")
        except Refused as refused:
            return 401, TYPES[".json"], json.dumps({"error": refused.reason, "heading": heading(refused.reason)}).encode()
        return 200, TYPES[".json"], json.dumps(outputs(grant)).encode()
    return 404, TYPES[".txt"], b"not found\n"


def parse(head: bytes) -> tuple[str, str, dict[str, str]]:
    """(method, target, headers) of an HTTP/1 request head; BadRequest for two Host or
    Authorization headers (RFC 9112 refuses the first; the second is never quietly preferred)."""
    lines = head.decode("latin-1").split("\r\n")
    method, _, rest = lines[0].partition(" ")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            name = name.strip().lower()
            if name in ("host", "authorization") and name in headers:
                raise BadRequest(f"two {name.title()} headers")
            headers[name] = value.strip()
    return method, rest.split(" ", 1)[0], headers


def answer(head: bytes, port: int, outputs: Callable[[Grant], dict], keeper: Keeper) -> Answer:
    """The answer to one request head."""
    try:
        method, target, headers = parse(head)
    except BadRequest as bad:
        return 400, TYPES[".txt"], f"{bad}: refused\n".encode()
    if method != "GET":
        return 405, TYPES[".txt"], b"only GET\n"
    return page(target, headers, port, outputs, keeper)


async def serve(host: str, port: int, outputs: Callable[[Grant], dict], keeper: Keeper) -> asyncio.base_events.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            status, kind, body = answer(head[:MAX_REQUEST], port, outputs, keeper)
            writer.write(f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {kind}\r\n"
                         f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
                         "Referrer-Policy: no-referrer\r\nX-Content-Type-Options: nosniff\r\n"
                         "Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port, limit=MAX_REQUEST)
