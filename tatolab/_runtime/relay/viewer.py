"""The viewer page: served by the relay over HTTP on loopback, on the relay's port number (TCP),
while the relay listens. It lists the outputs its token may read and shows one live, bags as a
table, reading it over WebTransport from the relay with the certificate pinned (viewer/index.html).

The page and ``outputs.json`` need the same token as the relay (the page: ``?jwt=`` in the URL it
is opened with; ``outputs.json``: ``Authorization: Bearer``); the static client (``moq-viewer.js``)
does not. A request whose ``Host`` is not a name this relay serves on loopback is refused (DNS
rebinding: a web page of elsewhere resolving its own name to 127.0.0.1). Nothing is logged per
request, and every answer says ``Referrer-Policy: no-referrer``.

``/open?code=<code>`` is what ``tatolab url --open`` hands a browser (its command line is anyone's
to read): the code is one-use and short-lived (``Keeper.open_code``), and is exchanged only for a
connection from a process of this runtime's own user (``peers.py``); the page then holds the token
itself (a ``<meta name=tatolab-token>``) and drops the spent code from its address.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import socket
import urllib.parse
from pathlib import Path
from typing import Callable, Optional

from tatolab._runtime.relay.peers import peer_uid
from tatolab._runtime.relay.tokens import OPEN_CODE_S, Grant, Keeper, Refused, token_of

FOLDER = Path(__file__).with_name("viewer")
MAX_REQUEST = 8192
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".json": "application/json", ".txt": "text/plain; charset=utf-8"}
NOT_BUILT = ("<!doctype html><meta charset=utf-8><title>tatolab viewer</title><p>The viewer page's MoQ client "
             "(moq-viewer.js, which every install of tatolab carries) is missing from this install: install "
             "tatolab again, then reload this page.</p>")
SPENT = (f"this one-use link was used already or is older than {OPEN_CODE_S:g} s (it opens the page once); "
         "opening the output again (tatolab url, its open option) makes another")
NOT_YOURS = ("this one-use link opens only in a browser of the user who asked for it; open the link "
             "tatolab url prints in your own browser")
TOKEN_META = b'<meta name="tatolab-token" content="%s">\n'
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
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
           421: "Misdirected Request"}

Answer = tuple[int, str, bytes]


def host_ok(host: str | None, port: int) -> bool:
    """Whether ``host`` (a request's Host header) names this page: a loopback name with our port."""
    if not host:
        return False
    return host.strip().lower() in {f"{name}:{port}" for name in LOOPBACK_NAMES}


def page(target: str, headers: dict[str, str], port: int, outputs: Callable[[Grant], dict],
         keeper: Keeper, peer: Callable[[], Optional[int]] = lambda: None) -> Answer:
    """(status, content type, body) for GET ``target`` with ``headers`` (lower-case names);
    ``peer``: the uid of the connection's other end (None: unknown)."""
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
    if path == "/open":
        return opened(parts.query, keeper, peer)
    if path == "/outputs.json":
        auth = headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        try:
            grant = keeper.check(token, "")
        except Refused as refused:
            return 401, TYPES[".json"], json.dumps({"error": refused.reason, "heading": heading(refused.reason)}).encode()
        return 200, TYPES[".json"], json.dumps(outputs(grant)).encode()
    return 404, TYPES[".txt"], b"not found\n"


def opened(query: str, keeper: Keeper, peer: Callable[[], Optional[int]]) -> Answer:
    """The viewer page for a one-use code (``/open?code=``), holding the token the code stands for."""
    if peer() != os.getuid():
        return 403, TYPES[".html"], REFUSED.format(title="link of another user", heading="This link is not yours to open",
                                                   why=html.escape(NOT_YOURS)).encode()
    codes = urllib.parse.parse_qs(query).get("code") or [""]
    token = keeper.redeem(codes[0]) if codes[0] else None
    if token is None:
        return 401, TYPES[".html"], REFUSED.format(title="link used already", heading="This link was used already",
                                                   why=html.escape(SPENT)).encode()
    body = (FOLDER / "index.html").read_bytes()
    head = body.find(b"<title>")
    meta = TOKEN_META % html.escape(token).encode()
    return 200, TYPES[".html"], body[:head] + meta + body[head:]


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


def answer(head: bytes, port: int, outputs: Callable[[Grant], dict], keeper: Keeper,
           peer: Callable[[], Optional[int]] = lambda: None) -> Answer:
    """The answer to one request head (``peer``: the uid of the connection's other end, None: unknown)."""
    try:
        method, target, headers = parse(head)
    except BadRequest as bad:
        return 400, TYPES[".txt"], f"{bad}: refused\n".encode()
    if method != "GET":
        return 405, TYPES[".txt"], b"only GET\n"
    return page(target, headers, port, outputs, keeper, peer)


async def serve(host: str, port: int, outputs: Callable[[Grant], dict], keeper: Keeper,
                held: socket.socket | None = None) -> asyncio.base_events.Server:
    """The viewer page on ``host``:``port``, on the socket ``held`` where one is bound there already
    (the page owns it from now on: closing the page closes it)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            status, kind, body = answer(head[:MAX_REQUEST], port, outputs, keeper,
                                        lambda: peer_uid(writer.get_extra_info("peername"),
                                                         writer.get_extra_info("sockname")))
            writer.write(f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {kind}\r\n"
                         f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
                         "Referrer-Policy: no-referrer\r\nX-Content-Type-Options: nosniff\r\n"
                         "Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    if held is not None:
        return await asyncio.start_server(handle, sock=held, limit=MAX_REQUEST)
    return await asyncio.start_server(handle, host, port, limit=MAX_REQUEST)
