"""H.264 / H.265 encoders and decoders through PyAV (FFmpeg, bundled in its wheels).

Encoders open lazily, at the first frame (its size is the stream's), trying the candidates of
``ENCODERS`` in order: opening is the only reliable test of a hardware encoder (the FFmpeg build
has NVENC compiled in even where no NVIDIA driver exists). Timestamps are carried exactly: the
encoder is fed microsecond pts and the frame's own ``timestamp_ns`` is looked up by pts when
its packet comes out (B-frames may reorder them).
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

from tatolab._media.encoders import US, is_hardware, open_encoder, why_not
from tatolab._sdk import builtins as described
from tatolab._sdk.builtins import implements
from tatolab._sdk.builtins.codecs import (
    DECODERS,
    ENCODERS,
)
from tatolab._sdk.packets import EncodedPacket
from tatolab._surfaces.frame import VideoFrame
from tatolab._surfaces.pool import PoolExhausted
from tatolab._sdk.context import RuntimeContextLimitedAccess

REPORT_EVERY_S = 1.0
NS = Fraction(1, 1_000_000_000)
class _Encoder:
    """H264Encoder and H265Encoder (their ports and config: the descriptions they subclass)."""

    CODEC = ""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.codec: Any = None
        self.name = ""
        self.size: tuple[int, int] | None = None
        self.first: tuple[Any, int] | None = None  # (yuv frame, timestamp_ns) held until the rate is known
        self.first_ns = 0
        self.stamps: dict[int, int] = {}  # pts (µs from the first frame) -> the frame's timestamp_ns
        self.last_interval_ns = 0
        self.previous_ns: int | None = None
        self.frames = self.packets_out = self.bytes_out = 0
        self.failed: list[str] = []
        self.reported = 0.0

    def _candidates(self) -> tuple[str, ...]:
        return ENCODERS[self.CODEC] if self.config.encoder == "auto" else (self.config.encoder,)

    def _open(self, ctx: RuntimeContextLimitedAccess, width: int, height: int, rate: Fraction) -> None:
        errors = []
        for name in self._candidates():
            try:
                self.codec = open_encoder(name, self.config, width, height, rate)
            except Exception as exc:  # noqa: BLE001 - FFmpeg says no in many ways; the next candidate is tried
                errors.append(f"{name}: {why_not(exc)}" + (" (no NVIDIA GPU or driver here?)"
                                                          if name.endswith("_nvenc") else ""))
                continue
            self.name = name
            self.failed = [e.split(":", 1)[0] for e in errors]
            ctx.log.info(
                f"node {ctx.node}: encoding {width}x{height} at {float(rate):.3g} fps with {name} "
                f"({'hardware' if is_hardware(name) else 'software'})"
                + (f"; could not open {'; '.join(errors)}" if errors else ""),
                encoder=name, hardware=is_hardware(name),
            )
            return
        raise RuntimeError(
            f"stream {ctx.stream}, node {ctx.node}: no {self.CODEC} encoder opens on this machine "
            f"({'; '.join(errors)}). Install a PyAV (pip install av) whose FFmpeg has "
            f"{ENCODERS[self.CODEC][-1]}, or choose another encoder= in the node's config"
        )

    def _report(self, ctx: RuntimeContextLimitedAccess, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.reported < REPORT_EVERY_S:
            return
        self.reported = now
        ctx.report(codec=self.CODEC, encoder=self.name, hardware=is_hardware(self.name),
                   could_not_open=self.failed, width=self.size[0] if self.size else None,
                   height=self.size[1] if self.size else None, frames=self.frames,
                   packets=self.packets_out, bytes=self.bytes_out)

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        import av

        frame = ctx.inputs.read("video", into=VideoFrame)
        if frame is None:
            return
        stamp = frame.timestamp_ns
        width, height = frame.width, frame.height
        # over the surface's own memory (no copy) into swscale, which writes the encoder's yuv420p
        picture = av.VideoFrame.from_numpy_buffer(frame.cpu(), format="rgba").reformat(format="yuv420p")
        frame.release()
        if self.size != (width, height):
            if self.codec is not None:
                ctx.log.info(f"node {ctx.node}: frames changed size to {width}x{height}; the encoder starts again "
                             "(a new keyframe and parameters)")
                self._flush(ctx)
                self.codec = None
            self.size = (width, height)
            self.first = (picture, stamp)
            return  # held until the next frame gives the rate
        if self.codec is None and self.first is not None:
            held, held_ns = self.first
            self.first = None
            interval = max(1, stamp - held_ns)
            rate = Fraction(min(240.0, max(1.0, 1e9 / interval))).limit_denominator(1001)
            self._open(ctx, width, height, rate)
            self.first_ns = held_ns
            self.last_interval_ns = interval
            self._encode(ctx, held, held_ns)
        self._encode(ctx, picture, stamp)
        self._report(ctx, force=self.frames <= 2)  # the first frames at once: graph shows it is encoding

    def _encode(self, ctx: RuntimeContextLimitedAccess, picture: Any, stamp: int) -> None:
        if self.previous_ns is not None and stamp > self.previous_ns:
            self.last_interval_ns = stamp - self.previous_ns
        self.previous_ns = stamp
        pts = (stamp - self.first_ns) // 1000
        if self.stamps and pts <= max(self.stamps):
            pts = max(self.stamps) + 1  # two frames within a microsecond: pts must still grow
        picture.pts = pts
        picture.time_base = US
        self.stamps[pts] = stamp
        self.frames += 1
        for packet in self.codec.encode(picture):
            self._send(ctx, packet)

    def _send(self, ctx: RuntimeContextLimitedAccess, packet: Any) -> None:
        stamp = self.stamps.pop(packet.pts, None)
        if stamp is None:  # not expected; keep the packet on the clock anyway
            stamp = self.first_ns + int(packet.pts or 0) * 1000
        # everything older than the packet that came out is out too (no B-frames reorder behind it)
        if len(self.stamps) > 64:
            for old in [p for p in self.stamps if p < packet.pts]:
                del self.stamps[old]
        extra = {}
        if packet.dts is not None and packet.dts != packet.pts:  # B-frames: decode order differs
            extra["decode_timestamp_ns"] = self.first_ns + int(packet.dts) * 1000
        data = bytes(packet)
        self.packets_out += 1
        self.bytes_out += len(data)
        bag = EncodedPacket(
            codec=self.CODEC, data=data, timestamp_ns=stamp, duration_ns=self.last_interval_ns,
            keyframe=bool(packet.is_keyframe), extradata=bytes(self.codec.extradata or b""),
            encoder=self.name, width=self.size[0] if self.size else 0, height=self.size[1] if self.size else 0,
            extra=extra,
        ).to_bag()
        ctx.outputs.write("packets", bag)

    def _flush(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.codec is None:
            return
        try:
            for packet in self.codec.encode(None):
                self._send(ctx, packet)
        except Exception as exc:  # noqa: BLE001 - ending anyway
            ctx.log.warning(f"node {ctx.node}: flushing the encoder failed: {exc}")

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        self._flush(ctx)
        self._report(ctx, force=True)


@implements
class H264Encoder(_Encoder, described.H264Encoder):
    CODEC = "h264"


@implements
class H265Encoder(_Encoder, described.H265Encoder):
    CODEC = "hevc"


def open_decoder(name: str, extradata: bytes) -> Any:
    import av

    ctx = av.CodecContext.create(name, "r")
    if extradata:
        ctx.extradata = extradata
    ctx.thread_type = "SLICE"  # frame threads would hold back one frame per thread: latency
    ctx.open()
    return ctx


class _Decoder:
    """H264Decoder and H265Decoder (their ports and config: the descriptions they subclass)."""

    CODEC = ""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.codec: Any = None
        self.name = ""
        self.extradata = b""
        self.waiting_keyframe = True
        self.packets_in = self.frames = self.skipped = self.bad = self.dropped = 0
        self.reported = 0.0

    def _candidates(self) -> tuple[str, ...]:
        return DECODERS[self.CODEC] if self.config.decoder == "auto" else (self.config.decoder,)

    def _open(self, ctx: RuntimeContextLimitedAccess, extradata: bytes) -> None:
        errors = []
        for name in self._candidates():
            try:
                self.codec = open_decoder(name, extradata)
            except Exception as exc:  # noqa: BLE001
                errors.append(f"{name}: {why_not(exc)}")
                continue
            self.name, self.extradata = name, extradata
            ctx.log.info(f"node {ctx.node}: decoding {self.CODEC} with {name} "
                         f"({'hardware' if is_hardware(name) else 'software'})", decoder=name)
            self._report(ctx, force=True)
            return
        raise RuntimeError(f"stream {ctx.stream}, node {ctx.node}: no {self.CODEC} decoder opens here "
                           f"({'; '.join(errors)})")

    def _report(self, ctx: RuntimeContextLimitedAccess, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.reported < REPORT_EVERY_S:
            return
        self.reported = now
        ctx.report(codec=self.CODEC, decoder=self.name, hardware=is_hardware(self.name), packets=self.packets_in,
                   frames=self.frames, skipped_before_keyframe=self.skipped, bad=self.bad, dropped=self.dropped)

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        import av

        bag = ctx.inputs.read("packets")
        if bag is None:
            return
        try:
            packet = EncodedPacket.from_bag(bag)
        except (ValueError, TypeError) as exc:
            self.bad += 1
            ctx.log.every(100, "warning",
                          f"node {ctx.node}: skipped a bag on packets that is not an encoded packet: {exc}",
                          bad=self.bad)
            return
        if packet.codec != self.CODEC:
            self.bad += 1
            ctx.log.every(100, "warning", f"node {ctx.node} decodes {self.CODEC}, got a {packet.codec} packet "
                                          f"from {packet.encoder or 'an encoder'}; connect it to the matching decoder",
                                          bad=self.bad)
            return
        self.packets_in += 1
        if self.waiting_keyframe:
            if not packet.keyframe:
                self.skipped += 1
                return
            self.waiting_keyframe = False
        if self.codec is None or (packet.extradata and packet.extradata != self.extradata and packet.keyframe):
            self._open(ctx, packet.extradata)
        raw = av.Packet(packet.data)
        raw.pts = raw.dts = packet.timestamp_ns
        raw.time_base = NS
        try:
            decoded = self.codec.decode(raw)
        except av.error.FFmpegError as exc:
            self.bad += 1
            ctx.log.every(100, "warning",
                          f"node {ctx.node}: a packet did not decode ({exc}); waiting for the next keyframe",
                          bad=self.bad)
            self.waiting_keyframe = True
            return
        for picture in decoded:
            self._write(ctx, picture, packet.timestamp_ns)
        self._report(ctx)

    def _write(self, ctx: RuntimeContextLimitedAccess, picture: Any, fallback_ns: int) -> None:
        stamp = picture.pts if picture.pts is not None else fallback_ns
        try:
            frame = VideoFrame.allocate(picture.width, picture.height, "rgba8", timestamp_ns=int(stamp))
        except PoolExhausted as exc:
            self.dropped += 1
            ctx.log.every(100, "warning", f"frame dropped: {exc}", dropped=self.dropped)
            return
        frame.cpu(writable=True)[...] = picture.reformat(format="rgba").to_ndarray()
        self.frames += 1
        ctx.outputs.write("video", frame)

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        self._report(ctx, force=True)


@implements
class H264Decoder(_Decoder, described.H264Decoder):
    CODEC = "h264"


@implements
class H265Decoder(_Decoder, described.H265Decoder):
    CODEC = "hevc"
