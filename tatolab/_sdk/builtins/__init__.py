"""Built-in nodes as the SDK carries them: ports, config type with defaults, docstring.

Their code ships with the runtime's install (``tatolab._builtins``) and runs in processes the
runtime starts from its own interpreter, so a project's ``.venv`` needs nothing heavy to use
them. ``@builtin`` (in ``marks``) records which implementation the graph names. One module per
family of nodes (video here; window, camera, codecs, recording, audio beside it), re-exported here.
"""

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
from tatolab._sdk.builtins.marks import IMPLEMENTATIONS, builtin, implementation_of
from tatolab._sdk.builtins.recording import Mp4Sink, Mp4SinkConfig
from tatolab._sdk.builtins.video import (
    GlslPixelEffect,
    GlslPixelEffectConfig,
    TestPatternConfig,
    TestPatternSource,
)

__all__ = [
    "H264Decoder",
    "H264DecoderConfig",
    "H264Encoder",
    "H264EncoderConfig",
    "H265Decoder",
    "H265DecoderConfig",
    "H265Encoder",
    "H265EncoderConfig",
    "IMPLEMENTATIONS",
    "Mp4Sink",
    "Mp4SinkConfig",
    "GlslPixelEffect",
    "GlslPixelEffectConfig",
    "TestPatternConfig",
    "TestPatternSource",
    "builtin",
    "implementation_of",
]
