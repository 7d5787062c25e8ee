"""Video built-ins as the SDK carries them: TestPatternSource and GlslPixelEffect."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

from tatolab._sdk.builtins.marks import builtin
from tatolab._sdk.nodes import node

if TYPE_CHECKING:
    from tatolab._sdk.context import RuntimeContextLimitedAccess


PATTERNS = ("bars", "ramp")


@dataclass
class TestPatternConfig:
    width: int = 1280
    height: int = 720
    fps: float = 30.0
    pattern: str = "bars"

    def __post_init__(self) -> None:
        for field in ("width", "height"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or not 16 <= value <= 8192:
                raise ValueError(f"{field} must be a whole number of pixels from 16 to 8192, got {value!r}")
        if isinstance(self.fps, bool) or not isinstance(self.fps, (int, float)) or not 0 < self.fps <= 240:
            raise ValueError(f"fps must be a number of frames a second above 0 and at most 240, got {self.fps!r}")
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {', '.join(PATTERNS)}, got {self.pattern!r}")


@builtin("tatolab._builtins.test_pattern:TestPatternSource")
@node(execution="thread")
class TestPatternSource:
    """Colour bars (or a ramp) with a white square crossing the band below them, so motion and
    dropped frames show. Writes RGBA8 frames on ``video`` at ``fps``, stamped with the monotonic clock.
    Bars, left to right: white, yellow, cyan, green, magenta, red, blue, black."""

    __test__ = False  # not a pytest test class, despite its name

    @node.output()
    def video(self) -> dict: ...

    def __init__(self, config: TestPatternConfig) -> None:
        self.config = config

    def run(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the node host, on its thread (tatolab/_builtins/test_pattern.py)
        raise RuntimeError("TestPatternSource runs inside the runtime")


@dataclass
class GlslPixelEffectConfig:
    """One GLSL function, ``vec4 effect(vec4 color, vec2 uv)``, as ``source`` or a ``path`` in the project."""

    source: str | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        if (self.source is None) == (self.path is None):
            raise ValueError(
                "give the GLSL function as source= (the text) or path= (a file in the project), exactly one; "
                "it reads: vec4 effect(vec4 color, vec2 uv) { return color; }"
            )


@builtin("tatolab._builtins.glsl:GlslPixelEffect")
@node
class GlslPixelEffect:
    """Applies one GLSL function to every pixel of the newest frame on ``video`` and writes the
    result as a new frame: ``vec4 effect(vec4 color, vec2 uv)``, with ``color`` in 0..1 and
    ``uv`` from (0, 0) at the top left to (1, 1); ``time`` (the frame's timestamp in seconds) and
    ``resolution`` (its size in pixels) are there to use. Runs headless through EGL (on the GPU where
    there is one). A compile error is logged naming the node and the GLSL line."""

    @node.input(delivery_profile="newest")
    def video(self) -> dict: ...

    @node.output()
    def video_out(self) -> dict: ...

    def __init__(self, config: GlslPixelEffectConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the runtime's process for it, never here
        raise RuntimeError("GlslPixelEffect runs inside the runtime")
