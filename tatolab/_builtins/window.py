"""DisplayWindow: the newest frame on ``video`` in a window; no display or a closed window
drops (and counts) frames instead of failing the stream."""

from __future__ import annotations

import time

from tatolab._builtins.screen import NoDisplay, Screen, Window
from tatolab._builtins.waiting import RECHECK_S, Waiting
from tatolab._sdk import builtins as described
from tatolab._sdk.builtins import DisplayWindowConfig, implements
from tatolab._surfaces.frame import VideoFrame
from tatolab._sdk.context import RuntimeContextLimitedAccess

DROPPED = "frames on its video input are counted as dropped (tatolab graph: the node's inputs)"
REPORT_S = 1.0  # how often the counts in the node's graph metrics are brought up to date


@implements
class DisplayWindow(described.DisplayWindow):
    def __init__(self, config: DisplayWindowConfig) -> None:
        self.config = config
        self.screen: Screen | None = None
        self.window: Window | None = None
        self.showing = True  # False once there is no display, or the window was closed
        self.shown = 0
        self.dropped = 0  # frames taken off the input and not shown, for want of a window
        self.reported = (0, 0)
        self.report_at = 0.0
        self.waiting: Waiting | None = None  # while there is no display: graph shows the node waiting
        self.recheck_at = 0.0

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        self.waiting = Waiting(ctx)
        self._open_screen(ctx)

    def _open_screen(self, ctx: RuntimeContextLimitedAccess) -> None:
        def lost() -> None:
            ctx.log.warning(f"node {ctx.node}: the connection to the display was closed (xkill, or the X server "
                            "ended); the runtime starts the node again, with a new window if there is a display")

        try:
            self.screen = Screen(on_lost_connection=lost)
        except NoDisplay as exc:
            self._no_display(ctx, exc)
        else:
            assert self.waiting is not None
            self.waiting.over(f"node {ctx.node}: the display {self.screen.where} is there now; "
                              "the window opens with the next frame")
            self.showing = True
            ctx.report(window="waiting for the first frame", display=self.screen.where, reason=None)

    def _no_display(self, ctx: RuntimeContextLimitedAccess, exc: NoDisplay) -> None:
        """No display (or none that answers): frames are dropped and counted, and it is looked for again."""
        assert self.waiting is not None
        self.showing = False
        self.recheck_at = time.monotonic() + RECHECK_S
        ctx.report(window="no display", reason=str(exc))
        self.waiting.on(f"node {ctx.node} shows no window: {exc}. Meanwhile {DROPPED}")
        self._tally(ctx, now=True)

    def _look_again(self, ctx: RuntimeContextLimitedAccess) -> None:
        """While there is no display, try it again every RECHECK_S (a closed window stays closed)."""
        if self.waiting is not None and self.waiting.reason is not None and time.monotonic() >= self.recheck_at:
            if self.screen is not None:
                self.screen.close()
                self.screen = None
            self._open_screen(ctx)

    def _stop_showing(self, ctx: RuntimeContextLimitedAccess, message: str, state: str, reason: str | None = None) -> None:
        self.showing = False
        ctx.log.warning(message, shown=self.shown)
        ctx.report(window=state, reason=reason)
        self._tally(ctx, now=True)

    def _tally(self, ctx: RuntimeContextLimitedAccess, now: bool = False) -> None:
        """The counts in ``tatolab graph``'s metrics for the node, at most once a second."""
        counts = (self.shown, self.dropped)
        if counts != self.reported and (now or time.monotonic() >= self.report_at):
            ctx.report(shown=self.shown, dropped_without_window=self.dropped)
            self.reported, self.report_at = counts, time.monotonic() + REPORT_S

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        if not self.showing:
            while ctx.inputs.drop("video"):
                self.dropped += 1
            self._tally(ctx)
            self._look_again(ctx)
            return
        frame = ctx.inputs.read("video", into=VideoFrame)
        if frame is None:
            return
        try:
            if self.window is None:
                self.window = self._open(ctx, frame)
            self.window.show(frame._memory(), frame.width, frame.height)
            self.shown += 1
        except NoDisplay as exc:
            self._no_display(ctx, exc)
        finally:
            frame.release()
        if self.window is not None and self.window.answer():
            self._closed(ctx)
        self._tally(ctx)

    idle_ms = 50  # between frames, the window answers its events this often (the node host calls idle)

    def idle(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.window is not None and self.window.answer():
            self._closed(ctx)
        self._tally(ctx)
        if not self.showing:
            self._look_again(ctx)

    def _open(self, ctx: RuntimeContextLimitedAccess, frame: VideoFrame) -> Window:
        assert self.screen is not None
        config = self.config
        size = (config.width or frame.width, config.height or frame.height)
        title = config.title if config.title is not None else f"{ctx.stream}/{ctx.node}"
        window = Window(self.screen, title, size, config.scaling, config.vsync)
        ctx.log.info(f"node {ctx.node}: window {title!r} open on {self.screen.where}, {size[0]}x{size[1]}, "
                     f"scaling {config.scaling}", width=size[0], height=size[1])
        ctx.report(window="open", title=title, width=size[0], height=size[1])
        return window

    def _closed(self, ctx: RuntimeContextLimitedAccess) -> None:
        assert self.window is not None
        self.window.close()
        self.window = None
        self._stop_showing(
            ctx, f"node {ctx.node}: its window was closed after {self.shown} frames; the stream goes on and "
                 f"{DROPPED}. Stop and start the stream to open it again", "closed")

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.window is not None:
            self.window.close()
        if self.screen is not None:
            self.screen.close()
