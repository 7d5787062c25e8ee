"""TestPatternSource: colour bars and a moving square, paced by the monotonic clock."""

from __future__ import annotations

import time

import numpy as np

from tatolab._sdk import builtins as described
from tatolab._sdk.builtins import TestPatternConfig, implements
from tatolab._surfaces.frame import VideoFrame
from tatolab._surfaces.pool import PoolExhausted
from tatolab._sdk.context import RuntimeContextLimitedAccess

BARS = (  # RGB, left to right
    (255, 255, 255), (255, 255, 0), (0, 255, 255), (0, 255, 0),
    (255, 0, 255), (255, 0, 0), (0, 0, 255), (0, 0, 0),
)


def band_top(height: int) -> int:
    """The first row of the band under the bars, where the square moves."""
    return height * 7 // 8


def background(config: TestPatternConfig) -> np.ndarray:
    w, h = config.width, config.height
    image = np.zeros((h, w, 4), dtype=np.uint8)
    image[..., 3] = 255
    top = band_top(h)
    if config.pattern == "bars":
        for k, rgb in enumerate(BARS):
            image[:top, k * w // 8:(k + 1) * w // 8, :3] = rgb
    else:  # ramp: black to white, left to right
        image[:top, :, :3] = np.linspace(0, 255, w, dtype=np.float32).round().astype(np.uint8)[None, :, None]
    return image


def square_at(index: int, width: int, height: int) -> tuple[int, int, int]:
    """(left, top, size) of the moving square in frame ``index``."""
    size = max(1, height - band_top(height))
    travel = max(1, width - size)
    step = max(1, width // 120)  # about two seconds across at 60 fps
    return (index * step) % travel, band_top(height), size


@implements
class TestPatternSource(described.TestPatternSource):
    def __init__(self, config: TestPatternConfig) -> None:
        self.config = config
        self.image = background(config)

    def run(self, ctx: RuntimeContextLimitedAccess) -> None:
        """On the node host's thread (execution="thread"), until ctx.stopping."""
        period_ns = int(1e9 / self.config.fps)
        w, h = self.config.width, self.config.height
        index = 0
        next_ns = time.monotonic_ns()
        while not ctx.stopping.is_set():
            try:
                frame = VideoFrame.allocate(w, h, "rgba8")
            except PoolExhausted as exc:
                ctx.log.every(100, "warning", f"frame dropped: {exc}")
            else:
                pixels = frame.cpu(writable=True)
                pixels[...] = self.image
                left, top, size = square_at(index, w, h)
                pixels[top:top + size, left:left + size, :3] = 255
                frame.fields["frame_index"] = index
                ctx.outputs.write("video", frame)
                del frame, pixels
            index += 1
            next_ns += period_ns
            now = time.monotonic_ns()
            if next_ns < now - period_ns:  # fell behind by more than a frame: skip ahead, not burst
                next_ns = now
            delay = next_ns - now
            if delay > 0:
                ctx.stopping.wait(delay / 1e9)
