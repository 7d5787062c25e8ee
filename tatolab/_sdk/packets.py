"""The encoded-packet bag: what encoders write and decoders and Mp4Sink read.

One shape for every codec, video and audio, so a recorder or a network output needs no
per-codec cases. ``timestamp_ns`` is on the machine's monotonic clock like every other timestamp
in a stream; ``extradata`` (the codec's parameters: avcC/hvcC for H.264/H.265 as the encoder
gives them, OpusHead for Opus) travels with every packet, so a reader that joins late, or a
recorder whose file rotates, can start at the next keyframe without asking anyone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CODECS = ("h264", "hevc", "opus", "aac")
VIDEO_CODECS = ("h264", "hevc")
AUDIO_CODECS = ("opus", "aac")


@dataclass
class EncodedPacket:
    codec: str  # one of CODECS
    data: bytes
    timestamp_ns: int  # presentation time, monotonic clock
    duration_ns: int = 0
    keyframe: bool = False
    extradata: bytes = b""
    encoder: str = ""  # the implementation that made it, e.g. "libx264", "h264_nvenc", "libopus"
    width: int = 0  # video only
    height: int = 0
    sample_rate: int = 0  # audio only
    channels: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # anything else a node adds; kept, not read here

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {self.codec!r}")

    @property
    def is_video(self) -> bool:
        return self.codec in VIDEO_CODECS

    def to_bag(self) -> dict[str, Any]:
        bag = {
            "codec": self.codec, "data": self.data, "timestamp_ns": self.timestamp_ns,
            "duration_ns": self.duration_ns, "keyframe": self.keyframe, "extradata": self.extradata,
            "encoder": self.encoder,
        }
        if self.is_video:
            bag.update(width=self.width, height=self.height)
        else:
            bag.update(sample_rate=self.sample_rate, channels=self.channels)
        bag.update(self.extra)
        return bag

    @classmethod
    def from_bag(cls, bag: dict[str, Any]) -> "EncodedPacket":
        """The packet a bag carries; a ValueError naming the missing or wrong field otherwise."""
        known = {"codec", "data", "timestamp_ns", "duration_ns", "keyframe", "extradata", "encoder",
                 "width", "height", "sample_rate", "channels"}
        for name in ("codec", "data", "timestamp_ns"):
            if name not in bag:
                raise ValueError(f"an encoded-packet bag needs {name!r} (it has {', '.join(sorted(bag)) or 'nothing'})")
        if not isinstance(bag["data"], (bytes, bytearray, memoryview)):
            raise ValueError(f"an encoded-packet bag's 'data' must be bytes, got {type(bag['data']).__name__}")
        return cls(
            codec=bag["codec"], data=bytes(bag["data"]), timestamp_ns=int(bag["timestamp_ns"]),
            duration_ns=int(bag.get("duration_ns", 0)), keyframe=bool(bag.get("keyframe", False)),
            extradata=bytes(bag.get("extradata", b"")), encoder=str(bag.get("encoder", "")),
            width=int(bag.get("width", 0)), height=int(bag.get("height", 0)),
            sample_rate=int(bag.get("sample_rate", 0)), channels=int(bag.get("channels", 0)),
            extra={k: v for k, v in bag.items() if k not in known},
        )
