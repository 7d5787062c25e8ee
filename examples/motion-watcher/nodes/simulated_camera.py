import math
import random

from tatolab.stream import RuntimeContextLimitedAccess, node

WIDTH = 32
HEIGHT = 24


@node(execution="continuous", interval_ms=100)
class SimulatedCamera:
    """Stands in for a camera: small grey frames as bytes, with a bright square that now and then moves."""

    @node.output()
    def frames(self) -> dict: ...

    def __init__(self) -> None:
        self.frame_index = 0
        self.x = 4

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        self.frame_index += 1
        if random.random() < 0.3:  # something moves in about a third of the frames
            self.x = int((WIDTH - 8) * (0.5 + 0.5 * math.sin(self.frame_index)))
        pixels = bytearray([40] * (WIDTH * HEIGHT))
        for row in range(8, 16):
            start = row * WIDTH + self.x
            pixels[start:start + 8] = bytes([220] * 8)
        ctx.outputs.write("frames", {
            "width": WIDTH, "height": HEIGHT, "pixels": bytes(pixels),
            "frame": self.frame_index, "timestamp_ns": ctx.time,
        })
