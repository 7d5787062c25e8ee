"""OpusEncoder and OpusDecoder: libopus through PyAV, packets as the shared encoded bag.

Timestamps: the encoder counts samples from the first block's ``first_sample_timestamp_ns``; a
packet's ``timestamp_ns`` is that start plus its pts (libopus's first packet starts 312 samples
early: its pre-skip, which a decoder drops). The decoder drops the pre-skip too and stamps its
blocks from the first packet's timestamp plus the samples it has decoded, so a round trip gives
back the encoder's input times.
"""

from __future__ import annotations

import struct
from fractions import Fraction
from typing import Any

import av
import numpy as np

from tatolab._sdk import builtins as described
from tatolab._sdk.audio import AudioBlock
from tatolab._sdk.builtins import OpusDecoderConfig, OpusEncoderConfig, implements
from tatolab._sdk.builtins.audio import OPUS_RATE
from tatolab._sdk.packets import EncodedPacket
from tatolab._sdk.context import RuntimeContextLimitedAccess

NS = 1_000_000_000
LAYOUTS = {1: "mono", 2: "stereo"}
RESYNC_NS = 1_000_000  # a block further than this from where the count says: the encoder starts afresh


def pre_skip(opus_head: bytes) -> int:
    """The samples a decoder drops at the start (OpusHead bytes 10-11, little-endian)."""
    if len(opus_head) >= 12 and opus_head[:8] == b"OpusHead":
        return struct.unpack_from("<H", opus_head, 10)[0]
    return 0


def open_encoder(config: OpusEncoderConfig) -> Any:
    encoder = av.CodecContext.create("libopus", "w")
    encoder.sample_rate = OPUS_RATE
    encoder.layout = LAYOUTS[config.channels]
    encoder.format = "flt"
    encoder.bit_rate = config.bitrate
    encoder.time_base = Fraction(1, OPUS_RATE)
    encoder.options = {"frame_duration": str(config.frame_ms)}
    encoder.open()
    return encoder


@implements
class OpusEncoder(described.OpusEncoder):
    def __init__(self, config: OpusEncoderConfig) -> None:
        self.config = config
        self.encoder: Any = None
        self.start_ns = 0
        self.samples = 0  # fed to the encoder since start_ns

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        ctx.inputs.shape_audio("audio", {"sample_rate": OPUS_RATE, "channels": self.config.channels,
                                         "format": "f32", "window_ms": self.config.frame_ms})

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        while True:
            block = ctx.inputs.read("audio", into=AudioBlock)
            if block is None:
                return
            expected = self.start_ns + self.samples * NS // OPUS_RATE
            if self.encoder is None or abs(block.first_sample_timestamp_ns - expected) > RESYNC_NS:
                self._flush(ctx)
                self.encoder = open_encoder(self.config)
                self.start_ns, self.samples = block.first_sample_timestamp_ns, 0
            frame = av.AudioFrame.from_ndarray(block.samples.reshape(1, -1), format="flt",
                                               layout=LAYOUTS[self.config.channels])
            frame.sample_rate = OPUS_RATE
            frame.pts = self.samples
            frame.time_base = Fraction(1, OPUS_RATE)
            self.samples += block.frames
            self._send(ctx, self.encoder.encode(frame))

    def _send(self, ctx: RuntimeContextLimitedAccess, packets: list[Any]) -> None:
        extradata = bytes(self.encoder.extradata or b"")
        for packet in packets:
            ctx.outputs.write("packets", EncodedPacket(
                codec="opus", data=bytes(packet), timestamp_ns=self.start_ns + packet.pts * NS // OPUS_RATE,
                duration_ns=(packet.duration or 0) * NS // OPUS_RATE, keyframe=True, extradata=extradata,
                encoder="libopus", sample_rate=OPUS_RATE, channels=self.config.channels,
            ).to_bag())

    def _flush(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.encoder is not None:
            self._send(ctx, self.encoder.encode(None))
            self.encoder = None

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        try:
            self._flush(ctx)
        except Exception:  # the stream is stopping; what the encoder held is lost, nothing else
            pass


@implements
class OpusDecoder(described.OpusDecoder):
    def __init__(self, config: OpusDecoderConfig) -> None:
        self.config = config
        self.decoder: Any = None
        self.head = b""
        self.start_ns = 0
        self.decoded = 0  # samples written since start_ns
        self.bad = 0

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        while True:
            bag = ctx.inputs.read("packets")
            if bag is None:
                return
            try:
                packet = EncodedPacket.from_bag(bag)
                if packet.codec != "opus":
                    raise ValueError(f"it is {packet.codec!r}, and this decoder reads \"opus\"")
            except ValueError as exc:
                self.bad += 1
                ctx.log.every(100, "warning",
                              f"node {ctx.node}: skipped a bag on packets that is not an Opus packet: {exc}",
                              skipped=self.bad)
                continue
            self._decode(ctx, packet)

    def _open(self, packet: EncodedPacket) -> None:
        channels = self.config.channels or packet.channels or (packet.extradata[9] if len(packet.extradata) > 9 else 2)
        self.decoder = av.CodecContext.create("libopus", "r")
        self.decoder.sample_rate = OPUS_RATE
        self.decoder.layout = LAYOUTS.get(channels, "stereo")
        if packet.extradata:
            self.decoder.extradata = packet.extradata
        self.head = packet.extradata
        # libopus drops the pre-skip itself: the first sample out is the encoder's first sample in
        self.start_ns = packet.timestamp_ns + pre_skip(packet.extradata) * NS // OPUS_RATE
        self.decoded = 0

    def _decode(self, ctx: RuntimeContextLimitedAccess, packet: EncodedPacket) -> None:
        if self.decoder is None or packet.extradata != self.head:
            self._open(packet)
        expected = self.start_ns + self.decoded * NS // OPUS_RATE
        if self.decoded and abs(packet.timestamp_ns - expected) > RESYNC_NS + packet.duration_ns:
            self.start_ns, self.decoded = packet.timestamp_ns, 0  # a gap: count from this packet
        frames = self.decoder.decode(av.Packet(packet.data))
        for frame in frames:
            pcm = frame.to_ndarray()
            if frame.format.is_planar:
                pcm = pcm.T
            channels = frame.layout.nb_channels if hasattr(frame.layout, "nb_channels") else len(frame.layout.channels)
            samples = np.ascontiguousarray(pcm.reshape(-1, channels))
            if samples.dtype != np.int16:
                samples = samples.astype(np.float32)
            block = AudioBlock(samples, OPUS_RATE, self.start_ns + self.decoded * NS // OPUS_RATE)
            self.decoded += block.frames
            ctx.outputs.write("audio", block)
