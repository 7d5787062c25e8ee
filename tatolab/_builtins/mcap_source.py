"""McapSource: one channel of an MCAP recording played into the stream, paced by its log times.

Several McapSource nodes of one stream over one file share an anchor: the first to start writes
the monotonic time playback starts at into a file beside the stream's rings (gone with them), the
others read it, so their bags leave in the step they were recorded in (a restarted node rejoins it).
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from tatolab._links import ring
from tatolab._recorder.compressed import Decoder
from tatolab._recorder.reading import Channel, Recording, bag_of
from tatolab._sdk import builtins as described
from tatolab._sdk.builtins import McapSourceConfig, implements
from tatolab._surfaces.frame import VideoFrame
from tatolab._surfaces.pool import PoolExhausted
from tatolab._sdk.context import RuntimeContextLimitedAccess

LEAD_NS = 300_000_000  # the first node starts playback this far ahead, so the others can join at its start
_ANCHOR = struct.Struct("<q")
_FAST_BEHIND = 8  # speed 0: the slowest reader may lag this many bags before the next waits


def _anchor(ring_base: str, node_name: str, path: Path, start_at: int) -> int:
    """The monotonic ns playback of ``path`` starts at, for every McapSource of this stream."""
    prefix = ring_base[:ring_base.rfind(f"{node_name}+")]
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"{prefix}replay#{digest}"
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # the first node is writing its 8 bytes
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                data = os.read(fd, _ANCHOR.size)
            finally:
                os.close(fd)
            if len(data) == _ANCHOR.size:
                return _ANCHOR.unpack(data)[0]
            time.sleep(0.01)
        return start_at
    try:
        os.write(fd, _ANCHOR.pack(start_at))
    finally:
        os.close(fd)
    return start_at


@implements
class McapSource(described.McapSource):
    def __init__(self, config: McapSourceConfig) -> None:
        self.config = config
        self.recording: Recording | None = None
        self.channel: Channel | None = None
        self.stopping = threading.Event()  # run() replaces it with ctx.stopping
        self.sent = self.dropped = 0
        self.decoder: Decoder | None = None  # a CompressedVideo channel's: its packets back to frames

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        config = self.config
        self.recording = Recording(Path(config.path))  # RecordingError: the path, what it is, the fix
        self.channel = self.recording.channel(config.address)  # RecordingError: the channels found
        # the built-in's own ring (the host's OutputPort, tatolab/_host/ports.py): its stream's files sit beside it
        port: Any = ctx.outputs._ports["bags"]
        writer = port.writer
        self.ring_base = writer.base
        self.anchor = _anchor(writer.base, ctx.node, Path(config.path), time.monotonic_ns() + LEAD_NS)
        ctx.log.info(f"replaying {self.channel.topic} from {config.path}",
                     channel=self.channel.topic, kind=self.channel.kind, messages=self.channel.count,
                     indexed=self.recording.indexed)

    def run(self, ctx: RuntimeContextLimitedAccess) -> None:
        """On the node host's thread (execution="thread"): the replay, until it ends or ctx.stopping."""
        self.stopping = ctx.stopping
        self._play(ctx)

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.recording is not None:
            self.recording.close()

    def _window(self) -> tuple[int, int]:
        assert self.recording is not None
        first, last = self.recording.first_ns, self.recording.last_ns
        start = first + int((self.config.start or 0) * 1e9)
        end = last if self.config.end is None else min(last, first + int(self.config.end * 1e9))
        return start, end

    def _messages(self, start: int, end: int) -> Iterator[tuple[int, bytes]]:
        assert self.recording is not None and self.channel is not None
        if self.channel.kind != "compressed":
            return self.recording.messages(self.channel, start, end)
        return self._from_keyframe(start, end)

    def _from_keyframe(self, start: int, end: int) -> Iterator[tuple[int, bytes]]:
        """A CompressedVideo channel from ``start``: decoding begins at the keyframe before it (the
        packets between only decoded, not sent), so the first frame sent is whole."""
        assert self.recording is not None and self.channel is not None
        self.decoder = None  # each pass decodes afresh from its keyframe
        key = self.recording.keyframe_before(self.channel, start)
        for log_time, data in self.recording.messages(self.channel, start if key is None else key, end):
            if log_time < start:
                self._pictures(bag_of(self.channel, data)[0])
                continue
            yield log_time, data

    def _pictures(self, packet: dict[str, Any]) -> list[Any]:
        if self.decoder is None:
            self.decoder = Decoder(packet["codec"])
        return self.decoder.decode(packet)

    def _play(self, ctx: RuntimeContextLimitedAccess) -> None:
        speed = self.config.speed
        start, end = self._window()
        span = max(1, end - start)
        epoch = self.anchor  # the monotonic time this pass's `start` plays at
        passes = 0
        while not self.stopping.is_set():
            sent_before = self.sent
            for log_time, data in self._messages(start, end):
                if speed > 0:
                    due = epoch + int((log_time - start) / speed)
                    delay = due - time.monotonic_ns()
                    if delay > 0 and self.stopping.wait(delay / 1e9):
                        return
                elif not self._readers_keep_up():
                    return
                if self.stopping.is_set():
                    return
                self._send(ctx, data)
            passes += 1
            if not self.config.loop or self.sent == sent_before:
                break
            epoch += int(span / speed) if speed > 0 else 0
        ctx.log.info(f"replay of {self.channel.topic if self.channel else '?'} done: {self.sent} bags",
                     bags=self.sent, dropped=self.dropped, passes=passes)
        ctx.report(replayed=self.sent, dropped=self.dropped, done=True)

    def _readers_keep_up(self) -> bool:
        """Speed 0: wait for a reader, then for the slowest to come within a few bags."""
        while not self.stopping.is_set():
            try:
                readers = [r for r in ring.read_counters(self.ring_base)["readers"] if r["active"]]
            except ring.RingError:
                return False
            if readers and max((r["behind"] or 0) for r in readers) < _FAST_BEHIND:
                return True
            self.stopping.wait(0.002)
        return False

    def _send(self, ctx: RuntimeContextLimitedAccess, data: bytes) -> None:
        assert self.channel is not None
        bag, pixels = bag_of(self.channel, data)
        if self.channel.kind == "compressed":  # each picture the packet completes, as a frame
            keys = {k: v for k, v in bag.items() if k not in ("codec", "data", "extradata", "keyframe", "encoder",
                                                             "width", "height", "duration_ns")}
            for picture in self._pictures(bag):
                height, width = picture.shape[:2]
                self._send_frame(ctx, {**keys, "width": width, "height": height, "format": "rgba8"},
                                 picture.reshape(-1).data)
            return
        if pixels is None:
            ctx.outputs.write("bags", bag)
            self.sent += 1
            return
        self._send_frame(ctx, bag, pixels)

    def _send_frame(self, ctx: RuntimeContextLimitedAccess, bag: dict[str, Any], pixels: Any) -> None:
        frame = None
        for _ in range(50 if self.config.speed == 0 else 1):
            try:
                frame = VideoFrame.allocate(bag["width"], bag["height"], bag["format"], bag["timestamp_ns"])
                break
            except PoolExhausted:
                self.stopping.wait(0.01)
        if frame is None:
            self.dropped += 1
            ctx.log.every(100, "warning", "frame dropped: the surface pool is full", dropped=self.dropped)
            return
        frame._memory()[:] = pixels
        frame.fields.update({k: v for k, v in bag.items() if k not in ("width", "height", "format", "timestamp_ns")})
        ctx.outputs.write("bags", frame)
        self.sent += 1
