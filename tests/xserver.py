"""A private X server (Xvfb) for tests and bench: started on a display number it picks itself,
its windows found by title, looked at and closed as a window manager would close them."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
from typing import Any

from harness import wait_for


class XServer:
    def __init__(self, width: int = 1280, height: int = 800) -> None:
        binary = shutil.which("Xvfb")
        if binary is None:
            raise FileNotFoundError("Xvfb is not installed (apt-get install xvfb; .ci/run does)")
        read_fd, write_fd = os.pipe()
        # -displayfd: Xvfb takes the first free display number and writes it here once it listens
        self.process = subprocess.Popen(
            [binary, "-displayfd", str(write_fd), "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp"],
            pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        os.close(write_fd)
        number = b""
        try:  # read up to the newline: Xvfb writes it apart, and closing before it would SIGPIPE Xvfb
            while not number.endswith(b"\n") and select.select([read_fd], [], [], 30)[0]:
                chunk = os.read(read_fd, 32)
                if not chunk:
                    break
                number += chunk
        finally:
            os.close(read_fd)
        number = number.strip()
        if not number:
            self.stop()
            raise RuntimeError("Xvfb did not start")
        self.display = f":{number.decode()}"
        from Xlib import display

        self.x = display.Display(self.display)

    def stop(self) -> None:
        if getattr(self, "x", None) is not None:
            self.x.close()
            self.x = None
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()

    def windows(self) -> dict[str, Any]:
        """The mapped top-level windows, by title."""
        found = {}
        for window in self.x.screen().root.query_tree().children:
            try:
                title = window.get_wm_name()
                mapped = window.get_attributes().map_state != 0
            except Exception:  # gone meanwhile
                continue
            if title and mapped:
                found[title if isinstance(title, str) else title.decode()] = window
        return found

    def window(self, title: str, timeout: float = 60) -> Any:
        return wait_for(lambda: self.windows().get(title), timeout=timeout, what=f"a window titled {title!r}")

    def move(self, window: Any, x: int, y: int) -> None:
        """Windows open at the top left with no window manager; one on top of another hides it."""
        window.configure(x=x, y=y)
        self.x.sync()

    def screenshot(self, window: Any) -> Any:
        """What the window shows right now, as a PIL image (RGB)."""
        from PIL import Image
        from Xlib import X

        geometry = window.get_geometry()
        raw = window.get_image(0, 0, geometry.width, geometry.height, X.ZPixmap, 0xFFFFFFFF)
        return Image.frombytes("RGB", (geometry.width, geometry.height), raw.data, "raw", "BGRX")

    def close(self, window: Any) -> None:
        """What a window manager does when the window's close button is pressed (WM_DELETE_WINDOW)."""
        from Xlib import X
        from Xlib.protocol import event

        protocols, delete = self.x.intern_atom("WM_PROTOCOLS"), self.x.intern_atom("WM_DELETE_WINDOW")
        message = event.ClientMessage(window=window, client_type=protocols, data=(32, [delete, X.CurrentTime, 0, 0, 0]))
        window.send_event(message, event_mask=X.NoEventMask)
        self.x.flush()

    def destroy(self, window: Any) -> None:
        """What ``xdotool windowclose`` does: the window is destroyed under its owner's feet."""
        window.destroy()
        self.x.sync()

    def kill_client(self, window: Any) -> None:
        """What ``xkill`` does: the window's owner loses its connection to the X server."""
        window.kill_client()
        self.x.sync()
