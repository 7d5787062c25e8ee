"""GlslPixelEffect: one GLSL function applied to every pixel, headless through EGL."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

from tatolab._sdk import builtins as described
from tatolab._sdk.builtins import GlslPixelEffectConfig, implements
from tatolab._surfaces.frame import VideoFrame
from tatolab._surfaces.pool import PoolExhausted
from tatolab._sdk.context import RuntimeContextLimitedAccess

VERTEX = """
#version 330
in vec2 position;
out vec2 v_uv;
void main() {
    v_uv = position * 0.5 + 0.5;  // texture row 0 is the frame's top row, so uv (0, 0) is the top left
    gl_Position = vec4(position, 0.0, 1.0);
}
"""

PRELUDE = """#version 330
uniform sampler2D frame;
uniform float time;       // the frame's timestamp, in seconds on the monotonic clock
uniform vec2 resolution;  // the frame's width and height, in pixels
in vec2 v_uv;
out vec4 f_color;
"""

MAIN = """
void main() { f_color = effect(texture(frame, v_uv), v_uv); }
"""

_LINE = re.compile(r"^\d+:(\d+)\((\d+)\): (.*)$")


def fragment_source(effect: str) -> str:
    # "#line 1" makes the driver number the effect's own lines from 1
    return PRELUDE + "#line 1\n" + effect + "\n" + MAIN


def describe_compile_error(message: str, where: str) -> str:
    """Mesa's ``0:3(12): error: ...`` lines as ``<where> line 3: error: ...``."""
    lines = []
    for raw in message.splitlines():
        found = _LINE.match(raw.strip())
        if found:
            lines.append(f"{where} line {found.group(1)}: {found.group(3)}")
    return "; ".join(lines) or message.strip()


@implements
class GlslPixelEffect(described.GlslPixelEffect):
    def __init__(self, config: GlslPixelEffectConfig) -> None:
        self.config = config
        self.gl: Any = None
        self.program: Any = None
        self.broken = False
        self.dropped = 0
        self.size: tuple[int, int] | None = None

    def _source(self) -> tuple[str, str]:
        if self.config.path is not None:
            path = Path(self.config.path)
            return path.read_text(), str(self.config.path)
        return self.config.source or "", "the GLSL source"

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        import moderngl

        # moderngl's stub types each **settings keyword as Dict[str, Any]; backend is a str
        self.gl = moderngl.create_standalone_context(backend="egl")  # type: ignore[arg-type]
        effect, where = self._source()
        try:
            self.program = self.gl.program(vertex_shader=VERTEX, fragment_shader=fragment_source(effect))
        except moderngl.Error as exc:
            self.broken = True
            ctx.log.error(f"node {ctx.node}: GLSL error in {describe_compile_error(str(exc), where)}. "
                          "Fix it and save: `tatolab dev` reloads the stream", glsl=where)
            return
        quad = self.gl.buffer(b"".join(struct.pack("2f", x, y) for x, y in ((-1, -1), (1, -1), (-1, 1), (1, 1))))
        self.vao = self.gl.vertex_array(self.program, [(quad, "2f", "position")])

    def _target(self, width: int, height: int) -> None:
        if self.size == (width, height):
            return
        self.texture = self.gl.texture((width, height), 4)
        self.texture.filter = (self.gl.NEAREST, self.gl.NEAREST)
        self.fbo = self.gl.simple_framebuffer((width, height), components=4)
        self.size = (width, height)

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        frame = ctx.inputs.read("video", into=VideoFrame)
        if frame is None or self.broken:
            return
        self._target(frame.width, frame.height)
        self.texture.write(frame._memory())
        timestamp = frame.timestamp_ns
        frame.release()
        try:
            out = VideoFrame.allocate(frame.width, frame.height, "rgba8", timestamp_ns=timestamp)
        except PoolExhausted as exc:
            self.dropped += 1
            ctx.log.every(100, "warning", f"frame dropped: {exc}", dropped=self.dropped)
            return
        for name, value in (("time", timestamp / 1e9), ("resolution", (frame.width, frame.height))):
            if name in self.program:  # a uniform the effect does not use is compiled away
                self.program[name].value = value
        self.fbo.use()
        self.texture.use(0)
        self.vao.render(self.gl.TRIANGLE_STRIP)
        self.fbo.read_into(out._memory(), components=4)
        ctx.outputs.write("video_out", out)

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.gl is not None:
            self.gl.release()
