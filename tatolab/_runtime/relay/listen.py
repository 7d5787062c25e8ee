"""The relay's listeners and the accept loop: one moq server per kind (loopback, public), the
viewer page beside the loopback one, and every network session that came in.

Every session must carry a token (``?jwt=``, checked by ``tokens.Keeper``) before it is accepted:
one without, or with a token that is expired, revoked, for another output or not ours, is
rejected as unauthorized (the client sees the session refused, never a silent wait) and a log
line names the path and why (never the token). An accepted session is given its token's view
(``scopes.py``) as what it may read, and nothing to publish into; it is cut when its token expires,
is revoked or the key is rotated.

A listener opens its TCP port (the viewer page) before its UDP one; if either cannot be bound
(taken by another program or user) nothing is served there and ``problem`` says why, so ``url``
never names a port someone else answers on.

Ownership: ``Listeners`` lives on the relay thread's loop; its listener map and ``problem`` are
written there only (``problems`` is read by ``url``/``streams``: one key set or removed at a time). Its reader list
(and the bytes sent to readers that left) is also read by ``graph`` and by a revoke on the
runtime's loop, so both are kept under ``lock``.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from tatolab._runtime.relay import cert as certs
from tatolab._runtime.relay import config, viewer
from tatolab._runtime.relay.bridge import Bridge
from tatolab._runtime.relay.refusals import Refusals
from tatolab._runtime.relay.scopes import Scopes, View
from tatolab._runtime.relay.tokens import Grant, Keeper, Refused, token_of

CUT = 403  # the code network readers are cut with when an output stops being theirs to read
UNAUTHORIZED = 401  # moq's unauthorized: a client gives up instead of dialling again
# a session's transport counters are gone once it closes, so they are read this often while it lives:
# a closed session's count misses at most this much of its end
SAMPLE_S = 0.25


@dataclass
class Listener:
    kind: str  # "loopback" | "public"
    host: str
    server: Any  # moq.Server
    task: asyncio.Task | None = None
    page: asyncio.base_events.Server | None = None  # the viewer page (loopback only)


@dataclass
class Reader:
    """One network session: the listener it came in on and the path it asked for."""

    kind: str
    path: str
    session: Any  # moq.Session
    grant: Grant | None = None
    bytes_sent: int = 0

    def sent(self) -> int:
        """Bytes sent to this session so far (the last count read while it lived, once closed)."""
        try:
            stats = self.session.stats()
        except Exception:  # a closed session has nothing more to say
            return self.bytes_sent
        self.bytes_sent = max(self.bytes_sent, stats.bytes_sent or 0)
        return self.bytes_sent


def _udp_bind_error(host: str, port: int) -> OSError | None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc
    return None


class Listeners:
    def __init__(self, bridge: Bridge, port: int, keeper: Keeper, scopes: Scopes, levels: Callable[[], dict],
                 page_outputs: Callable[[Grant], dict], page_socket: socket.socket | None = None) -> None:
        self.bridge = bridge
        self.port = port
        self.page_socket = page_socket  # the loopback TCP port, held while no page serves on it (config.hold)
        self.keeper = keeper
        self.scopes = scopes
        self.levels = levels  # path -> private|public of each output served now
        self.page_outputs = page_outputs
        self.open: dict[str, Listener] = {}  # relay thread only
        self.problems: dict[str, str] = {}  # kind -> why that wanted listener is not serving
        self.refusals = Refusals()  # counted and said in summary: relay thread only
        self.lock = threading.Lock()  # guards readers and closed_bytes
        self.readers: list[Reader] = []
        self.closed_bytes: dict[str, int] = {}

    def network(self, path: str) -> tuple[int, int]:
        """(readers of ``path`` now, bytes sent to its readers ever); any thread."""
        with self.lock:
            readers = [r for r in self.readers if r.path == path]
            closed = self.closed_bytes.get(path, 0)
        return len(readers), closed + sum(r.sent() for r in readers)

    def _cannot(self, kind: str, host: str, proto: str, exc: BaseException) -> None:
        where = f"{proto} {config.bind(host, self.port)}"
        text = str(exc) or type(exc).__name__
        if proto == "udp" and not isinstance(exc, OSError):  # moq says only "failed to bind": ask the system why
            exc = _udp_bind_error(host, self.port) or exc
            text = str(exc) or text
        held = getattr(exc, "errno", None) == errno.EADDRINUSE
        cause = f"{where} is held by another program or user" if held else f"cannot listen on {where}: {text}"
        self.problems[kind] = f"{cause} ({kind}); set TATOLAB_MOQ_PORT to a free port and restart tatolabd"
        self.bridge.say("error", f"MoQ relay: not serving: {self.problems[kind]}", port=self.port, host=host)

    async def start(self, kind: str, host: str, cert: certs.Certificate) -> None:
        import moq

        page = None
        if kind == "loopback":  # its TCP port first: never a page of someone else's on our URL
            try:
                page = await viewer.serve(host, self.port, self.page_outputs, self.keeper, self.page_socket)
                self.page_socket = None  # the page's now: closed with it
            except OSError as exc:
                self._cannot(kind, host, "tcp", exc)
                return
        server = moq.Server(config.bind(host, self.port), tls_cert=[str(cert.cert)], tls_key=[str(cert.key)])
        try:
            await server.__aenter__()
        except Exception as exc:
            if page is not None:
                page.close()
                self.page_socket = config.hold(self.port)
            self._cannot(kind, host, "udp", exc)
            return
        self.problems.pop(kind, None)
        listener = self.open[kind] = Listener(kind, host, server, page=page)
        listener.task = self.bridge.loop.create_task(self._accept(listener))
        self.bridge.say("info", f"MoQ relay serving {'public' if kind == 'public' else 'exposed'} outputs on udp "
                        f"{server.local_addr}; certificate sha-256 {cert.fingerprint} (until "
                        f"{cert.not_after:%Y-%m-%d %H:%M} UTC)", fingerprint=cert.fingerprint,
                        listen=server.local_addr)

    async def stop(self, kind: str) -> None:
        listener = self.open.pop(kind)
        if listener.page is not None:
            listener.page.close()
            self.page_socket = config.hold(self.port)  # ours again at once, for the next page
        if listener.task is not None:
            listener.task.cancel()
        await listener.server.__aexit__(None, None, None)
        self.cut(lambda r: r.kind == kind)

    def release(self) -> None:
        """Let the held port go (the relay closes)."""
        if self.page_socket is not None:
            self.page_socket.close()
            self.page_socket = None

    async def stop_all(self) -> None:
        for kind in list(self.open):
            await self.stop(kind)

    def cut(self, which: Callable[[Reader], bool], code: int = CUT) -> int:
        """End the sessions of the readers ``which`` picks, at once; how many."""
        with self.lock:
            cut = [r for r in self.readers if which(r)]
        for reader in cut:
            try:
                reader.session.cancel(code)
            except Exception:
                pass
        return len(cut)

    def cut_unauthorized(self, why: str = "revoked, expired or of a rotated key", since_ns: int | None = None) -> int:
        """Cut every session whose token was revoked, expired or signed with a rotated key; the log says how
        many, and how long after ``since_ns`` (the revoke's monotonic time) they were cut."""
        now = time.time()

        def void(reader: Reader) -> bool:
            grant = reader.grant
            if grant is None:
                return False
            try:
                if grant.kid != self.keeper.kid or (grant.expires is not None and grant.expires <= now):
                    return True
                return grant.id is not None and self.keeper.register.get(grant.id, {}).get("revoked", True)
            except Exception:
                return True

        cut = self.cut(void, UNAUTHORIZED)
        if cut and since_ns is not None:
            after_ms = (time.monotonic_ns() - since_ns) / 1e6
            self.bridge.say("info", f"MoQ relay: cut {cut} session(s) {after_ms:.1f} ms after their token was {why}",
                            sessions=cut, after_ms=after_ms)
        return cut

    def _refused(self, kind: str, path: str, reason: str) -> None:
        """Count a refusal; say it at once only when it is its listener's first of that reason
        this interval, the rest in one line at the interval's end (refusals.py): a flood of bad
        sessions must not flood the log."""
        line, summary_at = self.refusals.refused(kind, path, reason, time.monotonic())
        if line is not None:
            self.bridge.say("warning", line)
        if summary_at is not None:
            delay = max(0.0, summary_at - time.monotonic())
            self.bridge.loop.call_later(delay, self._summarize, kind)

    def _summarize(self, kind: str) -> None:
        line = self.refusals.summary(kind, time.monotonic())
        if line is not None:
            self.bridge.say("warning", line, refused=self.refusals.total.get(kind, 0))

    def _expire(self, reader: Reader) -> None:
        self.bridge.say("info", f"MoQ relay: a session reading {reader.path or '/'} ended: its token expired")
        self.cut(lambda r: r is reader, UNAUTHORIZED)

    def check(self, kind: str, raw_path: str, query: str | None) -> Grant:
        """The grant of a session asking for ``raw_path`` on the ``kind`` listener, or Refused."""
        grant = self.keeper.check(token_of(query), raw_path)
        level = self.levels().get(grant.scope)
        if level is not None and not grant.covers(grant.scope, level):
            raise Refused("the token is for public outputs and this one is private", grant.scope)
        if kind == "public" and grant.level == "private" and level != "public":
            raise Refused("this output is not public", grant.scope)
        return grant

    @staticmethod
    async def _sample(reader: Reader) -> None:
        while True:
            await asyncio.sleep(SAMPLE_S)
            reader.sent()

    async def _accept(self, listener: Listener) -> None:
        async def one(request: Any) -> None:
            path = request.path.strip("/")[:200]
            try:
                grant = self.check(listener.kind, request.path, request.query)
            except Refused as refused:
                self._refused(listener.kind, refused.path or path or "/", refused.reason)
                try:
                    await request.reject(UNAUTHORIZED)
                except Exception:
                    pass
                return
            # what it reads: its token's view; on the public listener, public outputs only
            view: View = self.scopes.acquire(grant.scope, grant.level == "public" or listener.kind == "public")
            try:
                request.set_publish(view.origin)
                request.set_consume(None)  # it publishes nothing into this relay
                session = await request.accept()
            except Exception:
                self.scopes.release(view)
                return
            reader = Reader(listener.kind, path, session, grant)
            with self.lock:
                self.readers.append(reader)
            ends = None
            if grant.expires is not None:  # moq-token's rule: exp holds for the whole session
                delay = grant.expires - time.time()
                ends = self.bridge.loop.call_later(max(0.0, delay), self._expire, reader)
            sampler = self.bridge.loop.create_task(self._sample(reader))
            try:
                await session.closed()
            except Exception:
                pass  # how a reader left changes nothing here
            finally:
                sampler.cancel()
                if ends is not None:
                    ends.cancel()
                self.scopes.release(view)
                sent = reader.sent()
                with self.lock:
                    if reader in self.readers:
                        self.readers.remove(reader)
                        self.closed_bytes[path] = self.closed_bytes.get(path, 0) + sent

        pending: set[asyncio.Task] = set()
        try:
            async for request in listener.server:
                task = self.bridge.loop.create_task(one(request))
                pending.add(task)
                task.add_done_callback(pending.discard)
        finally:
            for task in pending:
                task.cancel()
