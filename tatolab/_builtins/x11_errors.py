"""X errors that must not end a window's process.

Xlib's default error handler prints the error and exits: a window destroyed from outside
(``xdotool windowclose``) would end the node at its next draw. Our handler records which
resource failed instead, so the window can find out it is gone. GLFW 3.4 puts back whatever
handler it found after each of its own calls, so this one stays. A lost connection (``xkill``,
the X server ending) cannot be survived inside Xlib: its I/O handler is told, says so in the
log, and Xlib ends the process, which the runtime starts again."""

from __future__ import annotations

import ctypes
from typing import Callable

_BAD_WINDOW, _BAD_DRAWABLE = 3, 9


class _XErrorEvent(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("display", ctypes.c_void_p),
        ("resourceid", ctypes.c_ulong),
        ("serial", ctypes.c_ulong),
        ("error_code", ctypes.c_ubyte),
        ("request_code", ctypes.c_ubyte),
        ("minor_code", ctypes.c_ubyte),
    ]


_ERROR_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_XErrorEvent))
_IO_ERROR_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

gone: set[int] = set()  # X windows (or drawables) an error said no longer exist
_kept: list[object] = []  # the callbacks must outlive every call into Xlib


def install(on_lost_connection: Callable[[], None]) -> bool:
    """Catch X errors from now on; False where there is no Xlib to ask (Wayland only)."""
    try:
        xlib = ctypes.CDLL("libX11.so.6")
    except OSError:
        return False

    def on_error(display: int, event: ctypes._Pointer) -> int:
        if event.contents.error_code in (_BAD_WINDOW, _BAD_DRAWABLE):
            gone.add(int(event.contents.resourceid))
        return 0

    def on_io_error(display: int) -> int:
        on_lost_connection()
        return 0  # Xlib exits after this returns

    error_handler, io_handler = _ERROR_HANDLER(on_error), _IO_ERROR_HANDLER(on_io_error)
    xlib.XSetErrorHandler.restype = ctypes.c_void_p
    xlib.XSetErrorHandler.argtypes = [_ERROR_HANDLER]
    xlib.XSetIOErrorHandler.restype = ctypes.c_void_p
    xlib.XSetIOErrorHandler.argtypes = [_IO_ERROR_HANDLER]
    xlib.XSetErrorHandler(error_handler)
    xlib.XSetIOErrorHandler(io_handler)
    _kept[:] = [error_handler, io_handler, xlib]
    return True
