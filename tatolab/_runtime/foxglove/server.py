"""The WebSocket server the Foxglove app connects to: channels advertised to every client, each
message sent to the clients subscribed to its channel.

Who may connect: a client whose URL carries the server's token (``?token=...``, as
``tatolab foxglove`` prints it); any other is refused in the handshake (HTTP 403), before it
is told a channel. So another user on this machine who finds the port reads nothing.

Why not the foxglove-sdk package's server: it accepts every client that asks for its
subprotocol, with no hook to check a token, and binds a TCP port of its own that any local user
can reach, so no check in front of it could keep them out. The protocol is the SDK's (protocol.py),
spoken here over the ``websockets`` library.

Threads: the server runs on its own event loop (the process's main thread); sources (live.py,
player.py) call ``Hub.publish``, ``advertise`` and ``unadvertise`` from their own threads.
A client slower than its channels loses messages (its queue holds QUEUE messages), never slows
a source or another client.
"""

from __future__ import annotations

import asyncio
import hmac
import threading
from http import HTTPStatus
from typing import Any, Callable
from urllib.parse import parse_qs, quote, urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from tatolab._runtime.foxglove import protocol
from tatolab._runtime.foxglove.protocol import Channel, PlaybackControl

QUEUE = 256  # messages waiting for one client; past that its oldest data is dropped
APP = "https://app.foxglove.dev/"


def links(host: str, port: int, token: str) -> tuple[str, str]:
    """(the WebSocket URL with its token, the Foxglove app's link that opens it)."""
    url = f"ws://{host}:{port}/?token={token}"
    return url, f"{APP}?ds=foxglove-websocket&ds.url={quote(url, safe='')}"


class _Client:
    def __init__(self, connection: ServerConnection) -> None:
        self.connection = connection
        self.subscriptions: dict[int, int] = {}  # subscription id -> channel id
        self.queue: asyncio.Queue[str | bytes] = asyncio.Queue()
        self.dropped = 0

    def send(self, message: str | bytes, data: bool = False) -> None:
        if data and self.queue.qsize() >= QUEUE:
            self.dropped += 1
            return
        self.queue.put_nowait(message)

    async def sending(self) -> None:
        while True:
            await self.connection.send(await self.queue.get())


class Hub:
    """The channels and the clients; thread-safe where a source calls it."""

    def __init__(self, name: str, token: str, *, playback: tuple[int, int] | None = None,
                 on_control: Callable[[PlaybackControl], None] | None = None,
                 on_subscribers: Callable[[int, int], None] | None = None) -> None:
        self.name = name
        self.token = token
        self.playback = playback
        self.on_control = on_control
        self.on_subscribers = on_subscribers  # (channel id, subscribers now), on the loop
        self.session = f"tatolab-{threading.get_native_id()}"
        self.channels: dict[int, Channel] = {}
        self.clients: set[_Client] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        self.subscribers: dict[int, int] = {}  # channel id -> subscriptions to it (read by sources)

    # --- from the sources' threads ---------------------------------------------------------------

    def advertise(self, channel: Channel) -> None:
        self._call(self._advertise, channel)

    def unadvertise(self, channel_id: int) -> None:
        self._call(self._unadvertise, channel_id)

    def publish(self, channel_id: int, log_time_ns: int, payload: bytes) -> None:
        self._call(self._publish, channel_id, log_time_ns, payload)

    def send_all(self, message: str | bytes) -> None:
        self._call(self._send_all, message)

    def _call(self, function: Callable[..., None], *args: Any) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(function, *args)
            except RuntimeError:
                pass  # the loop closed meanwhile: the server is stopping

    # --- on the loop -----------------------------------------------------------------------------

    def _advertise(self, channel: Channel) -> None:
        self.channels[channel.id] = channel
        self._send_all(protocol.advertise([channel]))

    def _unadvertise(self, channel_id: int) -> None:
        if self.channels.pop(channel_id, None) is None:
            return
        for client in self.clients:
            for sub, ch in list(client.subscriptions.items()):
                if ch == channel_id:
                    del client.subscriptions[sub]
        self._count(channel_id)
        self._send_all(protocol.unadvertise([channel_id]))

    def _publish(self, channel_id: int, log_time_ns: int, payload: bytes) -> None:
        for client in self.clients:
            for sub, ch in client.subscriptions.items():
                if ch == channel_id:
                    client.send(protocol.message_data(sub, log_time_ns, payload), data=True)

    def _send_all(self, message: str | bytes) -> None:
        for client in self.clients:
            client.send(message)

    def _count(self, channel_id: int) -> None:
        count = sum(1 for c in self.clients for ch in c.subscriptions.values() if ch == channel_id)
        if count:
            self.subscribers[channel_id] = count
        else:
            self.subscribers.pop(channel_id, None)
        if self.on_subscribers is not None:
            self.on_subscribers(channel_id, count)

    def _check(self, connection: ServerConnection, request: Request) -> Response | None:
        given = parse_qs(urlsplit(request.path).query).get("token", [""])[0]
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return connection.respond(HTTPStatus.FORBIDDEN, "this server needs the token its link carries "
                                                            "(the foxglove command of tatolab prints it)\n")
        return None

    async def _session(self, connection: ServerConnection) -> None:
        client = _Client(connection)
        client.send(protocol.server_info(self.name, self.session, self.playback))
        if self.channels:
            client.send(protocol.advertise(list(self.channels.values())))
        self.clients.add(client)
        sender = asyncio.ensure_future(client.sending())
        try:
            async for message in connection:
                if isinstance(message, str):
                    self._on_text(client, message)
                elif message[:1] == bytes([protocol.PLAYBACK_CONTROL]) and self.on_control is not None:
                    try:
                        self.on_control(protocol.parse_playback_control(message))
                    except ValueError:
                        pass
        except ConnectionClosed:
            pass
        finally:
            sender.cancel()
            self.clients.discard(client)
            for channel_id in set(client.subscriptions.values()):
                self._count(channel_id)

    def _on_text(self, client: _Client, text: str) -> None:
        import json

        try:
            message = json.loads(text)
        except ValueError:
            return
        touched: set[int] = set()
        if message.get("op") == "subscribe":
            for sub in message.get("subscriptions", []):
                channel_id = int(sub.get("channelId", -1))
                if channel_id in self.channels:
                    client.subscriptions[int(sub["id"])] = channel_id
                    touched.add(channel_id)
                else:
                    client.send(protocol.status(1, f"no channel {channel_id}"))
        elif message.get("op") == "unsubscribe":
            for sub in message.get("subscriptionIds", []):
                channel_id = client.subscriptions.pop(int(sub), -1)
                if channel_id >= 0:
                    touched.add(channel_id)
        for channel_id in touched:
            self._count(channel_id)

    async def serve(self, host: str, port: int, ready: Callable[[int], None], stop: asyncio.Event) -> None:
        """Serve until ``stop``; ``ready(port)`` once listening (OSError: the port is held)."""
        self.loop = asyncio.get_running_loop()
        async with serve(self._session, host, port, subprotocols=list(protocol.SUBPROTOCOLS),  # type: ignore[arg-type]
                         process_request=self._check, max_size=1 << 20, compression=None) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            ready(self.port)
            await stop.wait()
