"""VirtualCameraSink: frames written to a v4l2loopback device, a camera other applications can select."""

from __future__ import annotations

import os
import time
from typing import Any

from tatolab._media import v4l2
from tatolab._sdk import builtins as described
from tatolab._sdk.builtins import VirtualCameraSinkConfig, implements
from tatolab._surfaces.frame import VideoFrame
from tatolab._sdk.context import RuntimeContextLimitedAccess

LOOK_AGAIN_S = 2.0  # while there is no device, look for one this often (as frames arrive)
SETUP = "run `sudo tatolab enable-virtual-camera` once (`tatolab enable-virtual-camera --print` shows the commands)"


def missing_device(config: VirtualCameraSinkConfig) -> tuple[str | None, str | None]:
    """(the loopback device to write, None) or (None, why there is none and what to do)."""
    if config.device is not None:
        path = v4l2.device_path(config.device)
        try:
            capability = v4l2.query(path)
        except OSError as exc:
            if not v4l2.loopback_module_loaded():
                return None, f"there is no {path} ({exc.strerror}) and this kernel has no v4l2loopback loaded; {SETUP}"
            return None, f"{path} cannot be opened ({exc.strerror}); v4l2loopback devices here: {_listed()}"
        if not capability.loopback:
            return None, (f"{path} is a {capability.driver} device ({capability.card}), not a v4l2loopback one; "
                          f"v4l2loopback devices here: {_listed()}")
        return str(path), None
    found = v4l2.loopbacks()
    if found:
        return str(found[0]), None
    if not v4l2.loopback_module_loaded():
        return None, f"this kernel has no v4l2loopback loaded, so there is no virtual camera to write to; {SETUP}"
    return None, f"v4l2loopback is loaded but has no device; {SETUP}"


def _listed() -> str:
    return ", ".join(str(p) for p in v4l2.loopbacks()) or "none"


@implements
class VirtualCameraSink(described.VirtualCameraSink):
    def __init__(self, config: VirtualCameraSinkConfig) -> None:
        self.config = config
        self.fd: int | None = None
        self.device: str | None = None
        self.size: tuple[int, int] | None = None
        self.looked_at = 0.0
        self.said: str | None = None
        self.dropped = 0

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        self._look(ctx)

    def _look(self, ctx: RuntimeContextLimitedAccess) -> bool:
        """Find the device; say once (an error, so `tatolab graph` shows it) when there is none."""
        self.looked_at = time.monotonic()
        device, why = missing_device(self.config)
        if device is None:
            if why != self.said:
                ctx.log.error(f"node {ctx.node} (VirtualCameraSink): {why}; its frames are dropped until then")
                self.said = why
            return False
        self.device = device
        if self.said is not None:
            ctx.log.info(f"{device} is there now; writing to it")
            self.said = None
        return True

    def _open(self, ctx: RuntimeContextLimitedAccess, width: int, height: int) -> None:
        assert self.device is not None
        fd = os.open(self.device, os.O_WRONLY | os.O_CLOEXEC)
        try:
            v4l2.set_output_format(fd, width, height, self.config.pixel_format)
        except OSError:
            os.close(fd)
            raise
        self.fd, self.size = fd, (width, height)
        ctx.log.info(f"other applications can select {self.device} now "
                     f"({width}x{height} {self.config.pixel_format})", device=self.device)

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        frame = ctx.inputs.read("video", into=VideoFrame)
        if frame is None:
            return
        if self.fd is None and (self.device is None and not self._found_again(ctx)):
            self.dropped += 1
            frame.release()
            return
        width = self.config.width or frame.width
        height = self.config.height or frame.height
        if self.config.pixel_format == "yuyv422":
            width -= width % 2
        if self.fd is None:
            try:
                self._open(ctx, *(self.size or (width, height)))
            except OSError as exc:
                ctx.log.error(f"node {ctx.node} (VirtualCameraSink): {self.device} cannot be written: "
                              f"{exc.strerror or exc}; another program may be writing to it, close it")
                self.device = None
                self.said = "unwritable"
                self.dropped += 1
                frame.release()
                return
        assert self.fd is not None and self.size is not None  # _open set both, or returned above
        data = converted(frame.cpu(), *self.size, self.config.pixel_format)
        frame.release()
        try:
            os.write(self.fd, data)
        except OSError as exc:
            ctx.log.error(f"node {ctx.node} (VirtualCameraSink): writing to {self.device} failed: "
                          f"{exc.strerror or exc}; opening it again", device=self.device)
            self._close()

    def _found_again(self, ctx: RuntimeContextLimitedAccess) -> bool:
        return time.monotonic() - self.looked_at >= LOOK_AGAIN_S and self._look(ctx)

    def _close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None
        self.device = None

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.dropped:
            ctx.log.info(f"{self.dropped} frames dropped with no virtual camera to write to",
                         dropped=self.dropped)
        self._close()


def converted(rgba: Any, width: int, height: int, pixel_format: str) -> bytes:
    """An RGBA8 image as one frame of ``pixel_format`` at ``width`` x ``height`` (scaled by swscale)."""
    import av

    picture = av.VideoFrame.from_ndarray(rgba, format="rgba").reformat(width=width, height=height,
                                                                         format=pixel_format)
    return picture.to_ndarray().tobytes()
