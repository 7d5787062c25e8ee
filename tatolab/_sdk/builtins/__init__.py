"""Built-in nodes as the SDK carries them: ports, config type with defaults, docstring.

Their code ships with the runtime's install (``tatolab._builtins``) and runs in processes the
runtime starts from its own interpreter, so a project's ``.venv`` needs nothing heavy to use
them. ``@builtin`` (in ``marks``) records which implementation the graph names; that code
subclasses its description under ``@implements``, so ports, execution, config type and
docstring are declared once, here. One module per family of nodes (video here; window,
camera, codecs, recording, audio beside it), re-exported here.
"""

from tatolab._sdk.builtins.audio import (
    MicrophoneConfig,
    MicrophoneSource,
    OpusDecoder,
    OpusDecoderConfig,
    OpusEncoder,
    OpusEncoderConfig,
    SpeakerConfig,
    SpeakerSink,
)
from tatolab._sdk.builtins.camera import (
    CameraSource,
    CameraSourceConfig,
    VirtualCameraSink,
    VirtualCameraSinkConfig,
)
from tatolab._sdk.builtins.codecs import (
    H264Decoder,
    H264DecoderConfig,
    H264Encoder,
    H264EncoderConfig,
    H265Decoder,
    H265DecoderConfig,
    H265Encoder,
    H265EncoderConfig,
)
from tatolab._sdk.builtins.marks import (
    IMPLEMENTATIONS,
    builtin,
    implementation_of,
    implements,
)
from tatolab._sdk.builtins.recording import Mp4Sink, Mp4SinkConfig
from tatolab._sdk.builtins.video import (
    GlslPixelEffect,
    GlslPixelEffectConfig,
    TestPatternConfig,
    TestPatternSource,
)
from tatolab._sdk.builtins.window import DisplayWindow, DisplayWindowConfig

__all__ = [
    "CameraSource",
    "CameraSourceConfig",
    "DisplayWindow",
    "DisplayWindowConfig",
    "GlslPixelEffect",
    "GlslPixelEffectConfig",
    "H264Decoder",
    "H264DecoderConfig",
    "H264Encoder",
    "H264EncoderConfig",
    "H265Decoder",
    "H265DecoderConfig",
    "H265Encoder",
    "H265EncoderConfig",
    "IMPLEMENTATIONS",
    "MicrophoneConfig",
    "MicrophoneSource",
    "Mp4Sink",
    "Mp4SinkConfig",
    "OpusDecoder",
    "OpusDecoderConfig",
    "OpusEncoder",
    "OpusEncoderConfig",
    "SpeakerConfig",
    "SpeakerSink",
    "TestPatternConfig",
    "TestPatternSource",
    "VirtualCameraSink",
    "VirtualCameraSinkConfig",
    "builtin",
    "implementation_of",
    "implements",
]
