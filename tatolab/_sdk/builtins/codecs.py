"""Video codec built-ins as the SDK carries them: H264Encoder/Decoder and H265Encoder/Decoder.

Encoders read frames on ``video`` and write encoded-packet bags (``tatolab._sdk.packets``) on
``packets``; decoders do the reverse. Which implementation runs is chosen when the node opens its
codec: the machine's hardware encoder where it has one (NVENC, then VAAPI), the software one
(x264, x265) otherwise, and ``tatolab graph`` names it in the node's ``metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from tatolab._sdk.builtins.marks import builtin
from tatolab._sdk.nodes import node

if TYPE_CHECKING:
    from tatolab._sdk.context import RuntimeContextLimitedAccess

# x264's and x265's preset names; a hardware encoder gets the nearest of its own (see _builtins.codecs)
PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")
TUNES = {
    "h264": ("zerolatency", "film", "animation", "grain", "stillimage", "fastdecode", "psnr", "ssim"),
    "hevc": ("zerolatency", "animation", "grain", "fastdecode", "psnr", "ssim"),
}
# what encoder="auto" tries, in order: the first that opens on this machine is used
ENCODERS = {
    "h264": ("h264_nvenc", "h264_vaapi", "libx264"),
    "hevc": ("hevc_nvenc", "hevc_vaapi", "libx265"),
}
DECODERS = {
    "h264": ("h264_cuvid", "h264"),
    "hevc": ("hevc_cuvid", "hevc"),
}


def _whole(name: str, value: Any, low: int, high: int, unit: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number of {unit} from {low} to {high}, got {value!r}")


def _choice(name: str, value: Any, allowed: tuple[str, ...], extra: str = "") -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}{extra}, got {value!r}")


def _options(value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                              for k, v in value.items()):
        raise ValueError(f"options must map FFmpeg option names to values, e.g. {{'crf': '23'}}, got {value!r}")


@dataclass
class _EncoderConfig:
    """``bitrate`` in bits a second; ``keyframe_interval`` in frames (also the longest a late
    reader waits for a picture); ``preset`` and ``tune`` in x264's words (``tune=None`` for
    none; the default ``zerolatency`` sends each frame's packet as soon as it is encoded);
    ``encoder``: ``auto`` or one implementation by name; ``options``: FFmpeg options passed to
    the encoder as they are."""

    CODEC: ClassVar[str] = ""
    bitrate: int = 4_000_000
    keyframe_interval: int = 60
    preset: str = "veryfast"
    tune: str | None = "zerolatency"
    encoder: str = "auto"
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _whole("bitrate", self.bitrate, 10_000, 500_000_000, "bits a second")
        _whole("keyframe_interval", self.keyframe_interval, 1, 10_000, "frames")
        _choice("preset", self.preset, PRESETS)
        if self.tune is not None:
            _choice("tune", self.tune, TUNES[self.CODEC], " or None")
        _choice("encoder", self.encoder, ("auto", *ENCODERS[self.CODEC]))
        _options(self.options)


@dataclass
class H264EncoderConfig(_EncoderConfig):
    CODEC: ClassVar[str] = "h264"


@dataclass
class H265EncoderConfig(_EncoderConfig):
    CODEC: ClassVar[str] = "hevc"


@dataclass
class _DecoderConfig:
    """``decoder``: ``auto`` (the hardware decoder where it opens, FFmpeg's own otherwise) or one by name."""

    CODEC: ClassVar[str] = ""
    decoder: str = "auto"

    def __post_init__(self) -> None:
        _choice("decoder", self.decoder, ("auto", *DECODERS[self.CODEC]))


@dataclass
class H264DecoderConfig(_DecoderConfig):
    CODEC: ClassVar[str] = "h264"


@dataclass
class H265DecoderConfig(_DecoderConfig):
    CODEC: ClassVar[str] = "hevc"


_ENCODER_DOC = """Encodes the frames on ``video`` (every one, in order) as {name} and writes one
encoded-packet bag per packet on ``packets``: the bytes (Annex B), ``timestamp_ns`` (the frame's
own, exactly), ``duration_ns``, ``keyframe``, ``extradata`` (the codec's parameters), the
``encoder`` that made it and the size. Uses the machine's hardware encoder where one opens
({hardware}), {software} otherwise; ``tatolab graph`` shows which under the node's metrics.
Config: bitrate, keyframe_interval, preset, tune (zerolatency by default), encoder, options."""

_DECODER_DOC = """Decodes the {name} encoded-packet bags on ``packets`` (in order) and writes RGBA
frames on ``video``, each stamped with its packet's ``timestamp_ns``. Starts at the first
keyframe; a packet that does not decode is counted and skipped."""


@builtin("tatolab._builtins.codecs:H264Encoder")
@node
class H264Encoder:
    __doc__ = _ENCODER_DOC.format(name="H.264", hardware="NVENC, then VAAPI", software="x264")

    @node.input(delivery_profile="ordered")
    def video(self) -> dict: ...

    @node.output()
    def packets(self) -> dict: ...

    def __init__(self, config: H264EncoderConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the runtime's process for it, never here
        raise RuntimeError("H264Encoder runs inside the runtime")


@builtin("tatolab._builtins.codecs:H265Encoder")
@node
class H265Encoder:
    __doc__ = _ENCODER_DOC.format(name="H.265 (HEVC)", hardware="NVENC, then VAAPI", software="x265")

    @node.input(delivery_profile="ordered")
    def video(self) -> dict: ...

    @node.output()
    def packets(self) -> dict: ...

    def __init__(self, config: H265EncoderConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        raise RuntimeError("H265Encoder runs inside the runtime")


@builtin("tatolab._builtins.codecs:H264Decoder")
@node
class H264Decoder:
    __doc__ = _DECODER_DOC.format(name="H.264")

    @node.input(delivery_profile="ordered")
    def packets(self) -> dict: ...

    @node.output()
    def video(self) -> dict: ...

    def __init__(self, config: H264DecoderConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        raise RuntimeError("H264Decoder runs inside the runtime")


@builtin("tatolab._builtins.codecs:H265Decoder")
@node
class H265Decoder:
    __doc__ = _DECODER_DOC.format(name="H.265 (HEVC)")

    @node.input(delivery_profile="ordered")
    def packets(self) -> dict: ...

    @node.output()
    def video(self) -> dict: ...

    def __init__(self, config: H265DecoderConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        raise RuntimeError("H265Decoder runs inside the runtime")
