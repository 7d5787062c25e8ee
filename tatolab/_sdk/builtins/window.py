"""The window built-in as the SDK carries it: DisplayWindow."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

from tatolab._sdk.builtins.marks import builtin
from tatolab._sdk.nodes import node

if TYPE_CHECKING:
    from tatolab._sdk.context import RuntimeContextLimitedAccess

SCALINGS = ("fit", "fill", "stretch")


@dataclass
class DisplayWindowConfig:
    """``title`` (default: the node's address, ``stream/node``); ``width`` and ``height`` of the
    window in pixels (default: the first frame's size); ``scaling``: ``fit`` (the whole frame,
    black bars around it), ``fill`` (the window full, the frame's edges cut) or ``stretch``;
    ``vsync``: wait for the display's refresh before showing a frame."""

    title: str | None = None
    width: int | None = None
    height: int | None = None
    scaling: str = "fit"
    vsync: bool = True

    def __post_init__(self) -> None:
        if self.title is not None and not isinstance(self.title, str):
            raise ValueError(f"title must be text, got {self.title!r}")
        for field in ("width", "height"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 16 <= value <= 16384):
                raise ValueError(f"{field} must be a whole number of pixels from 16 to 16384 (or left out "
                                 f"for the frame's own), got {value!r}")
        if self.scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {', '.join(SCALINGS)}, got {self.scaling!r}")
        if not isinstance(self.vsync, bool):
            raise ValueError(f"vsync must be true or false, got {self.vsync!r}")


@builtin("tatolab._builtins.window:DisplayWindow")
@node
class DisplayWindow:
    """Shows the newest frame on ``video`` in a window of its own (OpenGL through GLFW, on X11 where
    DISPLAY is set, else Wayland: WAYLAND_DISPLAY, in the environment of the command that loads the stream),
    scaled to the window as ``scaling`` says. Several windows in one stream each get their own.
    Closing the window is logged and the node stays: it counts the frames it no longer shows as
    dropped on its input (`tatolab graph`), until the stream is started again. With no display it
    says so once in the log and counts the frames it drops the same way."""

    @node.input(delivery_profile="newest")
    def video(self) -> dict: ...

    def __init__(self, config: DisplayWindowConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the runtime's process for it, never here
        raise RuntimeError("DisplayWindow runs inside the runtime")
