"""The recorder's own H.264 encode of a frame output (``tatolab record --video h264``): frames in,
packet bags out (tatolab/_sdk/packets.py's shape), as the H264Encoder built-in makes them, for
compressed.py to write. Runs in the recorder's process, on its reading thread.

A keyframe at least every second of the frames' own time, whatever their rate (a replay seeks to the
one before its start), no B-frames (Foxglove decodes
in order), ``veryfast`` (``superfast`` above 720p, see preset_for); the bitrate scales with the frame's pixels (about 6 Mbit/s at 1080p30).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from tatolab._media.encoders import US, open_encoder, why_not
from tatolab._sdk.builtins.codecs import ENCODERS, H264EncoderConfig
from tatolab._surfaces import pool as surfaces
from tatolab._surfaces.frame import BAG_KEYS, VideoFrame

RATE = 30  # the nominal rate rate control budgets for (pts carry the real times)
KEYFRAME_NS = 1_000_000_000
BITS_PER_PIXEL_S = 0.1  # bits per pixel per frame at RATE


FAST_ABOVE_PIXELS = 1280 * 720  # frames larger than 720p are encoded with x264's superfast


def preset_for(width: int, height: int) -> str:
    """x264's preset for a recording of this size: veryfast up to 720p; above, superfast, so that
    1080p30 keeps up on one core (CPU per 1080p frame, reformat included: veryfast 35 ms,
    superfast 24 ms, ultrafast 16 ms: README, "What record sustains")."""
    return "superfast" if width * height > FAST_ABOVE_PIXELS else "veryfast"


class Unencodable(RuntimeError):
    """No H.264 encoder opens here; the text says why."""


class FrameEncoder:
    def __init__(self) -> None:
        self.codec: Any = None
        self.name = ""
        self.size: tuple[int, int] | None = None
        self.first_ns = 0
        self.last_pts = -1
        self.stamps: dict[int, tuple[int, dict[str, Any]]] = {}  # pts -> the frame's time and other keys
        self.last_key_ns: int | None = None

    @staticmethod
    def take(bag: dict[str, Any]) -> Any | None:
        """A video bag's picture as the encoder takes it (YUV 4:2:0), converted straight off its surface
        on the reading thread (the one pass over its pixels: no RGBA copy, and the surface goes back
        at once; the encoder thread only encodes); None when the frame was gone."""
        import av

        try:
            frame = VideoFrame.open(bag)
        except surfaces.SurfaceError:
            return None
        try:
            pixels = frame.cpu()
            try:
                rgba = av.VideoFrame.from_numpy_buffer(pixels, format="rgba")
            except ValueError:  # rows padded in a way PyAV cannot take in place: copied first
                rgba = av.VideoFrame.from_numpy_buffer(pixels.copy(), format="rgba")
            # one thread: swscale's own threads cost more CPU than they save on a machine the recording
            # shares (1080p: 4.6 ms a frame alone, 7.9 ms with threads, measured beside a running stream)
            return rgba.reformat(format="yuv420p", threads=1)
        finally:
            frame.release()

    def encode(self, bag: dict[str, Any], picture: Any) -> list[dict[str, Any]]:
        """A frame taken (``take``) encoded, on the channel's encoder thread: its packets' bags (maybe none yet)."""
        size = (int(picture.width), int(picture.height))
        stamp = int(bag.get("timestamp_ns") or 0)
        if self.size != size:
            self._open(*size)
            self.last_key_ns = None
            self.first_ns = stamp
            self.last_pts = -1
        pts = max((stamp - self.first_ns) // 1000, self.last_pts + 1)
        self.last_pts = pts
        self.stamps[pts] = (stamp, {k: v for k, v in bag.items() if k not in BAG_KEYS})
        picture.pts, picture.time_base = pts, US
        if self.last_key_ns is None or stamp - self.last_key_ns >= KEYFRAME_NS:
            from av.video.frame import PictureType

            picture.pict_type = PictureType.I  # a keyframe by time: the GOP in frames assumes a rate
            self.last_key_ns = stamp
        return [self._bag(p) for p in self.codec.encode(picture)]

    def _open(self, width: int, height: int) -> None:
        bitrate = max(500_000, int(width * height * RATE * BITS_PER_PIXEL_S))
        config = H264EncoderConfig(bitrate=bitrate, keyframe_interval=4 * RATE, preset=preset_for(width, height),
                                   tune="zerolatency")
        errors = []
        for name in ENCODERS["h264"]:
            try:
                self.codec = open_encoder(name, config, width, height, Fraction(RATE))
            except Exception as exc:  # noqa: BLE001 - FFmpeg says no in many ways; the next one is tried
                errors.append(f"{name}: {why_not(exc)}")
                continue
            self.name, self.size = name, (width, height)
            return
        raise Unencodable(f"no H.264 encoder opens here ({'; '.join(errors)}); record with --video raw")

    def _bag(self, packet: Any) -> dict[str, Any]:
        stamp, keys = self.stamps.pop(packet.pts, (self.first_ns + int(packet.pts or 0) * 1000, {}))
        for old in [p for p in self.stamps if p < (packet.pts or 0)]:
            del self.stamps[old]
        assert self.size is not None
        return {**keys, "codec": "h264", "data": bytes(packet), "timestamp_ns": stamp, "keyframe": bool(packet.is_keyframe),
                "extradata": bytes(self.codec.extradata or b""), "encoder": self.name,
                "width": self.size[0], "height": self.size[1]}
