"""SpeakerSink: audio played on an output device through PortAudio, at the device's rate.

The input is shaped (tatolab/_sdk/shaping.py) to the device's rate and channels, so anything
that arrives plays. Blocks wait in a queue that the device's callback drains; playing starts once
``latency_ms`` is queued. When the queue runs dry the device plays silence, the underrun is
counted (``metrics.underruns`` in ``tatolab graph``, through ``Tally``) and playing starts again once the queue
holds ``latency_ms`` again. A producer faster than the device (a file played, a clock that runs
fast) fills the queue to ``latency_ms`` plus ``MAX_BEHIND_MS``; then the node reads no faster
than the device plays, so the rest waits on the ordered link, which drops and counts what it
cannot hold, as for any slow reader. Only a device that stops taking audio for ``PUT_WAIT_S``
makes the queue lose its oldest audio (counted as ``overruns``).

With no output device (or no PortAudio) the node waits for one (tatolab/_builtins/waiting.py): one
line saying what is missing, ``waiting`` in ``tatolab graph``, a look every ``RECHECK_S`` on the
node's own thread; what arrives meanwhile is read and not played (``metrics.unplayed_ms``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from tatolab._builtins.devices import device_if_there
from tatolab._builtins.ending import end_node
from tatolab._builtins.tally import Tally
from tatolab._builtins.waiting import RECHECK_S, Waiting
from tatolab._sdk import builtins as described
from tatolab._sdk.audio import AudioBlock
from tatolab._sdk.builtins import SpeakerConfig, implements
from tatolab._sdk.context import RuntimeContextLimitedAccess

MAX_BEHIND_MS = 500
PUT_WAIT_S = 1.0  # the longest a block waits for room in the queue
CALL_S = 0.25  # process() returns after about this long, so the watchdog sees calls end


def window_ms_for(rate: int) -> int:
    """A window of a whole number of samples at ``rate``, 10 ms where it can be."""
    for ms in (10, 20, 40, 50, 100, 200, 1000):
        if rate * ms % 1000 == 0:
            return ms
    return 1000


class PlayQueue:
    """Samples waiting to play, filled by process() and drained by the device's callback."""

    def __init__(self, channels: int, start_frames: int, max_frames: int) -> None:
        self.channels = channels
        self.start_frames = start_frames
        self.max_frames = max_frames
        self.parts: deque[np.ndarray] = deque()
        self.offset = 0  # frames of parts[0] already played
        self.frames = 0
        self.playing = False
        self.lock = threading.Lock()
        self.room = threading.Condition(self.lock)  # pull() makes room for a waiting put()

    def put(self, samples: np.ndarray, wait_s: float = 0.0) -> int:
        """Queue ``samples``, waiting up to ``wait_s`` for the device to make room; the frames
        dropped from the front to stay within ``max_frames`` after that."""
        with self.room:
            self.room.wait_for(lambda: self.frames + len(samples) <= self.max_frames, timeout=wait_s)
            self.parts.append(samples)
            self.frames += len(samples)
            dropped = 0
            while self.frames > self.max_frames and self.parts:
                excess = self.frames - self.max_frames
                left = len(self.parts[0]) - self.offset
                if left <= excess:
                    self.parts.popleft()
                    self.offset = 0
                    gone = left
                else:
                    self.offset += excess
                    gone = excess
                self.frames -= gone
                dropped += gone
            return dropped

    def pull(self, out: np.ndarray) -> bool:
        """Fill ``out`` (frames, channels); False when it ran dry (the rest is silence)."""
        wanted = len(out)
        with self.lock:
            if not self.playing:
                if self.frames < self.start_frames:
                    out.fill(0)
                    return True  # still filling before playing: not an underrun
                self.playing = True
            done = 0
            while done < wanted and self.parts:
                head = self.parts[0]
                take = min(wanted - done, len(head) - self.offset)
                out[done:done + take] = head[self.offset:self.offset + take]
                done += take
                self.offset += take
                self.frames -= take
                if self.offset == len(head):
                    self.parts.popleft()
                    self.offset = 0
            if done:
                self.room.notify_all()
            if done < wanted:
                out[done:].fill(0)
                self.playing = False  # refill to latency before playing again
                return False
            return True


@implements
class SpeakerSink(described.SpeakerSink):
    def __init__(self, config: SpeakerConfig) -> None:
        self.config = config
        self.stream: Any = None
        self.queue: PlayQueue | None = None
        self.tally: Tally | None = None
        self.stopping = False

    idle_ms = RECHECK_S * 1000  # while it waits for a device, the node host calls idle between bags

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        self.waiting = Waiting(ctx)
        self.next_look = 0.0
        self.unplayed_ms = 0.0
        self._open_if_there(ctx, fresh=False)

    def idle(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.stream is None and time.monotonic() >= self.next_look:
            self._open_if_there(ctx, fresh=True)

    def _open_if_there(self, ctx: RuntimeContextLimitedAccess, *, fresh: bool) -> bool:
        found = device_if_there(self.config.device, "output", ctx.node, self.waiting, fresh=fresh)
        if found is None:
            self.next_look = time.monotonic() + RECHECK_S
            return False
        sd, device = found
        self._open(ctx, sd, device)
        self.waiting.over(f"node {ctx.node}: the output device {device['name']!r} is there now")
        return True

    def _open(self, ctx: RuntimeContextLimitedAccess, sd: Any, device: dict[str, Any]) -> None:
        rate = self.config.sample_rate or int(device["default_samplerate"])
        channels = self.config.channels or min(2, device["max_output_channels"])
        ctx.inputs.shape_audio("audio", {"sample_rate": rate, "channels": channels, "format": "f32",
                                         "window_ms": window_ms_for(rate)})
        start = int(rate * self.config.latency_ms) // 1000
        self.queue = queue = PlayQueue(channels, start, start + rate * MAX_BEHIND_MS // 1000)
        self.tally = tally = Tally(ctx, "underruns", "overruns")

        def play(outdata: Any, frames: int, when: Any, status: Any) -> None:
            try:
                if not queue.pull(outdata):
                    tally.count("underruns")
            except BaseException as exc:
                end_node(ctx, f"node {ctx.node}: playing failed", exc)

        def finished() -> None:
            if not self.stopping:
                ctx.log.error(f"node {ctx.node}: the output device {device['name']!r} stopped playing; "
                              "the runtime starts the node again")
                os._exit(1)

        stream = sd.OutputStream(device=device["index"], samplerate=rate, channels=channels, dtype="float32",
                                 callback=play, finished_callback=finished)
        stream.start()
        self.stream = stream
        ctx.log.info(f"node {ctx.node}: playing on {device['name']!r} at {rate} Hz, {channels} channel(s)",
                     device=device["name"], sample_rate=rate, channels=channels)

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.stream is None:  # waiting for a device: what comes is read, not played, and counted
            while (block := ctx.inputs.read("audio", into=AudioBlock)) is not None:
                self.unplayed_ms += 1000 * len(block.samples) / block.sample_rate
            ctx.report(unplayed_ms=round(self.unplayed_ms))
            self.idle(ctx)
            return
        # _open sets the queue and the tally before the stream
        assert self.queue is not None and self.tally is not None
        until = time.monotonic() + CALL_S
        while time.monotonic() < until:
            block = ctx.inputs.read("audio", into=AudioBlock)
            if block is None:
                return
            if self.queue.put(block.samples, PUT_WAIT_S):
                self.tally.count("overruns")

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        self.stopping = True
        if self.stream is not None:
            self.stream.stop()
            self.stream.close()
        if self.tally is not None:
            self.tally.stop()
