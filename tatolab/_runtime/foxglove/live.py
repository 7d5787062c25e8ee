"""The runtime's exposed outputs as live channels: one feeding thread per output.

An output's feed borrows a reader record of its ring from the runtime (``Lender``: the runtime
claims it, as for a recording) to see its first bags, from which its channel is described and
advertised, then gives it back; it borrows one again while a client subscribes to the channel,
and reads the ring until the last one leaves. A video channel is encoded (H.264, one encoder
for all its subscribers, newest frame each time: it skips, never lags) only meanwhile, and
starts afresh at a keyframe when a client subscribes. Each message's log time is the bag's
origin (when its path began, ../../_links/latency.py), on the Unix clock.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

from tatolab import _bags
from tatolab._links.ring import RingError, RingReader
from tatolab._runtime.foxglove import channels
from tatolab._runtime.foxglove.protocol import Channel
from tatolab._runtime.foxglove.server import Hub
from tatolab._runtime.relay.video import Encoder

WAIT_S = 0.25
READ_RUN = 64


class Lender:
    """Reader records asked of the runtime (``say`` writes a line to it) and its answers."""

    def __init__(self, say: Callable[[dict[str, Any]], None]) -> None:
        self.say = say
        self._answers: dict[str, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def claim(self, address: str, stop: threading.Event) -> int | None:
        """A reader record of ``address``'s ring; None when stopped first or the runtime refuses."""
        with self._lock:
            answers = self._answers.setdefault(address, queue.Queue())
        self.say({"event": "claim", "address": address})
        while not stop.is_set():
            try:
                answer = answers.get(timeout=WAIT_S)
            except queue.Empty:
                continue
            if "index" in answer:
                return int(answer["index"])
            return None
        return None

    def release(self, address: str, index: int) -> None:
        self.say({"event": "release", "address": address, "index": index})

    def answered(self, answer: dict[str, Any]) -> None:
        with self._lock:
            answers = self._answers.setdefault(str(answer.get("reader")), queue.Queue())
        answers.put(answer)


class Feed(threading.Thread):
    """One output: described from its first bags, read while subscribed."""

    def __init__(self, hub: Hub, lender: Lender, address: str, base: str, pool: str, channel_id: int) -> None:
        super().__init__(name=f"tatolab-foxglove {address}", daemon=True)
        self.hub, self.lender, self.address, self.base, self.pool = hub, lender, address, base, pool
        self.channel_id = channel_id
        self.stopping = threading.Event()
        self.wake = threading.Event()  # its subscribers changed
        self.kind: str | None = None
        self.channel: Channel | None = None
        self.to_wall = time.time_ns() - time.monotonic_ns()
        self._reader: RingReader | None = None
        self._index: int | None = None
        self._encoder: Encoder | None = None
        self._restart = False  # a client subscribed: the encoder starts again at a keyframe
        self.count = 0  # subscriptions to its channel

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def subscribers_changed(self, count: int) -> None:
        if count > self.count:
            self._restart = True
        self.count = count
        self.wake.set()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                watched = self.hub.subscribers.get(self.channel_id, 0) > 0
                if self.channel is not None and not watched:
                    self._give_back()
                    self.wake.wait()
                    self.wake.clear()
                    continue
                if self._reader is None and not self._borrow(start="beginning" if self.channel is None else "now"):
                    return
                try:
                    self._describe() if self.channel is None else self._feed()
                except RingError as exc:  # the stream stopped under us: the runtime's next sync drops it
                    self.hub.send_all(_status(f"{self.address}: {exc}"))
                    self.stopping.wait()
        finally:
            self._give_back()
            if self.channel is not None:
                self.hub.unadvertise(self.channel_id)

    def _borrow(self, start: str) -> bool:
        index = self.lender.claim(self.address, self.stopping)
        if index is None:
            return False
        self._index = index
        self._reader = RingReader(self.base, index, "ordered", start=start, origins=True)
        return True

    def _give_back(self) -> None:
        if self._encoder is not None:
            self._encoder.dispose()
            self._encoder = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._index is not None:
            self.lender.release(self.address, self._index)
            self._index = None

    def _describe(self) -> None:
        """Its first bags (those still in the ring, or the next ones) say what channel it is."""
        assert self._reader is not None
        run = self._reader.read_many(READ_RUN)
        bags = []
        for payload, *_ in run:
            try:
                bags.append(_bags.decode(payload))
            except ValueError:
                continue
        if not bags:
            self._reader.wait(WAIT_S)
            return
        self.kind = channels.kind_of(bags[-1])
        self.channel = channels.describe(self.channel_id, self.address, self.kind, bags[-8:])
        self.hub.advertise(self.channel)

    def _feed(self) -> None:
        assert self._reader is not None and self.kind is not None
        reader = self._reader
        run = reader.read_many(READ_RUN)
        if not run:
            reader.wait(WAIT_S)
            return
        if self.kind in ("video", "image"):  # frames: the newest, skipping what came meanwhile
            if len(run) > 1:
                reader.discard(len(run) - 1)  # skipped: counted as dropped, as the MoQ relay's encoder does
            run = run[-1:]
        for payload, publish_ns, origin_ns, _origin in run:
            log_ns = (origin_ns or publish_ns) + self.to_wall
            if self.kind == "video":
                self._encode(payload, log_ns)
                continue
            try:
                bag = _bags.decode(payload)
            except ValueError:
                continue
            message = channels.plain_message(self.kind, bag, self.address)
            if message is not None:
                self.hub.publish(self.channel_id, log_ns, message)

    def _encode(self, payload: bytes, log_ns: int) -> None:
        if self._encoder is None:
            self._encoder = Encoder(self.pool)
        if self._restart:
            self._restart = False
            self._encoder.close()  # opens again at the next frame: a keyframe for the new client
        try:
            packets = self._encoder.encode(payload)
        except RuntimeError as exc:  # no H.264 encoder opens here: said once, then this channel idles
            self.hub.send_all(_status(f"{self.address}: {exc}"))
            self.stopping.wait()
            return
        for data, stamp_us, _keyframe in packets:
            self.hub.publish(self.channel_id, log_ns, channels.video_message(data, stamp_us * 1000, self.address))


def _status(text: str) -> str:
    from tatolab._runtime.foxglove import protocol

    return protocol.status(2, text)


class Live:
    """Every exposed output a feed; ``sync`` with the runtime's set of them."""

    def __init__(self, hub: Hub, lender: Lender, pool: str) -> None:
        self.hub, self.lender, self.pool = hub, lender, pool
        self.feeds: dict[str, Feed] = {}
        self._ids = iter(range(1, 1 << 31))
        hub.on_subscribers = self._subscribers

    def sync(self, outputs: dict[str, str]) -> None:
        """``outputs``: address -> ring base, every output to serve from now on."""
        for address, feed in list(self.feeds.items()):
            if outputs.get(address) != feed.base:
                feed.stop()
                del self.feeds[address]
        for address, base in outputs.items():
            if address not in self.feeds:
                feed = Feed(self.hub, self.lender, address, base, self.pool, next(self._ids))
                self.feeds[address] = feed
                feed.start()

    def _subscribers(self, channel_id: int, count: int) -> None:
        for feed in self.feeds.values():
            if feed.channel_id == channel_id:
                feed.subscribers_changed(count)

    def stop(self) -> None:
        for feed in self.feeds.values():
            feed.stop()
        for feed in self.feeds.values():
            feed.join(5)
