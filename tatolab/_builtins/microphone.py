"""MicrophoneSource: an input device through PortAudio, as audio bags on the monotonic clock.

The first block's time is the device's capture time of its first sample (PortAudio's
``inputBufferAdcTime``, on the stream's clock, moved onto the monotonic clock by the distance
between the two at the callback); after that each block starts where the sample count says, so
the timestamps are exact. When the device's time and the count part by more than
``RESYNC_NS`` (an overflow lost samples, the device stalled) the count starts again from the
device's time.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from tatolab._builtins.devices import device_if_there
from tatolab._builtins.ending import end_node
from tatolab._builtins.tally import Tally
from tatolab._builtins.waiting import RECHECK_S, Waiting
from tatolab._sdk import builtins as described
from tatolab._sdk.audio import FORMATS, AudioBlock
from tatolab._sdk.builtins import MicrophoneConfig, implements
from tatolab._sdk.context import RuntimeContextLimitedAccess

NS = 1_000_000_000
RESYNC_NS = 20_000_000
MAX_AGE_S = 10.0


def first_sample_ns(now_ns: int, frames: int, rate: int, current: float, adc: float) -> int:
    """The monotonic time of a callback's first sample: from PortAudio's ADC time when it gives
    one that makes sense, else from the callback's own time less the block's length."""
    age = current - adc
    # PortAudio through PulseAudio may hand over seconds of audio at once, each block with its
    # own (older) capture time: ages up to MAX_AGE_S are real
    if current > 0 and adc > 0 and 0 <= age < MAX_AGE_S:
        return now_ns - int(age * NS)
    return now_ns - frames * NS // rate


class SampleClock:
    """Timestamps from sample counts, anchored on the device's time and re-anchored when they part."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.start_ns: int | None = None
        self.count = 0
        self.resyncs = 0

    def stamp(self, device_ns: int, frames: int) -> int:
        if self.start_ns is not None:
            expected = self.start_ns + self.count * NS // self.rate
            if abs(device_ns - expected) > RESYNC_NS:
                self.start_ns = None
                self.resyncs += 1
        if self.start_ns is None:
            self.start_ns, self.count = device_ns, 0
        stamp = self.start_ns + self.count * NS // self.rate
        self.count += frames
        return stamp


@implements
class MicrophoneSource(described.MicrophoneSource):
    def __init__(self, config: MicrophoneConfig) -> None:
        self.config = config
        self.stream: Any = None
        self.clock: SampleClock | None = None
        self.stopping = False
        self.stopped = threading.Event()
        self.waiter: threading.Thread | None = None
        self.tally: Tally | None = None

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        waiting = Waiting(ctx)
        if not self._open_if_there(ctx, waiting, fresh=False):
            # no device (or no PortAudio) yet: wait for one on a thread, the node stays up and `waiting`
            self.waiter = threading.Thread(target=self._wait_for_device, args=(ctx, waiting), daemon=True,
                                           name="microphone-wait")
            self.waiter.start()

    def _wait_for_device(self, ctx: RuntimeContextLimitedAccess, waiting: Waiting) -> None:
        try:
            while not self.stopped.wait(RECHECK_S):
                if self._open_if_there(ctx, waiting, fresh=True):
                    return
        except BaseException as exc:
            end_node(ctx, f"node {ctx.node}: opening the input device failed", exc)

    def _open_if_there(self, ctx: RuntimeContextLimitedAccess, waiting: Waiting, *, fresh: bool) -> bool:
        found = device_if_there(self.config.device, "input", ctx.node, waiting, fresh=fresh)
        if found is None:
            return False
        sd, device = found
        if self.stopped.is_set():
            return True
        self._open(ctx, sd, device)
        waiting.over(f"node {ctx.node}: the input device {device['name']!r} is there now")
        return True

    def _open(self, ctx: RuntimeContextLimitedAccess, sd: Any, device: dict[str, Any]) -> None:
        rate = self.config.sample_rate or int(device["default_samplerate"])
        channels = min(self.config.channels, device["max_input_channels"])
        self.clock = clock = SampleClock(rate)
        self.tally = tally = Tally(ctx, "overflows", "resyncs")
        dtype = FORMATS[self.config.format]
        blocksize = max(1, int(rate * self.config.block_ms) // 1000)

        def captured(indata: Any, frames: int, when: Any, status: Any) -> None:
            try:
                device_ns = first_sample_ns(time.monotonic_ns(), frames, rate, when.currentTime,
                                            when.inputBufferAdcTime)
                resyncs = clock.resyncs
                stamp = clock.stamp(device_ns, frames)
                if status.input_overflow:
                    tally.count("overflows")
                if clock.resyncs != resyncs:
                    tally.count("resyncs")
                ctx.outputs.write("audio", AudioBlock(np.array(indata, dtype=dtype), rate, stamp))
            except BaseException as exc:
                end_node(ctx, f"node {ctx.node}: capture failed", exc)

        def finished() -> None:
            if not self.stopping:  # the device went away or PortAudio gave up
                ctx.log.error(f"node {ctx.node}: the input device {device['name']!r} stopped capturing; "
                              "the runtime starts the node again")
                os._exit(1)

        self.stream = sd.InputStream(device=device["index"], samplerate=rate, channels=channels, dtype=dtype,
                                     blocksize=blocksize, latency="low", callback=captured,
                                     finished_callback=finished)
        self.stream.start()
        ctx.log.info(f"node {ctx.node}: capturing from {device['name']!r} at {rate} Hz, {channels} channel(s)",
                     device=device["name"], sample_rate=rate, channels=channels)

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        self.stopping = True
        self.stopped.set()
        if self.waiter is not None:
            self.waiter.join(timeout=5)
        if self.stream is not None:
            self.stream.stop()
            self.stream.close()
        if self.tally is not None:
            self.tally.stop()
