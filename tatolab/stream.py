"""The Tatolab API a project's ``stream.py`` and nodes use."""

from tatolab._sdk.builder import (
    Exposure,
    InputRef,
    NodeHandle,
    OutputRef,
    RemoteOutputRef,
    StreamBuilder,
    stream,
)
from tatolab._sdk.context import RuntimeContextLimitedAccess
from tatolab._sdk.builtins import GlslPixelEffect, TestPatternSource
from tatolab._sdk.builtins import H264Decoder, H264Encoder, H265Decoder, H265Encoder, Mp4Sink
from tatolab._sdk.nodes import node
from tatolab._surfaces.frame import VideoFrame

__all__ = [
    "Exposure",
    "GlslPixelEffect",
    "H264Decoder",
    "H264Encoder",
    "H265Decoder",
    "H265Encoder",
    "InputRef",
    "Mp4Sink",
    "NodeHandle",
    "OutputRef",
    "RemoteOutputRef",
    "RuntimeContextLimitedAccess",
    "StreamBuilder",
    "TestPatternSource",
    "VideoFrame",
    "node",
    "stream",
]
