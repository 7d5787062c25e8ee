"""Camera built-ins as the SDK carries them: CameraSource and VirtualCameraSink (Linux)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tatolab._sdk.builtins.marks import builtin
from tatolab._sdk.nodes import node

if TYPE_CHECKING:
    from tatolab._sdk.context import RuntimeContextLimitedAccess

CAMERA_FORMATS = ("yuyv422", "mjpeg", "nv12")  # what a CameraSource may ask of the camera
VIRTUAL_FORMATS = ("yuyv422", "rgb24")  # what a VirtualCameraSink offers other applications
FALLBACKS = ("test_pattern",)


def _pixels(name: str, value: Any, optional: bool = True) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 16 <= value <= 8192:
        raise ValueError(f"{name} must be a whole number of pixels from 16 to 8192, got {value!r}")


def _even(name: str, value: int | None) -> None:
    if value is not None and value % 2:
        raise ValueError(f"{name} must be even for yuyv422 (two pixels share their colour), got {value}")


@dataclass
class CameraSourceConfig:
    """Which camera (``device``: a path such as /dev/video2 or /dev/v4l/by-id/..., or an index; the
    first camera when neither it nor ``source`` is given), or an FFmpeg input instead (``source``: a
    file, a URL, or a test source such as ``testsrc2=size=640x360:rate=30``). ``width``,
    ``height``, ``fps`` and ``pixel_format`` are asked of the camera (None: its own); frames come
    out at ``width`` x ``height`` whatever it gives. ``loop`` plays a file again at its end.
    ``fallback="test_pattern"`` shows the test pattern where no camera exists, and says so in the log."""

    device: str | int | None = None
    source: str | None = None
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    pixel_format: str | None = None
    loop: bool = False
    fallback: str | None = None

    def __post_init__(self) -> None:
        if self.device is not None and self.source is not None:
            raise ValueError("give a camera (device=) or an FFmpeg input (source=), not both")
        if isinstance(self.device, bool) or (isinstance(self.device, int) and self.device < 0):
            raise ValueError(f"device must be a path such as /dev/video0 or an index from 0, got {self.device!r}")
        if isinstance(self.device, str) and not self.device:
            raise ValueError("device must be a path such as /dev/video0 or an index from 0, got ''")
        if self.source is not None and not self.source.strip():
            raise ValueError("source must be a file, a URL or an FFmpeg test source such as "
                             "testsrc2=size=640x360:rate=30, got ''")
        _pixels("width", self.width)
        _pixels("height", self.height)
        if (self.width is None) != (self.height is None):
            raise ValueError("give width and height together (or neither, for the camera's own size)")
        if self.fps is not None and (isinstance(self.fps, bool) or not isinstance(self.fps, (int, float))
                                     or not 0 < self.fps <= 240):
            raise ValueError(f"fps must be a number of frames a second above 0 and at most 240, got {self.fps!r}")
        if self.pixel_format is not None and self.pixel_format not in CAMERA_FORMATS:
            raise ValueError(f"pixel_format must be one of {', '.join(CAMERA_FORMATS)} (or None for the camera's "
                             f"own), got {self.pixel_format!r}")
        if self.fallback is not None and self.fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {', '.join(FALLBACKS)} or None, got {self.fallback!r}")


@builtin("tatolab._builtins.camera:CameraSource")
@node(execution="thread")
class CameraSource:
    """A camera (V4L2 on Linux) or an FFmpeg input (a file, a URL, a test source) as RGBA8 frames on
    ``video``, each stamped with the monotonic clock when it arrives. The camera's own format
    (YUYV, MJPEG, NV12) is converted. Only one stream at a time can open a camera: a second stream
    asking for it is refused when it loads, naming the stream that holds it; a camera that does not
    exist is refused at load too, and one that cannot be opened is logged by name. Files play at
    their own pace."""

    @node.output()
    def video(self) -> dict: ...

    def __init__(self, config: CameraSourceConfig) -> None:
        self.config = config

    def run(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the node host, on its thread (tatolab/_builtins/camera.py)
        raise RuntimeError("CameraSource runs inside the runtime")


@dataclass
class VirtualCameraSinkConfig:
    """``device``: the v4l2loopback device to write (a path or an index; the first one when None).
    ``width``/``height``: the size other applications see (None: the first frame's).
    ``pixel_format``: yuyv422 (what most applications take) or rgb24."""

    device: str | int | None = None
    width: int | None = None
    height: int | None = None
    pixel_format: str = "yuyv422"

    def __post_init__(self) -> None:
        if isinstance(self.device, bool) or (isinstance(self.device, int) and self.device < 0):
            raise ValueError(f"device must be a path such as /dev/video10 or an index from 0, got {self.device!r}")
        _pixels("width", self.width)
        _pixels("height", self.height)
        if (self.width is None) != (self.height is None):
            raise ValueError("give width and height together (or neither, for the first frame's size)")
        if self.pixel_format not in VIRTUAL_FORMATS:
            raise ValueError(f"pixel_format must be one of {', '.join(VIRTUAL_FORMATS)}, got {self.pixel_format!r}")
        if self.pixel_format == "yuyv422":
            _even("width", self.width)


@builtin("tatolab._builtins.virtual_camera:VirtualCameraSink")
@node
class VirtualCameraSink:
    """Linux: writes the newest frame on ``video`` to a v4l2loopback device, a camera other
    applications (browsers, video calls) can select. `tatolab enable-virtual-camera` sets up the
    kernel module once. Where there is no v4l2loopback device, the node says so when it starts (in
    the stream's log and `tatolab graph`'s last_error) and counts the frames it drops; the rest of
    the stream runs on, and it starts writing once the device appears."""

    @node.input(delivery_profile="newest")
    def video(self) -> dict: ...

    def __init__(self, config: VirtualCameraSinkConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the runtime's process for it, never here
        raise RuntimeError("VirtualCameraSink runs inside the runtime")
