"""A window on the user's display that shows RGBA frames: GLFW for the window (X11 or Wayland),
moderngl for drawing (the GPU where there is one, Mesa's software renderer otherwise)."""

from __future__ import annotations

import contextlib
import os
import struct
from typing import Any, Callable, Iterator, Mapping

from tatolab._builtins import x11_errors

VERTEX = """
#version 330
in vec2 position;
uniform vec4 uv_rect;  // the part of the frame shown: left, top, right, bottom, in 0..1
out vec2 v_uv;
void main() {
    vec2 t = vec2(position.x * 0.5 + 0.5, 0.5 - position.y * 0.5);  // frame row 0 at the window's top
    v_uv = mix(uv_rect.xy, uv_rect.zw, t);
    gl_Position = vec4(position, 0.0, 1.0);
}
"""

FRAGMENT = """
#version 330
uniform sampler2D frame;
in vec2 v_uv;
out vec4 f_color;
void main() { f_color = vec4(texture(frame, v_uv).rgb, 1.0); }
"""

Viewport = tuple[int, int, int, int]  # x, y (from the bottom left), width, height in pixels
UvRect = tuple[float, float, float, float]


class NoDisplay(Exception):
    """No display to open a window on; the message says why and what to set."""


def placement(frame: tuple[int, int], window: tuple[int, int], scaling: str) -> tuple[Viewport, UvRect]:
    """Where a ``frame`` (width, height) goes in a ``window`` (framebuffer width, height):
    ``fit`` keeps the whole frame and its aspect (black bars), ``fill`` fills the window and
    keeps the aspect (the frame's edges cut), ``stretch`` fills it and ignores the aspect."""
    fw, fh = frame
    ww, wh = window
    if scaling == "stretch" or ww <= 0 or wh <= 0:
        return (0, 0, max(ww, 0), max(wh, 0)), (0.0, 0.0, 1.0, 1.0)
    if scaling == "fit":
        scale = min(ww / fw, wh / fh)
        w, h = min(ww, round(fw * scale)), min(wh, round(fh * scale))
        return ((ww - w) // 2, (wh - h) // 2, w, h), (0.0, 0.0, 1.0, 1.0)
    if scaling == "fill":
        scale = max(ww / fw, wh / fh)
        du, dv = (1 - ww / scale / fw) / 2, (1 - wh / scale / fh) / 2
        return (0, 0, ww, wh), (du, dv, 1 - du, 1 - dv)
    raise ValueError(f"scaling must be fit, fill or stretch, not {scaling!r}")


def display_named(env: Mapping[str, str]) -> str:
    """The display a window would open on, or NoDisplay when the environment names none."""
    wayland, x11 = env.get("WAYLAND_DISPLAY", ""), env.get("DISPLAY", "")
    if not wayland and not x11:
        raise NoDisplay(
            "neither DISPLAY nor WAYLAND_DISPLAY is set in the environment of the "
            "command that loaded the stream. Load it from a desktop session's terminal, or as "
            "DISPLAY=:0 tatolab run"
        )
    return f"DISPLAY={x11}" if x11 else f"WAYLAND_DISPLAY={wayland}"


def _glfw() -> Any:
    """The GLFW binding, with its X11 or Wayland build chosen by the display the environment names
    (the package reads PYGLFW_LIBRARY_VARIANT when it is first imported). X11 wherever DISPLAY is
    set, Xwayland included: the wheel's GLFW 3.4.0 crashes in glfwInit on a Wayland compositor
    that offers no seat (weston's headless backend), so Wayland is used only where it is all there is."""
    if "PYGLFW_LIBRARY_VARIANT" not in os.environ:
        os.environ["PYGLFW_LIBRARY_VARIANT"] = "x11" if os.environ.get("DISPLAY") else "wayland"
    import glfw

    glfw.ERROR_REPORTING = "warn"  # while frames are shown: a GLFW error is a line in the log, never an end
    return glfw


@contextlib.contextmanager
def _raising(glfw: Any) -> Iterator[None]:
    """GLFW errors raised as GLFWError, while opening something that may not be there."""
    glfw.ERROR_REPORTING = "raise"
    try:
        yield
    finally:
        glfw.ERROR_REPORTING = "warn"


class Screen:
    """GLFW, started on the display the environment names; raises NoDisplay when it cannot connect.
    ``on_lost_connection`` is called (on X11) just before a lost display connection ends the process."""

    def __init__(self, on_lost_connection: Callable[[], None] = lambda: None) -> None:
        where = display_named(os.environ)
        try:
            self.glfw = _glfw()
        except ImportError as exc:
            raise NoDisplay(f"the GLFW library could not be loaded ({exc}); reinstall the runtime") from None
        try:
            with _raising(self.glfw):
                ok = self.glfw.init()
        except self.glfw.GLFWError as exc:
            raise NoDisplay(f"the display could not be opened ({where}): {exc}") from None
        if not ok:
            raise NoDisplay(f"the display could not be opened ({where})")
        self.where = where
        self.x11 = self.glfw.get_platform() == self.glfw.PLATFORM_X11 and x11_errors.install(on_lost_connection)

    def close(self) -> None:
        self.glfw.terminate()


class Window:
    """One window showing frames, scaled by ``scaling``; raises NoDisplay when it cannot be made."""

    def __init__(self, screen: Screen, title: str, size: tuple[int, int], scaling: str, vsync: bool) -> None:
        import moderngl

        glfw = self.glfw = screen.glfw
        self.scaling = scaling
        glfw.default_window_hints()
        glfw.window_hint(glfw.CONTEXT_VERSION_MAJOR, 3)
        glfw.window_hint(glfw.CONTEXT_VERSION_MINOR, 3)
        glfw.window_hint(glfw.OPENGL_PROFILE, glfw.OPENGL_CORE_PROFILE)
        glfw.window_hint(glfw.OPENGL_FORWARD_COMPAT, True)
        try:
            with _raising(glfw):
                self.handle = glfw.create_window(size[0], size[1], title, None, None)
        except glfw.GLFWError as exc:
            raise NoDisplay(f"no window with OpenGL 3.3 could be opened on {screen.where}: {exc}") from None
        if not self.handle:
            raise NoDisplay(f"no window with OpenGL 3.3 could be opened on {screen.where}")
        self.x11_id = glfw.get_x11_window(self.handle) if screen.x11 else None
        glfw.make_context_current(self.handle)
        glfw.swap_interval(1 if vsync else 0)
        self.gl: Any = None
        try:
            self.gl = moderngl.create_context()
            self.program = self.gl.program(vertex_shader=VERTEX, fragment_shader=FRAGMENT)
            quad = self.gl.buffer(b"".join(struct.pack("2f", x, y) for x, y in ((-1, -1), (1, -1), (-1, 1), (1, 1))))
            self.vao = self.gl.vertex_array(self.program, [(quad, "2f", "position")])
        except Exception as exc:  # moderngl.Error, or a driver without what the shaders need
            self.close()
            raise NoDisplay(f"OpenGL could not draw in a window on {screen.where}: {exc}") from None
        self.texture: Any = None
        self.damaged = False  # uncovered or resized since the last draw
        glfw.set_window_refresh_callback(self.handle, self._refresh)

    def _refresh(self, handle: Any) -> None:
        self.damaged = True

    def answer(self) -> bool:
        """Handle the window's events, drawing the last frame again where it was uncovered or
        resized; True once it was asked to close (its close button, the window manager) or was
        destroyed from outside (``xdotool windowclose``)."""
        self.glfw.poll_events()
        gone = bool(self.glfw.window_should_close(self.handle)) or self.x11_id in x11_errors.gone
        if self.damaged and self.texture is not None and not gone:
            self._draw()
        return gone

    def show(self, pixels: Any, width: int, height: int) -> None:
        """Draw one RGBA8 frame (a buffer of width * height * 4 bytes, top row first) and present it."""
        if self.texture is None or self.texture.size != (width, height):
            if self.texture is not None:
                self.texture.release()
            self.texture = self.gl.texture((width, height), 4)
            self.texture.filter = (self.gl.LINEAR, self.gl.LINEAR)
        self.texture.write(pixels)
        self._draw()

    def _draw(self) -> None:
        self.damaged = False
        size = self.glfw.get_framebuffer_size(self.handle)
        viewport, uv = placement(self.texture.size, size, self.scaling)
        self.gl.screen.use()
        self.gl.viewport = (0, 0, *size)
        self.gl.clear(0.0, 0.0, 0.0, 1.0)
        self.gl.viewport = viewport
        self.program["uv_rect"].value = uv
        self.texture.use(0)
        self.vao.render(self.gl.TRIANGLE_STRIP)
        self.glfw.swap_buffers(self.handle)

    def close(self) -> None:
        if self.gl is not None:
            self.gl.release()
        self.glfw.destroy_window(self.handle)
