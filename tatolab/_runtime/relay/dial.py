"""The relay's outgoing connections, on the relay thread's loop: URL links reading other
runtimes' outputs into rings of ours (pulls), and this machine's public outputs published into a
relay on the internet (``tatolab relay join``). Each dials again with backoff.

Ownership: ``Dialer`` lives on the relay thread; its pull map and upstream task are touched there
only. ``upstream_state`` is a string written there and read by ``relay status`` on the runtime's
loop (one assignment, no lock needed); so is each count in ``missed``, read by ``graph``. Each
link's state is told to the runtime's loop (``on_pull_state``), which owns the links.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from tatolab._links.ring import RingWriter
from tatolab._runtime.relay import ordered
from tatolab._runtime.relay.bridge import Bridge
from tatolab._runtime.relay.pulls import Pull, PullId, split_url
from tatolab._runtime.relay.tokens import redact
from tatolab._runtime.relay.wanted import TRACK

NOT_SERVED_S = 3.0  # a URL link says why it waits once its broadcast is not there this long
BACKOFF_S = (0.5, 10.0)  # a URL link dials again after 0.5 s, doubling up to 10 s
KEEP_US = 10_000_000  # a URL link takes every bag up to 10 s late; its input's profile then decides
REFUSED = ("refused by the relay (unauthorized): the URL's token is missing, expired, revoked or for another "
           "output; ask its owner for a new URL")
MISSING = "the moq-rs package is missing from the runtime's install; reinstall the runtime with its extras " \
          "(tatolab[runtime]) and restart tatolabd"


class Dialer:
    def __init__(self, bridge: Bridge, on_pull_state: Callable[[Pull, str | None], None]) -> None:
        self.bridge = bridge
        self.on_pull_state = on_pull_state  # called on the runtime's loop
        self.pulls: dict[PullId, tuple[Pull, asyncio.Task]] = {}
        # bags each URL link's relay never handed it (its reading fell behind, or a group came late)
        self.missed: dict[PullId, int] = {}
        self.upstream_task: asyncio.Task | None = None
        self.upstream_state = "not joined"

    # -- URL links --------------------------------------------------------------------------------

    def sync_pulls(self, wanted: dict[PullId, Pull]) -> None:
        for pull_id in list(self.pulls):
            pull, task = self.pulls[pull_id]
            if wanted.get(pull_id) != pull:
                task.cancel()
                del self.pulls[pull_id]
                self.missed.pop(pull_id, None)
        for pull_id, pull in wanted.items():
            if pull_id not in self.pulls:
                self.pulls[pull_id] = (pull, self.bridge.loop.create_task(self._pull(pull)))

    def _pull_state(self, pull: Pull, waiting: str | None) -> None:
        self.bridge.main.call_soon_threadsafe(self.on_pull_state, pull, waiting)

    async def _pull(self, pull: Pull) -> None:
        """Read the broadcast at ``pull.url`` into ``pull.base``, dialling again with backoff."""
        try:
            import moq
        except ImportError:
            self._pull_state(pull, MISSING)
            return
        writer = RingWriter(pull.base)
        delay = BACKOFF_S[0]
        loop = self.bridge.loop
        shown = redact(pull.url)
        while True:
            try:
                async with moq.Client(pull.url, tls_fingerprints=[pull.fingerprint] if pull.fingerprint else None,
                                      websocket_enabled=False, reconnect=False) as client:
                    delay = BACKOFF_S[0]
                    reading = loop.create_task(self._read_broadcast(pull, client, writer))
                    closed = loop.create_task(client.session.closed())
                    try:
                        done, _ = await asyncio.wait({reading, closed}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        reading.cancel()
                        closed.cancel()
                    for task in done:
                        task.result()  # its error, if any, says why
                    raise ConnectionError("the connection closed")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if refused(exc):  # a new token is needed: dialling again would only be refused again
                    self._pull_state(pull, f"{shown}: {REFUSED}")
                    return
                text = str(exc) or type(exc).__name__
                self._pull_state(pull, f"cannot read {shown}: {text}; dialling again in {delay:g} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_S[1])

    async def _read_broadcast(self, pull: Pull, client: Any, writer: RingWriter) -> None:
        import moq

        while True:
            available = self.bridge.loop.create_task(client.announced_broadcast(pull.path).available())
            try:
                done, _ = await asyncio.wait({available}, timeout=NOT_SERVED_S)
                if not done:
                    self._pull_state(pull, f"{redact(pull.url)} does not serve {pull.path} (not exposed there, or its "
                                     "stream is not running); waiting for it")
                broadcast = await available
            finally:
                available.cancel()
            # a staleness allowance: without one, a group that arrives after a newer one is skipped
            track = await broadcast.subscribe_track(TRACK, moq.Subscription(max_age_us=KEEP_US))
            self._pull_state(pull, None)
            async for frame, missed in ordered.bags(track):
                if missed:
                    self.missed[pull.id] = self.missed.get(pull.id, 0) + missed
                writer.write(frame.payload)
            self._pull_state(pull, f"{redact(pull.url)} stopped serving {pull.path}; waiting for it")

    # -- a relay on the internet (relay join) -------------------------------------------------------

    def set_upstream(self, url: str | None, public: Any) -> None:
        """Publish ``public`` (the public origin; None before the first exposure) into ``url``."""
        if self.upstream_task is not None:
            self.upstream_task.cancel()
            self.upstream_task = None
        if url is None:
            self.upstream_state = "not joined"
        elif public is not None:  # else: from the first exposure on
            self.upstream_task = self.bridge.loop.create_task(self._publish_upstream(url, public))

    async def _publish_upstream(self, url: str, public: Any) -> None:
        """Announce the public outputs to the relay at ``url``; its subscribers' demand reaches our
        tracks like a local reader's. Dials again with backoff when the relay goes away."""
        import moq

        dial, pinned, _path = split_url(url)
        shown = redact(dial)
        delay = BACKOFF_S[0]
        while True:
            self.upstream_state = f"connecting to {shown}"
            try:
                async with moq.Client(dial, tls_fingerprints=[pinned] if pinned else None, websocket_enabled=False,
                                      reconnect=False, publish=public) as client:
                    delay = BACKOFF_S[0]
                    self.upstream_state = "connected"
                    self.bridge.say("info", f"MoQ relay: publishing this machine's public outputs to {shown}")
                    await client.session.closed()
                    raise ConnectionError("the connection closed")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if refused(exc):
                    self.upstream_state = (f"refused by {shown} (unauthorized): its token is missing, expired or not "
                                           "allowed to publish there; join again with a valid one")
                    self.bridge.say("error", f"MoQ relay: {self.upstream_state}")
                    return
                text = str(exc) or type(exc).__name__
                self.upstream_state = f"cannot reach {shown}: {text}; dialling again in {delay:g} s"
                self.bridge.say("warning", f"MoQ relay: {self.upstream_state}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_S[1])

    def close(self) -> None:
        self.set_upstream(None, None)
        for _pull, task in self.pulls.values():
            task.cancel()
        self.pulls.clear()


def refused(exc: BaseException) -> bool:
    """Whether a relay refused the session for its token (moq's unauthorized, HTTP 401/403)."""
    try:
        from moq.errors import is_auth
    except ImportError:
        return False
    return is_auth(exc)
