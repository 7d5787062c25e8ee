"""The relay's listeners and the accept loop: one moq server per kind (loopback, public), the
viewer page beside the loopback one, and every network session that came in.

Ownership: ``Listeners`` lives on the relay thread's loop; its listener map is touched there only.
Its reader list (and the bytes sent to readers that left) is also read by ``graph`` on the
runtime's loop, so both are kept under ``lock``.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, Callable

from tatolab._runtime.relay import cert as certs
from tatolab._runtime.relay import config, viewer
from tatolab._runtime.relay.bridge import Bridge

CUT = 403  # the code network readers are cut with when an output stops being theirs to read


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
    bytes_sent: int = 0

    def sent(self) -> int:
        try:
            stats = self.session.stats()
        except Exception:  # a closed session has nothing more to say
            return self.bytes_sent
        self.bytes_sent = max(self.bytes_sent, stats.bytes_sent or 0)
        return self.bytes_sent


class Listeners:
    def __init__(self, bridge: Bridge, port: int, origins: dict[str, Any],
                 page_outputs: Callable[[], dict]) -> None:
        self.bridge = bridge
        self.port = port
        self.origins = origins  # kind -> moq.OriginProducer, what each kind of listener serves
        self.page_outputs = page_outputs
        self.open: dict[str, Listener] = {}  # relay thread only
        self.lock = threading.Lock()  # guards readers and closed_bytes
        self.readers: list[Reader] = []
        self.closed_bytes: dict[str, int] = {}

    def network(self, path: str) -> tuple[int, int]:
        """(readers of ``path`` now, bytes sent to its readers ever); any thread."""
        with self.lock:
            readers = [r for r in self.readers if r.path == path]
            closed = self.closed_bytes.get(path, 0)
        return len(readers), closed + sum(r.sent() for r in readers)

    async def start(self, kind: str, host: str, cert: certs.Certificate) -> None:
        import moq

        server = moq.Server(config.bind(host, self.port), tls_cert=[str(cert.cert)], tls_key=[str(cert.key)],
                            publish=self.origins[kind])
        try:
            await server.__aenter__()
        except Exception as exc:
            self.bridge.say("error", f"MoQ relay: cannot listen on udp {config.bind(host, self.port)} ({kind}): "
                            f"{exc}. Set TATOLAB_MOQ_PORT to a free port (and TATOLAB_MOQ_PUBLIC to this machine's "
                            "addresses), then restart tatolabd", port=self.port, host=host)
            return
        listener = self.open[kind] = Listener(kind, host, server)
        listener.task = self.bridge.loop.create_task(self._accept(listener))
        if kind == "loopback":
            try:
                listener.page = await viewer.serve(host, self.port, self.page_outputs)
            except OSError as exc:
                self.bridge.say("warning", f"MoQ relay: no viewer page on tcp {config.bind(host, self.port)}: {exc}")
        self.bridge.say("info", f"MoQ relay serving {'public' if kind == 'public' else 'exposed'} outputs on udp "
                        f"{server.local_addr}; certificate sha-256 {cert.fingerprint} (until "
                        f"{cert.not_after:%Y-%m-%d %H:%M} UTC)", fingerprint=cert.fingerprint,
                        listen=server.local_addr)

    async def stop(self, kind: str) -> None:
        listener = self.open.pop(kind)
        if listener.page is not None:
            listener.page.close()
        if listener.task is not None:
            listener.task.cancel()
        await listener.server.__aexit__(None, None, None)
        self.cut(lambda r: r.kind == kind)

    async def stop_all(self) -> None:
        for kind in list(self.open):
            await self.stop(kind)

    def cut(self, which: Callable[[Reader], bool]) -> None:
        """End the sessions of the readers ``which`` picks, at once."""
        with self.lock:
            cut = [r for r in self.readers if which(r)]
        for reader in cut:
            try:
                reader.session.cancel(CUT)
            except Exception:
                pass

    async def _accept(self, listener: Listener) -> None:
        async def one(request: Any) -> None:
            path = request.path.strip("/")
            try:
                session = await request.accept()
            except Exception:
                return
            reader = Reader(listener.kind, path, session)
            with self.lock:
                self.readers.append(reader)
            try:
                await session.closed()
            except Exception:
                pass  # how a reader left changes nothing here
            finally:
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
