from dataclasses import dataclass

from tatolab.stream import RuntimeContextLimitedAccess, node


@dataclass
class MotionDetectorConfig:
    threshold: float = 10.0


@node
class MotionDetector:
    """Compares each frame with the one before and reports how much changed."""

    @node.input(delivery_profile="newest")
    def frames(self) -> dict: ...

    @node.output()
    def motion(self) -> dict: ...

    def __init__(self, config: MotionDetectorConfig) -> None:
        self.threshold = config.threshold
        self.previous: bytes | None = None

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        frame = ctx.inputs.read("frames")
        if frame is None:
            return
        pixels = frame["pixels"]
        if self.previous is not None:
            change = sum(abs(a - b) for a, b in zip(pixels, self.previous)) / len(pixels)
            if change >= self.threshold:
                ctx.outputs.write("motion", {
                    "frame": frame["frame"], "score": round(change, 2), "timestamp_ns": frame["timestamp_ns"],
                })
        self.previous = pixels
