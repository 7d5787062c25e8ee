from dataclasses import dataclass

import numpy as np

from tatolab.stream import RuntimeContextLimitedAccess, VideoFrame, node


@dataclass
class MotionDetectorConfig:
    threshold: float = 0.5  # mean change of a grey level (0..255) between two frames


@node
class MotionDetector:
    """Compares each frame with the one before and reports how much changed."""

    @node.input(delivery_profile="newest")
    def frames(self) -> dict: ...

    @node.output()
    def motion(self) -> dict: ...

    def __init__(self, config: MotionDetectorConfig) -> None:
        self.threshold = config.threshold
        self.previous: np.ndarray | None = None

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        frame = ctx.inputs.read("frames", into=VideoFrame)
        if frame is None:
            return
        # frame.cpu() is a view over the frame (no copy); every 4th pixel is enough to see motion
        grey = frame.cpu()[::4, ::4, :3].mean(axis=2)
        if self.previous is not None and self.previous.shape == grey.shape:
            change = float(np.abs(grey - self.previous).mean())
            if change >= self.threshold:
                ctx.outputs.write("motion", {
                    "frame": frame.fields.get("frame_index"), "score": round(change, 2),
                    "timestamp_ns": frame.timestamp_ns,
                })
        self.previous = grey
