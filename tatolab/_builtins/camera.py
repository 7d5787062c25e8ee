"""CameraSource: a V4L2 camera or an FFmpeg input, decoded by PyAV (FFmpeg) into RGBA8 frames."""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from tatolab._media import v4l2
from tatolab._builtins.camera_lock import CameraLock
from tatolab._builtins.test_pattern import TestPatternSource
from tatolab._builtins.waiting import Waiting
from tatolab._sdk import builtins as described
from tatolab._sdk.builtins import CameraSourceConfig, TestPatternConfig, implements
from tatolab._surfaces.frame import VideoFrame
from tatolab._surfaces.pool import PoolExhausted
from tatolab._sdk.context import RuntimeContextLimitedAccess

RETRY_S = 2.0  # a camera that cannot be opened is tried again this often (it may be plugged in later)
LIVE_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "udp", "rtp", "srt", "tcp")  # pace themselves


@dataclass(frozen=True)
class Input:
    """What to open: ``url`` with FFmpeg's ``format`` and ``options``; ``paced``: played at its own
    pace by this node (a file, a test source), not by the device or sender."""

    url: str
    label: str  # in messages: "camera /dev/video0", "file clip.mp4"
    format: str | None
    options: dict[str, str]
    paced: bool
    camera: bool = False


class CannotOpen(Exception):
    """The input cannot be opened; the message names it and says what to do."""


def camera_input(config: CameraSourceConfig) -> Input:
    device = v4l2.resolve_camera(config.device)
    if device is None:
        asked = "no camera on this machine" if config.device is None else \
            f"no camera at {v4l2.device_path(config.device)}"
        raise CannotOpen(f"{asked}; plug one in, choose another with device=, or give an FFmpeg input with source=")
    options = {}
    if config.width is not None:
        options["video_size"] = f"{config.width}x{config.height}"
    if config.fps is not None:
        options["framerate"] = f"{config.fps:g}"
    if config.pixel_format is not None:
        options["input_format"] = config.pixel_format
    return Input(device, f"camera {device}", "v4l2", options, paced=False, camera=True)


def ffmpeg_input(source: str) -> Input:
    """A URL, a file in the project folder, or an FFmpeg test source (lavfi: testsrc2=size=...)."""
    import av.filter

    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", source)
    if scheme:
        return Input(source, source, None, {}, paced=scheme.group(1).lower() not in LIVE_SCHEMES)
    if os.path.exists(source):
        return Input(source, f"file {source}", None, {}, paced=True)
    name = re.match(r"[a-z0-9_]+", source)
    if name and name.group(0) in av.filter.filters_available:
        return Input(source, f"test source {source}", "lavfi", {}, paced=True)
    raise CannotOpen(f"source {source!r} is no file in {os.getcwd()}, no URL and no FFmpeg test source; "
                     "give a file path, a URL such as rtsp://..., or a test source such as "
                     "testsrc2=size=640x360:rate=30")


def open_failure(what: Input, exc: BaseException) -> str:
    """Why ``what`` could not be opened, and the fix, in words."""
    code = getattr(exc, "errno", None)
    if what.camera and code == errno.EBUSY:
        return (f"{what.label} is busy: another program (or another runtime's stream) has it open; "
                "close it there, only one can use a camera at a time")
    if what.camera and code in (errno.EACCES, errno.EPERM):
        return (f"{what.label} cannot be opened: permission denied; add yourself to its group "
                f"(`sudo usermod -aG video $USER`, then log in again)")
    if what.camera and code == errno.ENOENT:
        return f"{what.label} is gone (unplugged?); plug it in again"
    if what.camera:
        asked = ", ".join(f"{k}={v}" for k, v in what.options.items()) or "its default format"
        return (f"{what.label} refused {asked}: {exc}; ask for a size, fps or pixel_format it offers "
                f"(`v4l2-ctl --list-formats-ext -d {what.url}` lists them)")
    return f"{what.label} cannot be opened: {exc}"


@implements
class CameraSource(described.CameraSource):
    def __init__(self, config: CameraSourceConfig) -> None:
        self.config = config
        self.stopping = threading.Event()  # run() replaces it with ctx.stopping
        self.fallback: TestPatternSource | None = None
        self.last_ns = 0
        self.lock: CameraLock | None = None

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        c = self.config
        if c.source is None and c.fallback == "test_pattern" and v4l2.resolve_camera(c.device) is None:
            where = "this machine has no camera" if c.device is None else f"no camera at {v4l2.device_path(c.device)}"
            ctx.log.warning(f"{where}: showing the test pattern instead (fallback=\"test_pattern\")",
                            fallback="test_pattern")
            self.fallback = TestPatternSource(TestPatternConfig(width=c.width or 1280, height=c.height or 720,
                                                                fps=c.fps or 30.0))

    def run(self, ctx: RuntimeContextLimitedAccess) -> None:
        """On the node host's thread (execution="thread"): the frames, until the end or ctx.stopping."""
        self.stopping = ctx.stopping
        if self.fallback is not None:
            self.fallback.run(ctx)
        else:
            self._play(ctx)

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.lock is not None:
            self.lock.release()

    def _play(self, ctx: RuntimeContextLimitedAccess) -> None:
        """Open, read to the end (a file) or for ever (a camera), again while ``loop`` or while it cannot open."""
        import av

        waiting = Waiting(ctx, every_s=RETRY_S, level="error")  # `graph`: waiting, with why, until it opens
        said: str | None = None
        index = 0
        while not self.stopping.is_set():
            what: Input | None = None
            try:
                what = ffmpeg_input(self.config.source) if self.config.source else camera_input(self.config)
                if what.camera:
                    self._hold(ctx, what)
                container = av.open(what.url, format=what.format, options=what.options, timeout=5.0)
                if not container.streams.video:
                    container.close()
                    raise CannotOpen(f"{what.label} has no video")
            except (CannotOpen, OSError, av.FFmpegError) as exc:
                why = str(exc) if isinstance(exc, CannotOpen) or what is None else open_failure(what, exc)
                waiting.on(f"node {ctx.node}: {why}")  # once per distinct reason, not every retry
                said = why
                self.stopping.wait(RETRY_S)
                continue
            if waiting.reason is not None:
                waiting.over(f"{what.label} opened")
                said = None
            elif said is not None:
                ctx.log.info(f"{what.label} opened")
                said = None
            else:
                ctx.log.info(f"reading {what.label}")
            before = index
            try:
                index = self._frames(ctx, container, what, index)
            except av.FFmpegError as exc:
                ctx.log.error(f"node {ctx.node}: {what.label} stopped giving frames: {exc}; opening it again")
                said = "stopped"
                self.stopping.wait(RETRY_S)
                continue
            finally:
                container.close()
            if self.stopping.is_set():
                return
            if not what.camera and not self.config.loop:
                ctx.log.info(f"end of {what.label} ({index} frames); loop=True plays it again")
                return
            # a looping file starts again; a camera that ended is opened again (not at once if it gave nothing)
            if index == before:
                self.stopping.wait(RETRY_S)

    def _hold(self, ctx: RuntimeContextLimitedAccess, what: Input) -> None:
        """Hold the camera for this stream while it runs, against streams of this user's other runtimes."""
        if self.lock is not None and self.lock.path.name != CameraLock(what.url, "").path.name:
            self.lock.release()  # the first camera is another one now
            self.lock = None
        if self.lock is None:
            self.lock = CameraLock(what.url, f"{ctx.stream}/{ctx.node}")
        held_by = self.lock.acquire()
        if held_by is not None:
            raise CannotOpen(f"{what.label} is held by the stream {held_by} of another Tatolab runtime of yours, "
                             "and only one stream at a time can open a camera; stop that stream there")

    def _frames(self, ctx: RuntimeContextLimitedAccess, container: Any, what: Input, index: int) -> int:
        video = container.streams.video[0]
        video.thread_type = "AUTO"
        started_ns: int | None = None
        first_s = 0.0
        for frame in _decoded(container, video):
            if self.stopping.is_set():
                break
            if what.paced:  # a file or a test source: one frame per its own frame time
                at_s = float(frame.time) if frame.time is not None else index / float(video.average_rate or 30)
                if started_ns is None:
                    started_ns, first_s = time.monotonic_ns(), at_s
                delay_ns = started_ns + int((at_s - first_s) * 1e9) - time.monotonic_ns()
                if delay_ns > 0 and self.stopping.wait(delay_ns / 1e9):
                    break
            self._send(ctx, frame, index, captured_ns(frame) if what.camera else None)
            index += 1
        return index

    def _send(self, ctx: RuntimeContextLimitedAccess, frame: Any, index: int, captured: int | None = None) -> None:
        stamp = max(captured or time.monotonic_ns(), self.last_ns + 1)  # at capture; strictly increasing
        self.last_ns = stamp
        width = self.config.width or frame.width
        height = self.config.height or frame.height
        rgba = frame.reformat(width=width, height=height, format="rgba").to_ndarray()
        try:
            out = VideoFrame.allocate(width, height, "rgba8", timestamp_ns=stamp)
        except PoolExhausted as exc:
            ctx.log.every(100, "warning", f"frame dropped: {exc}")
            return
        out.cpu(writable=True)[...] = rgba
        out.fields["frame_index"] = index
        ctx.outputs.write("video", out)


def captured_ns(frame: Any) -> int | None:
    """When the camera's driver captured ``frame``, on the monotonic clock: V4L2 stamps its buffers
    with CLOCK_MONOTONIC (in microseconds, which FFmpeg passes on as the pts). None where the stamp is
    not that (a driver on another clock, FFmpeg converting it), or not from the last second."""
    if frame.pts is None or frame.time_base is None or frame.time_base.denominator != 1_000_000 \
            or frame.time_base.numerator != 1:
        return None
    stamp = frame.pts * 1000
    return stamp if 0 <= time.monotonic_ns() - stamp < 1_000_000_000 else None


def _decoded(container: Any, video: Any) -> Iterator[Any]:
    for packet in container.demux(video):
        yield from packet.decode()
