"""Which stream may open a camera: on Linux only one at a time can, so a stream that asks for a
camera another stream holds is refused when it loads, naming the holder.

Plain data in, a refusal out: the runtime passes ``resolve`` (tatolab/_media/v4l2.py: which
device a CameraSource's ``device`` setting means on this machine, or None for none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from tatolab._graph import Graph
from tatolab._control.errors import ControlError, Fix

CAMERA_CLASS = "tatolab._builtins.camera:CameraSource"

Resolve = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class CameraUse:
    stream: str
    node: str
    device: str  # the canonical device path


@dataclass(frozen=True)
class Missing:
    """A CameraSource whose camera does not exist here (and which has no fallback)."""

    node: str
    asked: Any  # its ``device`` setting; None: the first camera


def cameras_of(stream: str, graph: Graph, resolve: Resolve) -> tuple[list[CameraUse], list[Missing]]:
    """The cameras ``graph``'s CameraSource nodes open, and those that name no camera here.
    A node reading an FFmpeg input (``source``) or falling back to the test pattern opens none."""
    uses, missing = [], []
    for node in graph.get("nodes", []):
        if node.get("class") != CAMERA_CLASS or not node.get("builtin"):
            continue
        config = node.get("config") or {}
        if config.get("source") is not None:
            continue
        device = resolve(config.get("device"))
        if device is not None:
            uses.append(CameraUse(stream, node["name"], device))
        elif config.get("fallback") is None:
            missing.append(Missing(node["name"], config.get("device")))
    return uses, missing


def refusal(stream: str, loading: list[CameraUse], missing: list[Missing],
            running: Iterable[CameraUse]) -> ControlError | None:
    """Why ``stream`` cannot open its cameras, or None."""
    for gone in missing:
        asked = "this machine has no camera" if gone.asked is None else f"there is no camera {gone.asked}"
        return ControlError(
            f"stream {stream} cannot start: its node {gone.node} (CameraSource) asks for a camera and {asked}; "
            "plug one in, choose another with device=, give an FFmpeg input (a file, a URL) with source=, "
            "or set fallback=\"test_pattern\"",
            code="camera_missing", details={"stream": stream, "node": gone.node, "device": gone.asked})
    holders = {use.device: use for use in running}
    for use in loading:
        holder = holders.get(use.device)
        if holder is not None and holder.stream != stream:
            return ControlError(
                f"stream {stream} cannot open the camera {use.device} (node {use.node}): the stream "
                f"{holder.stream} has it open (node {holder.node}), and only one stream at a time can open a camera",
                code="camera_held", fixes=[Fix("stop", {"name": holder.stream}, "stop the stream that holds it")],
                details={"stream": stream, "node": use.node, "device": use.device, "holder": holder.stream})
    for first, second in _pairs(loading):
        if first.device == second.device:
            return ControlError(
                f"stream {stream}: its nodes {first.node} and {second.node} both open the camera {first.device}, "
                "and a camera opens once; read it with one CameraSource and connect its video to both",
                code="camera_twice", details={"stream": stream, "device": first.device})
    return None


def _pairs(uses: list[CameraUse]) -> Iterable[tuple[CameraUse, CameraUse]]:
    for i, first in enumerate(uses):
        for second in uses[i + 1:]:
            yield first, second
