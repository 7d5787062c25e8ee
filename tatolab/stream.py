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
from tatolab._sdk.nodes import node

__all__ = [
    "Exposure",
    "InputRef",
    "NodeHandle",
    "OutputRef",
    "RemoteOutputRef",
    "RuntimeContextLimitedAccess",
    "StreamBuilder",
    "node",
    "stream",
]
