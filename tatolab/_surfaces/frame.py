"""``VideoFrame``: a frame named by a video bag, over a surface in the runtime's pool.

numpy is imported only when pixels are asked for (``cpu()``, DLPack), so a project without it
still runs its other nodes.
"""

from __future__ import annotations

import ctypes
import time
import weakref
from typing import Any

from tatolab._hints import install_hint
from tatolab._surfaces import pool as _pool

BAG_KEYS = ("surface_id", "width", "height", "format", "timestamp_ns")


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise ImportError(
            f"frame.cpu() and DLPack need numpy in the project's .venv: {install_hint('numpy')}"
        ) from None
    return numpy


class VideoFrame:
    """A frame held while this object or any view over its pixels lives.

    ``ctx.inputs.read(port, into=VideoFrame)`` gives one; ``VideoFrame.allocate`` or
    ``VideoFrame.from_numpy`` makes one to write with ``ctx.outputs.write(port, frame)``.
    """

    __slots__ = ("surface_id", "width", "height", "format", "timestamp_ns", "fields", "_slot", "_buffer",
                 "_array", "_owned", "_sent", "__weakref__")

    def __init__(self, *, surface_id: str, width: int, height: int, format: str = "rgba8",
                 timestamp_ns: int = 0, fields: dict[str, Any] | None = None, _slot: int = -1,
                 _buffer: Any = None, _owned: bool = False) -> None:
        self.surface_id = surface_id
        self.width = width
        self.height = height
        self.format = format
        self.timestamp_ns = timestamp_ns
        self.fields = dict(fields or {})  # other keys the bag carried
        self._slot = _slot
        self._buffer = _buffer
        self._array: Any = None
        self._owned = _owned  # allocated here and not yet sent: safe to write
        self._sent = False

    # -- making and opening frames ---------------------------------------------------------

    @classmethod
    def _held(cls, pool: _pool.Pool, info: _pool.SlotInfo, *, owned: bool, **fields: Any) -> VideoFrame:
        size = _pool.frame_bytes(info.width, info.height, info.format)
        mapping = pool.mapping(info.slot, size)
        buffer = (ctypes.c_ubyte * size).from_buffer(mapping)
        # The lease ends when the last reference to the memory goes: this frame, a numpy view, a DLPack capsule.
        weakref.finalize(buffer, pool.release, info.slot)
        return cls(surface_id=f"{info.slot}#{info.generation}", width=info.width, height=info.height,
                   format=info.format, _slot=info.slot, _buffer=buffer, _owned=owned, **fields)

    @classmethod
    def allocate(cls, width: int, height: int, format: str = "rgba8", timestamp_ns: int | None = None) -> VideoFrame:
        """A new frame to fill and write; raises ``PoolExhausted`` when the pool has no free surface."""
        current = _pool.current()
        info = current.allocate(width, height, format)
        try:
            return cls._held(current, info, owned=True,
                             timestamp_ns=time.monotonic_ns() if timestamp_ns is None else timestamp_ns)
        except BaseException:
            current.release(info.slot)
            raise

    @classmethod
    def from_numpy(cls, array: Any, timestamp_ns: int | None = None) -> VideoFrame:
        """A new RGBA8 frame holding a copy of ``array`` (height x width x 4, uint8)."""
        np = _numpy()
        array = np.asarray(array)
        if array.ndim != 3 or array.shape[2] != 4 or array.dtype != np.uint8:
            raise ValueError(f"from_numpy takes a height x width x 4 uint8 array (RGBA), got {array.shape} {array.dtype}")
        frame = cls.allocate(array.shape[1], array.shape[0], "rgba8", timestamp_ns)
        frame.cpu(writable=True)[...] = array
        return frame

    @classmethod
    def open(cls, bag: dict[str, Any] | str) -> VideoFrame:
        """The frame a video bag (or a surface id) names, held; a stale or unknown id raises ``SurfaceError``."""
        if isinstance(bag, str):
            bag = {"surface_id": bag}
        if not isinstance(bag, dict) or "surface_id" not in bag:
            raise _pool.SurfaceError(f"not a video bag (it has no surface_id): {bag!r}"[:300])
        current = _pool.current()
        info = current.lease(bag["surface_id"])
        try:
            extra = {k: v for k, v in bag.items() if k not in BAG_KEYS}
            return cls._held(current, info, owned=False, timestamp_ns=int(bag.get("timestamp_ns") or 0),
                             fields=extra)
        except BaseException:
            current.release(info.slot)
            raise

    # the hook ctx.inputs.read(port, into=VideoFrame) uses
    @classmethod
    def _tatolab_from_bag(cls, bag: dict[str, Any]) -> VideoFrame:
        return cls.open(bag)

    # -- pixels -------------------------------------------------------------------------------

    def cpu(self, writable: bool = False) -> Any:
        """The pixels as a height x width x 4 uint8 numpy array over the surface (no copy).

        Read-only, except on a frame this node allocated and has not written yet (``writable=True``).
        """
        if self._buffer is None:
            raise ValueError(f"frame {self.surface_id} was released")
        if writable and not (self._owned and not self._sent):
            raise ValueError(
                f"frame {self.surface_id} is not yours to change: other nodes may be reading it. "
                "Make a new one with VideoFrame.from_numpy(frame.cpu() ...) or VideoFrame.allocate(...)"
            )
        np = _numpy()
        if self._array is None:
            self._array = np.frombuffer(self._buffer, dtype=np.uint8).reshape(self.height, self.width, 4)
        view = self._array.view()
        view.flags.writeable = writable
        return view

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        # Exported from a writable view: consumers such as torch refuse read-only DLPack tensors.
        # The memory is shared with every reader of this frame; treat it as read-only.
        self.cpu()
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return _pool.current().dlpack_device  # (1, 0) here; a CUDA backend answers (2, device)

    # -- the bag ------------------------------------------------------------------------------

    def bag(self) -> dict[str, Any]:
        return {**self.fields, "surface_id": self.surface_id, "width": self.width, "height": self.height,
                "format": self.format, "timestamp_ns": self.timestamp_ns}

    def _tatolab_bag(self) -> dict[str, Any]:
        """What ``ctx.outputs.write`` sends: the bag; the frame is no longer writable once sent."""
        if self._owned and not self._sent:
            self._sent = True
            _pool.current().publish(self._slot)
        return self.bag()

    def _memory(self) -> memoryview:
        """The frame's bytes, without numpy (``tatolab exchange`` copies them out)."""
        if self._buffer is None:
            raise ValueError(f"frame {self.surface_id} was released")
        return memoryview(self._buffer).cast("B")

    def release(self) -> None:
        """Let go of the frame now rather than when it is garbage (views made by ``cpu()`` keep it)."""
        self._buffer = None
        self._array = None

    def __repr__(self) -> str:
        return f"<VideoFrame {self.surface_id} {self.width}x{self.height} {self.format} t={self.timestamp_ns}>"
