"""The relay's H.264 encode of a video output, for its MoQ readers (the moq-dev media format).

One ``Encoder`` per output while anyone reads its video track, shared by all of them; it runs on
the output's feeding thread, never on an event loop. Frames come as video bags naming surfaces in
the runtime's pool; each is encoded to Annex-B H.264 with its parameter sets in band (``avc3``),
so a reader that joins at any keyframe can decode.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import msgspec

from tatolab._media.encoders import encoder_options, why_not
from tatolab._sdk.builtins.codecs import ENCODERS
from tatolab._sdk.builtins.codecs import H264EncoderConfig
from tatolab._surfaces import pool as _pool
from tatolab._surfaces.frame import VideoFrame

if TYPE_CHECKING:
    from av.video.codeccontext import VideoCodecContext

US = Fraction(1, 1_000_000)
# a late reader waits at most this long for a picture (a group starts at each keyframe)
KEYFRAME_S = 1.0
CONFIG = H264EncoderConfig(bitrate=2_500_000, preset="veryfast", tune="zerolatency")


def is_video_bag(bag: Any) -> bool:
    """A bag that names a frame in the surface pool (what a ``VideoFrame`` sends)."""
    return isinstance(bag, dict) and isinstance(bag.get("surface_id"), str)


class Encoder:
    """Video bags in, (Annex-B access unit, timestamp µs, keyframe) out. Opens at the first frame
    (its size is the stream's) and again when the size changes."""

    def __init__(self, pool_base: str) -> None:
        self.pool_base = pool_base
        self.pool: _pool.Pool | None = None
        self.codec: Any = None
        self.name = ""
        self.size: tuple[int, int] | None = None
        self.first_us: int | None = None
        self.last_pts = -1
        self.frames = 0
        self.skipped = 0  # bags that were not frames, or whose surface was reused before we got to it

    def encode(self, payload: bytes) -> list[tuple[bytes, int, bool]]:
        import av

        try:
            bag = msgspec.msgpack.decode(payload)
        except msgspec.DecodeError:
            bag = None
        if not is_video_bag(bag):
            self.skipped += 1
            return []
        if self.pool is None:
            self.pool = _pool.Pool(self.pool_base)
        try:
            info = self.pool.lease(bag["surface_id"])
        except (ValueError, _pool.SurfaceError):
            self.skipped += 1  # reused (or gone) before this reader got to it
            return []
        try:
            frame = VideoFrame._held(self.pool, info, owned=False, timestamp_ns=int(bag.get("timestamp_ns") or 0))
        except BaseException:
            self.pool.release(info.slot)
            raise
        stamp_us = frame.timestamp_ns // 1000
        size = (frame.width, frame.height)
        # swscale reads the surface's own memory (no copy) and writes the encoder's yuv420p
        picture = av.VideoFrame.from_numpy_buffer(frame.cpu(), format="rgba").reformat(format="yuv420p")
        frame.release()
        del frame
        if self.size != size:
            self.close()
            self.codec = self._open(*size)
            self.size = size
            self.first_us = stamp_us
        assert self.first_us is not None
        pts = max(stamp_us - self.first_us, self.last_pts + 1)
        self.last_pts = pts
        picture.pts = pts
        picture.time_base = US
        self.frames += 1
        return [(bytes(p), self.first_us + int(p.pts or 0), bool(p.is_keyframe)) for p in self.codec.encode(picture)]

    def _open(self, width: int, height: int, global_header: bool = False) -> VideoCodecContext:
        import av

        errors = []
        for name in ENCODERS["h264"]:
            try:
                ctx = av.CodecContext.create(name, "w")
                if not isinstance(ctx, av.VideoCodecContext):  # (an H.264 encoder's context is one)
                    raise TypeError(f"{name} is not a video encoder")
                ctx.width, ctx.height = width, height
                ctx.pix_fmt = "yuv420p"
                ctx.time_base = US
                ctx.framerate = Fraction(30)
                ctx.bit_rate = CONFIG.bitrate
                # pts are µs, so the GOP is set in frames at the nominal rate; x264 also cuts at scene changes
                ctx.gop_size = int(30 * KEYFRAME_S)
                ctx.max_b_frames = 0
                # without GLOBAL_HEADER, SPS/PPS travel in band before each keyframe (avc3)
                if global_header:
                    ctx.flags |= 1 << 22
                ctx.options = encoder_options(name, CONFIG)
                ctx.open()
            except Exception as exc:  # noqa: BLE001 - FFmpeg says no in many ways; the next candidate is tried
                errors.append(f"{name}: {why_not(exc)}")
                continue
            self.name = name
            return ctx
        raise RuntimeError(f"no H.264 encoder opens on this machine ({'; '.join(errors)}); "
                           "reinstall the runtime's PyAV (pip install av)")

    def parameter_sets(self, width: int, height: int) -> bytes:
        """The SPS and PPS (Annex-B) this encoder will send for frames of this size, without
        encoding anything: they seed the broadcast's catalog, so a player finds the video track
        listed before anyone subscribes to it (and so before the first keyframe exists)."""
        ctx = self._open(width, height, global_header=True)
        try:
            return bytes(ctx.extradata or b"")
        finally:
            del ctx
            self.name = ""

    def close(self) -> None:
        self.codec = None  # PyAV frees the context; nothing is flushed: nobody waits for the tail
        self.size = None

    def dispose(self) -> None:
        self.close()
        if self.pool is not None:
            self.pool.dispose()
            self.pool = None
