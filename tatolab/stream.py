"""The Tatolab API a project's ``stream.py`` and nodes use, and the errors they can meet."""

from tatolab._errors import AddressError, BagError, CannotRun, ConfigError, GraphError, NodeDefinitionError, TatolabError
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
from tatolab._sdk.audio import AudioBlock
from tatolab._sdk.builtins import MicrophoneSource, OpusDecoder, OpusEncoder, SpeakerSink
from tatolab._sdk.builtins import CameraSource, GlslPixelEffect, TestPatternSource, VirtualCameraSink
from tatolab._sdk.builtins import DisplayWindow
from tatolab._sdk.builtins import H264Decoder, H264Encoder, H265Decoder, H265Encoder, McapSource, Mp4Sink
from tatolab._sdk.nodes import node
from tatolab._recorder.testing import run_with_recording
from tatolab._host.kit import FakeContext, run_node
from tatolab._surfaces.frame import VideoFrame

__all__ = [
    "AddressError",
    "AudioBlock",
    "BagError",
    "CameraSource",
    "CannotRun",
    "ConfigError",
    "DisplayWindow",
    "Exposure",
    "FakeContext",
    "GlslPixelEffect",
    "GraphError",
    "H264Decoder",
    "H264Encoder",
    "H265Decoder",
    "H265Encoder",
    "InputRef",
    "McapSource",
    "MicrophoneSource",
    "Mp4Sink",
    "NodeDefinitionError",
    "NodeHandle",
    "OpusDecoder",
    "OpusEncoder",
    "OutputRef",
    "RemoteOutputRef",
    "RuntimeContextLimitedAccess",
    "SpeakerSink",
    "StreamBuilder",
    "TatolabError",
    "TestPatternSource",
    "VideoFrame",
    "VirtualCameraSink",
    "node",
    "run_node",
    "run_with_recording",
    "stream",
]
