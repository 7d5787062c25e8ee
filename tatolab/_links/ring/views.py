"""Large bags without a copy: a reader's view of a slot, held; the writer's check for holds.

A grown generation (one made for bags bigger than the ring's normal slot, layout.py) is where
views are given: RingReader.read_view hands out a read-only memoryview of the slot itself.
Its slot must not be written again while the view is held, and the writer never waits, so:

    reader: holds += 1 (a compare-and-swap: a full barrier); then the slot's seq word is
            still 2*s and write_seq <= s + slot_count - 2: the view is good until released
    writer: (after the previous publish's full fence) before writing into a slot of a grown
            generation, loads its holds; if any, it moves the ring to a fresh generation of the
            same shape (layout.py) and writes there

Both sides store before they load, so either the reader sees the writer about to reach the
slot (write_seq past s + count - 2: it copies the bag instead), or the writer sees the hold
and leaves the slot, and with it the whole generation, to its readers: a reader keeps the
file mapped while it holds a view (the file is already unlinked; the memory goes with the last
mapping). A reader that dies holding a view leaves its count set: the writer moves once more,
and the old file goes with the dead reader's mapping.

Bags in a ring of normal size (small ones) are copied: a view of them would cost more than
the copy, and the C publisher's fast path does not look at holds.

The holds count is a u32 in the slot header's spare words (_HELD_OFF); the compare-and-swap
is _native.compare_exchange (where it was not built, views are copies too). A reader's common
case, the hold and both looks, is _native.RunReader.view; the writer's, the load of the next
slot's holds before a big bag, is the C publisher's (ring/writer.py).
"""

from __future__ import annotations

import ctypes
from typing import Callable

from .layout import _FUTEX_OFF, _HELD_OFF, _Gen

_compare_exchange: Callable[[int, int, int], bool] | None
_release_hold: Callable[[int], None] | None
try:
    from .._native import compare_exchange as _compare_exchange
    from .._native import release_hold as _release_hold
except ImportError:
    _compare_exchange = _release_hold = None

_HELD_Q = _HELD_OFF // 8  # ... as the slot's u64 word the writer loads (its low half: x86-64 and arm64 are little-endian)
VIEWS = _compare_exchange is not None


def held_addr(g: _Gen, h: int) -> int:
    """The address of the holds count of the slot whose header is u64 word `h` of generation `g`."""
    return g.addr - _FUTEX_OFF + (h << 3) + _HELD_OFF


def hold(addr: int) -> None:
    """Count one more holder (a full barrier)."""
    cas = _compare_exchange
    assert cas is not None
    word = _load(addr)
    while not cas(addr, word, (word + 1) & 0xFFFFFFFF):
        word = _load(addr)


def unhold(addr: int) -> None:
    """Count one holder fewer (never below 0)."""
    assert _release_hold is not None
    _release_hold(addr)


def _load(addr: int) -> int:
    return int(ctypes.c_uint32.from_address(addr).value)


class BagView:
    """A bag read with RingReader.read_view: `data`, a read-only memoryview of the bag (of its
    slot in the ring, for big bags), and its publish time `publish_ns`. Valid until released
    (`release()`, or the end of a `with` block); the writer never overwrites a slot held."""

    __slots__ = ("data", "publish_ns", "_release")

    def __init__(self, data: memoryview, publish_ns: int, release: Callable[[], None] | None) -> None:
        self.data = data
        self.publish_ns = publish_ns
        self._release = release

    def __enter__(self) -> memoryview:
        return self.data

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Give the slot back (once; again does nothing). The view must not be used after,
        nor anything made from it still be alive (a numpy array on it): that raises BufferError."""
        release, self._release = self._release, None
        try:
            self.data.release()
        finally:
            if release is not None:
                release()
