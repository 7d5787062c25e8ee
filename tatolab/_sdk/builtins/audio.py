"""Audio built-ins as the SDK carries them: MicrophoneSource, SpeakerSink, OpusEncoder, OpusDecoder.

Audio bags carry their samples inline (tatolab/_sdk/audio.py); Opus packets travel as the encoded
bag every codec shares (tatolab/_sdk/packets.py, codec "opus").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tatolab._sdk.audio import check_format
from tatolab._sdk.builtins.marks import builtin
from tatolab._sdk.nodes import node

if TYPE_CHECKING:
    from tatolab._sdk.context import RuntimeContextLimitedAccess

OPUS_FRAME_MS = (2.5, 5, 10, 20, 40, 60)
OPUS_RATE = 48000
# What a built-in's audio input asks for until the node knows better in setup() (a device's rate,
# the channels and frame size in its config): ctx.inputs.shape_audio changes it there.
DEFAULT_AUDIO = {"sample_rate": OPUS_RATE, "channels": 2, "format": "f32", "window_ms": 20}


def _rate(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 8000 <= value <= 384000):
        raise ValueError(f"{name} must be a whole number of samples a second from 8000 to 384000 "
                         f"(or left out for the device's own), got {value!r}")


def _channels(name: str, value: Any, high: int = 32) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high):
        raise ValueError(f"{name} must be a whole number of channels from 1 to {high}, got {value!r}")


def _device(value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"device must be a device's name (or left out for the default), got {value!r}")


@dataclass
class MicrophoneConfig:
    device: str | None = None  # a device's name, or part of it; None: the system's default input
    sample_rate: int | None = None  # None: the device's own rate
    channels: int = 1
    block_ms: float = 10  # how much audio each bag carries
    format: str = "f32"

    def __post_init__(self) -> None:
        _device(self.device)
        _rate("sample_rate", self.sample_rate)
        _channels("channels", self.channels)
        if isinstance(self.block_ms, bool) or not isinstance(self.block_ms, (int, float)) or not 1 <= self.block_ms <= 1000:
            raise ValueError(f"block_ms must be a number of milliseconds from 1 to 1000, got {self.block_ms!r}")
        check_format(self.format)


@builtin("tatolab._builtins.microphone:MicrophoneSource")
@node(execution="manual")
class MicrophoneSource:
    """Captures audio from an input device through PortAudio and writes audio bags on ``audio``:
    ``block_ms`` of samples each, ``first_sample_timestamp_ns`` on the monotonic clock (the
    device's capture time of the first sample, then exact from sample counts). ``device`` names
    the device (or part of its name); a name no device has is refused with the list of devices."""

    @node.output()
    def audio(self) -> dict: ...

    def __init__(self, config: MicrophoneConfig) -> None:
        self.config = config


@dataclass
class SpeakerConfig:
    device: str | None = None  # a device's name, or part of it; None: the system's default output
    sample_rate: int | None = None  # None: the device's own rate
    channels: int | None = None  # None: two, or one on a mono device
    latency_ms: float = 40  # audio held before playing starts, and kept ahead while it plays

    def __post_init__(self) -> None:
        _device(self.device)
        _rate("sample_rate", self.sample_rate)
        _channels("channels", self.channels)
        if isinstance(self.latency_ms, bool) or not isinstance(self.latency_ms, (int, float)) \
                or not 5 <= self.latency_ms <= 2000:
            raise ValueError(f"latency_ms must be a number of milliseconds from 5 to 2000, got {self.latency_ms!r}")


@builtin("tatolab._builtins.speaker:SpeakerSink")
@node
class SpeakerSink:
    """Plays the audio on ``audio`` on an output device through PortAudio, at the device's rate
    whatever arrives (the input is resampled and remixed to match). When the audio does not
    arrive in time the device plays silence and the underrun is counted (``metrics.underruns``
    in ``tatolab graph``)."""

    @node.input(delivery_profile="ordered", audio=DEFAULT_AUDIO)
    def audio(self) -> dict: ...

    def __init__(self, config: SpeakerConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the runtime's process for it, never here
        raise RuntimeError("SpeakerSink runs inside the runtime")


@dataclass
class OpusEncoderConfig:
    bitrate: int = 64000  # bits a second
    frame_ms: float = 20  # one of 2.5, 5, 10, 20, 40, 60
    channels: int = 2  # 1 or 2; what arrives is remixed to match

    def __post_init__(self) -> None:
        if isinstance(self.bitrate, bool) or not isinstance(self.bitrate, int) or not 6000 <= self.bitrate <= 510000:
            raise ValueError(f"bitrate must be a whole number of bits a second from 6000 to 510000, got {self.bitrate!r}")
        if self.frame_ms not in OPUS_FRAME_MS:
            raise ValueError(f"frame_ms must be one of {', '.join(map(str, OPUS_FRAME_MS))}, got {self.frame_ms!r}")
        _channels("channels", self.channels, high=2)


@builtin("tatolab._builtins.opus:OpusEncoder")
@node
class OpusEncoder:
    """Encodes the audio on ``audio`` (any rate, channels and format: shaped to 48 kHz frames of
    ``frame_ms``) as Opus with libopus, and writes encoded-packet bags on ``packets``: codec
    "opus", the OpusHead as extradata, ``timestamp_ns`` on the monotonic clock."""

    @node.input(delivery_profile="ordered", audio=DEFAULT_AUDIO)
    def audio(self) -> dict: ...

    @node.output()
    def packets(self) -> dict: ...

    def __init__(self, config: OpusEncoderConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the runtime's process for it, never here
        raise RuntimeError("OpusEncoder runs inside the runtime")


@dataclass
class OpusDecoderConfig:
    channels: int | None = None  # None: as the stream was encoded

    def __post_init__(self) -> None:
        _channels("channels", self.channels, high=2)


@builtin("tatolab._builtins.opus:OpusDecoder")
@node
class OpusDecoder:
    """Decodes the Opus packets on ``packets`` (encoded-packet bags, codec "opus") and writes 48 kHz
    s16 audio bags on ``audio``, timestamped from the packets' own timestamps."""

    @node.input(delivery_profile="ordered")
    def packets(self) -> dict: ...

    @node.output()
    def audio(self) -> dict: ...

    def __init__(self, config: OpusDecoderConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the runtime's process for it, never here
        raise RuntimeError("OpusDecoder runs inside the runtime")
