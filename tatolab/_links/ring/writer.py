"""The one writer of a ring: publishing a bag into its slot, growing and shrinking the ring.

Publishing (a seqlock): bag s goes into slot (s - 1) % slot_count. The slot's seq word is
set to 2*s - 1, then its length, publish_ns and payload are stored, then the word is set to
2*s, then the header's write_seq and the futex word (reader.py reads in the opposite order
and checks the word again after its copy). Each of those stores must become visible to
other CPUs in that order: the C publisher (_native.c) orders them with C11 release stores
and fences (ring_protocol.h); the Python publish below relies on the machine keeping stores
in program order (x86-64's total store order, see futex.py), which is why it has no fence()
calls, and why a RingWriter elsewhere (arm64) refuses to publish in Python.

RingWriter.write is the C publisher of _native.c where it was built (the same stores in the
same order, a real fence, the wake syscall made directly: ~60 ns against ~1 us in Python),
and the Python write below where it was not (no compiler at install, Python 3.10). Both
write the same bytes; tests run both. A loan (a bag written in place) is taken and published
by the C publisher too (_Loan: ~2 us a loan, against ~10 us in a Python generator).

After the futex word, a writer loads the sleepers line and makes the wake syscall only when a
reader may be asleep (the handshake is in wake.py). A bag that does not fit the slot moves the
ring to a bigger generation (layout.py); once big bags stop it moves back.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .. import latency
from ..futex import NEEDS_FENCE, full_fence, futex_wake
from ..shm import RingError
from .layout import (
    _FUTEX_Q,
    _MIB,
    _MOVED,
    _NO_SLEEPERS,
    _ACTIVE_ORDERED,
    _R_ACTIVE,
    _R_GEN,
    _R_NEXT,
    _R_PID,
    _RECORD_Q,
    _SLOT_HEADER,
    _SLOTS_OFF,
    _TABLE_BYTES,
    _TABLE_OFF,
    _WORD_MASK,
    _WRITE_SEQ,
    LINK_MEMORY_ENV,
    MAX_BAG_BYTES,
    MAX_READERS,
    _alive,
    _Gen,
    _gen_path,
    _last_publish_ns,
    _make_generation,
    _open_latest,
    _round_up,
    _unlink_quietly,
)
from .views import _HELD_Q
from .wake import bump_and_wake

if TYPE_CHECKING:
    from typing_extensions import Buffer  # (for type checkers only: not a dependency)

    from .._native import Publisher

_Publisher: type[Publisher] | None
try:  # the publish in C (see _native.c); without it RingWriter.write publishes in Python
    from .._native import Publisher as _Publisher
except ImportError:
    _Publisher = None

_GROWN_FILE_BUDGET = 128 * _MIB
_MIN_GROWN_SLOTS = 4
# A grown ring starts with this many slots, and takes all the budget allows as soon as an ordered reader
# comes within a bag of being lapped, or a view is held across the ring (the reader reads the rest of the old
# generation, which nobody writes any more: it has those bags and all the slots of the new one). A writer
# going round few slots writes into memory still in the cache: a copy of 8 MB into the next of 4 slots
# took ~680 us here, into the next of 15 ~920 us (1 MB: ~60 us against ~98 us going round 128).
_FIRST_GROWN_SLOTS = 4
# A grown ring goes back to its normal size at the first small bag after this many small
# bags in a row, or this long after the last big one.
_SHRINK_AFTER = 128
_SHRINK_AFTER_S = 1.0
_SHRINK_CHECK_NS = 50_000_000  # while a reader lags in an older generation, look again this often
# Whether new RingWriters publish in C (tests set it False to check the Python publish).
COMPILED_PUBLISH = _Publisher is not None
_clock = time.monotonic_ns
_NO_ORIGIN = [0, 0]  # a writer outside process(): every bag is its own origin (never changed)


class BagTooLarge(ValueError):
    """A bag is bigger than a link can carry."""


class RingWriter:
    """The one writer of a ring. Never waits for its readers, and looks at their records only while the
    ring is grown for big bags (to go back to its normal size, and to widen it for an ordered reader).

    Threads may share it: each write holds the writer's lock for the few hundred
    nanoseconds of the copy (never while waiting for anything)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._lock = threading.Lock()
        self._acquire = self._lock.acquire
        self._release = self._lock.release
        self._wakes = 0
        # Where a bag's origin comes from (../latency.py): the node host's cell while process()
        # runs, else the bag originates here.
        self._origin_id = latency.origin_id(base)
        self._cell: Any = _NO_ORIGIN
        self._publisher = _Publisher(self._write_slow) if COMPILED_PUBLISH and _Publisher is not None else None
        if self._publisher is None and NEEDS_FENCE:
            # the Python publish below has no fences: right on x86-64 alone (futex.py)
            raise RingError(f"the writer of {base} needs the compiled publisher on this machine (see tatolab/_links/futex.py)")
        if self._publisher is not None:
            self._publisher.set_origin(None, self._origin_id)
        if self._publisher is not None:
            # The hot path is the C publisher's own method: no Python frame per bag. Bags it
            # cannot take come back to _write_slow: too big for the slot, a move under way, and in
            # a grown ring a small bag (it counts toward the shrink), a view held of the next slot,
            # or an ordered reader about to be lapped (it widens the ring).
            self.write = self._publisher.write  # type: ignore[method-assign,assignment]
        self._attach(_open_latest(base))
        try:
            stats = latency.LatencyFile(base)
        except (OSError, RingError):
            pass  # a ring made without one (an older runtime): nothing to restart
        else:
            stats.writer_started()  # its readers' windows start again
            stats.close()

    def set_origin(self, cell: Any) -> None:
        """Bags written while `cell[0]` (a list [origin_ns, origin_id]) is not 0 carry that origin;
        the others originate when written. The node host shares one cell among its outputs."""
        self._cell = _NO_ORIGIN if cell is None else cell
        if self._publisher is not None:
            self._publisher.set_origin(cell, self._origin_id)

    def _attach(self, g: _Gen) -> None:
        self._g = g
        self._q = g.q
        self._mv = g.mv
        self._mm = g.mm
        self._slot_size = g.slot_size
        self._count = g.count
        self._seq = g.q[_WRITE_SEQ]
        # Each slot's header words (seq, length, publish_ns) and payload offset, in the order
        # the writer fills them from the next bag on: the write path does no arithmetic.
        slots = []
        for i in range(g.count):
            h = g.slots_q + i * g.stride_q
            slots.append((h, h + 1, h + 2, h + 3, h + 4, (h << 3) + _SLOT_HEADER))
        start = self._seq % g.count
        self._slots = itertools.cycle(slots[start:] + slots[:start])
        self._word = g.word
        self._addr = g.addr
        self._sleepers = g.sleepers_q
        # While the ring is grown every bag takes the slow path (`_fits` = -1), which counts
        # the small ones and moves back to the normal size; otherwise only bags that do not fit.
        self._grown = (g.slot_size, g.count) != g.normal
        self._fits = -1 if self._grown else g.slot_size
        self._most = _most_grown_slots(g.stride_q * 8, g.normal[1], g.max_bytes) if self._grown else g.count
        self._last_big_seq = self._seq
        self._last_big_ns = time.monotonic_ns()
        self._next_shrink_check_ns = 0
        if self._publisher is not None:
            self._publisher.attach(g.mm, g.slots_q * 8, g.stride_q * 8, g.count, g.slot_size, self._seq, self._fits)
            # big bags into a grown generation take the C path too, while no view or laggard is in the way
            self._publisher.set_grown(g.normal[0] if self._grown else 0, self._count < self._most)

    @property
    def seq(self) -> int:
        """Sequence number of the last bag written (0 before the first)."""
        return self._seq if self._publisher is None else self._publisher.seq

    @property
    def wakes(self) -> int:
        """How many writes found a reader that may be asleep, and so paid for a wake syscall."""
        return self._wakes if self._publisher is None else self._publisher.wakes + self._wakes

    @property
    def compiled(self) -> bool:
        """True when bags are published by the C publisher (_native.c)."""
        return self._publisher is not None

    @property
    def generation(self) -> int:
        return self._g.gen

    def write(self, payload: bytes) -> int:
        """Publish one bag and wake every sleeping reader; returns its sequence number."""
        # Every line here costs: each memoryview store is ~300 instructions, so the futex
        # word is stored through the same view (see _word_for) rather than bumped by ctypes.
        self._acquire()
        try:
            n = len(payload)
            if n > self._fits:
                payload, n = self._resize_for(payload)
            s = self._seq + 1
            q = self._q
            h, h_len, h_ns, h_on, h_oid, off = next(self._slots)
            q[h] = s + s - 1  # (no fence() calls here: see the module docstring)
            q[h_len] = n
            q[h_ns] = t = _clock()
            cell = self._cell
            if cell[0]:
                q[h_on] = cell[0]
                q[h_oid] = cell[1]
            else:
                q[h_on], q[h_oid] = t, self._origin_id
            self._mm[off:off + n] = payload  # (the mmap's own slice store: cheaper than the memoryview's)
            q[h] = s + s
            q[_WRITE_SEQ] = s  # (last_write_ns is the slot's publish_ns: see read_counters)
            q[_FUTEX_Q] = s & _WORD_MASK
            self._seq = s
        finally:
            self._release()  # also the barrier between the word store and the sleepers load
        try:
            if self._sleepers != _NO_SLEEPERS:
                self._wakes += 1
                futex_wake(self._addr)
        except (ValueError, TypeError):
            pass  # another thread moved or closed the ring meanwhile (and woke every reader of it)
        return s

    def _write_slow(self, payload: Buffer) -> int:
        """The C publisher's way back for a bag it does not take: under the lock, with every
        other thread's writes sent here too (gate), resize or move the ring, then publish."""
        with self._exclusive() as publisher:
            if self._g is None:
                raise RingError(f"the writer of {self.base} is closed")
            n = len(payload) if type(payload) is bytes else memoryview(payload).nbytes
            if n > self._fits:
                payload, n = self._resize_for(payload)
            assert publisher is not None  # (only the C publisher calls back here)
            return publisher.publish(payload)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[Publisher | None]:
        """The writer to itself: no write from another thread until the block ends (the
        Python publish takes the lock; the C one is sent to the lock by gate())."""
        with self._lock:
            publisher = self._publisher
            if publisher is None:
                yield None
                return
            publisher.gate()
            self._seq = publisher.seq
            try:
                yield publisher
            finally:
                publisher.open(self._fits)

    def _resize_for(self, payload: Any) -> tuple[Any, int]:
        """The slow path: a bag that may not fit, or any bag while the ring is grown."""
        if type(payload) is not bytes:
            payload = memoryview(payload).cast("B")
        n = payload.nbytes if type(payload) is memoryview else len(payload)
        self._room_for(n)
        return payload, n

    def _room_for(self, n: int) -> None:
        """Grow for a bag of `n` bytes, or shrink back once big bags stopped; and in a grown
        generation, leave a slot a reader holds a view of (views.py): continue in a fresh one."""
        self._count_fast_big_bags()
        normal_size, normal_count = self._g.normal
        if n > normal_size:
            if n > self._slot_size:
                self._grow(n)
            self._last_big_seq = self._seq + 1
            self._last_big_ns = time.monotonic_ns()
        elif self._grown and (
            self._seq - self._last_big_seq >= _SHRINK_AFTER
            or time.monotonic_ns() - self._last_big_ns >= _SHRINK_AFTER_S * 1e9
        ):
            self._shrink_if_safe()  # big bags stopped: give the memory back
        if self._grown:
            if self._count < self._most:
                self._widen_for_a_laggard()
            g = self._g
            if self._q[g.slots_q + (self._seq % self._count) * g.stride_q + _HELD_Q] & 0xFFFFFFFF:
                self._move(self._slot_size, self._most)  # a view of the next slot is held: never wait for it

    def _count_fast_big_bags(self) -> None:
        """Big bags the C publisher took without the slow path count toward the shrink's clock too."""
        if self._publisher is not None:
            seq, ns = self._publisher.big
            if seq > self._last_big_seq:
                self._last_big_seq, self._last_big_ns = seq, ns

    def loan(self, nbytes: int) -> contextlib.AbstractContextManager[memoryview]:
        """A bag of `nbytes` written in place: `with writer.loan(n) as buf:` gives a writable
        memoryview of the next slot itself; the bag is published when the block ends (an
        exception publishes nothing). For big bags: no copy of the payload. Other threads'
        writes wait for the block (the writer's lock); readers never see a partial bag."""
        if nbytes < 0:
            raise ValueError(f"a loan of {nbytes} bytes on {self.base}: give the bag's size in bytes")
        if self._publisher is not None:
            return _Loan(self, self._publisher, nbytes)
        return self._py_loan(nbytes)

    def _loan_slow(self, publisher: Publisher, nbytes: int) -> int:
        """A loan the C publisher's fast path did not take (under the writer's lock): make room as a
        write would, then take the next slot; the payload's offset in the mapping."""
        publisher.gate()
        self._seq = publisher.seq
        try:
            if self._g is None:
                raise RingError(f"the writer of {self.base} is closed")
            if nbytes > self._fits:
                self._room_for(nbytes)
            return publisher.loan(nbytes, self._fits)
        except BaseException:
            publisher.open(self._fits)
            raise

    @contextlib.contextmanager
    def _py_loan(self, nbytes: int) -> Iterator[memoryview]:
        """loan() where the C publisher was not built."""
        with self._exclusive() as publisher:
            if self._g is None:
                raise RingError(f"the writer of {self.base} is closed")
            if nbytes > self._fits:
                self._room_for(nbytes)
            g, q = self._g, self._q
            s = self._seq + 1
            h = g.slots_q + (self._seq % self._count) * g.stride_q
            q[h] = s + s - 1  # odd: readers of the bag it held see it gone from here on
            full_fence()  # (the odd word before any payload byte, on any machine)
            off = (h << 3) + _SLOT_HEADER
            buf = self._mv[off:off + nbytes]
            try:
                yield buf
            finally:
                buf.release()  # (BufferError if something made from it is still alive: use it inside the block)
            q[h + 1] = nbytes
            q[h + 2] = t = _clock()
            cell = self._cell
            if cell[0]:
                q[h + 3], q[h + 4] = cell[0], cell[1]
            else:
                q[h + 3], q[h + 4] = t, self._origin_id
            full_fence()  # every payload byte before the even word
            q[h] = s + s
            q[_WRITE_SEQ] = s
            q[_FUTEX_Q] = s & _WORD_MASK
            self._seq = s
            if publisher is None:
                next(self._slots)  # (the Python publish's own cycle of slots goes on past this one)
            else:  # the C publisher goes on from this bag
                publisher.attach(g.mm, g.slots_q * 8, g.stride_q * 8, g.count, g.slot_size, s, self._fits)
            full_fence()  # the word before the sleepers line (wake.py's handshake)
            if self._sleepers != _NO_SLEEPERS:
                self._wakes += 1
                futex_wake(self._addr)

    def _widen_for_a_laggard(self) -> None:
        """An ordered reader that the write after next would lap: go on in a generation with all the slots
        the budget allows (it takes this one's bags along, for a reader still in an older one: layout.py).
        A reader in an older generation updates that one's record: this one's copy of it is older, so it
        may widen early, never late."""
        q, first = self._q, self._g.record_q(0)
        actives = q[first + _R_ACTIVE:first + MAX_READERS * _RECORD_Q:_RECORD_Q].tolist()  # (one look at all)
        due = self._seq + 2 - self._count  # the bag the write after next overwrites
        i = -1
        while True:  # each ordered reader's record (list.index scans in C: a loop over all 64 cost 3x, every write)
            try:
                i = actives.index(_ACTIVE_ORDERED, i + 1)
            except ValueError:
                return
            r = first + i * _RECORD_Q
            if q[r + _R_NEXT] <= due and _alive(q[r + _R_PID]):
                self._move(self._slot_size, self._most)
                return

    def _shrink_if_safe(self) -> bool:
        now = time.monotonic_ns()
        if now < self._next_shrink_check_ns:
            return False
        self._next_shrink_check_ns = now + _SHRINK_CHECK_NS
        if not self._readers_here():
            return False
        self._move(*self._g.normal)
        return True

    def _readers_here(self) -> bool:
        """Is every live reader mapping this generation? One still in an older one would
        follow straight to the newest and lose what this one holds."""
        q, gen = self._q, self._g.gen
        for i in range(MAX_READERS):
            r = self._g.record_q(i)
            if q[r + _R_ACTIVE] and q[r + _R_GEN] != gen and _alive(q[r + _R_PID]):
                return False
        return True

    @property
    def grown(self) -> bool:
        """True while the ring is bigger than its normal size (after a big bag)."""
        return self._grown

    def relax(self) -> bool:
        """Called while the writer is idle: a ring grown for big bags that stopped
        (_SHRINK_AFTER_S ago) goes back to its normal size now, without waiting for the next
        bag. True when it moved."""
        self._count_fast_big_bags()
        if not self._grown or time.monotonic_ns() - self._last_big_ns < _SHRINK_AFTER_S * 1e9:
            return False
        with self._exclusive():
            return self._grown and self._shrink_if_safe()

    def _grow(self, n: int) -> None:
        limit = self._g.max_bytes
        slot_size = _round_up(n, _MIB)
        stride = _SLOT_HEADER + slot_size
        if n > MAX_BAG_BYTES or _SLOTS_OFF + 2 * stride > limit:
            most = min(MAX_BAG_BYTES, (limit - _SLOTS_OFF) // 2 - _SLOT_HEADER) // _MIB * _MIB
            raise BagTooLarge(
                f"a bag of {n:,} bytes is larger than the {most:,} byte limit of a link "
                f"(a link's ring holds at least 2 bags in at most {limit:,} bytes, "
                f"{LINK_MEMORY_ENV}={limit // _MIB}); send a reference (a file or surface id) "
                f"instead of the data, or start tatolabd with a larger {LINK_MEMORY_ENV}"
            )
        self._move(slot_size, min(_FIRST_GROWN_SLOTS, _most_grown_slots(stride, self._g.normal[1], limit)))

    def _move(self, slot_size: int, count: int) -> None:
        """Continue in a new generation with `count` slots of `slot_size` bytes; readers follow."""
        old = self._g
        table = bytes(old.mv[_TABLE_OFF:_TABLE_OFF + _TABLE_BYTES])
        _make_generation(self.base, old.gen + 1, slot_size, count, seq=self._seq, table=table,
                         normal=old.normal, max_bytes=old.max_bytes, last_ns=_last_publish_ns(old), carry=old)
        self._attach(_Gen(_gen_path(self.base, old.gen + 1)))
        old.q[_MOVED] = 1
        bump_and_wake(old)
        # Readers still mapping the old file keep it alive; nobody new should open it.
        _unlink_quietly(old.path)
        old.close()

    def close(self) -> None:
        """Unmap the ring (the files stay: the runtime removes them)."""
        with self._exclusive():
            if self._publisher is not None:
                self._publisher.detach()
            if self._g is not None:
                self._q = self._mv = self._mm = self._word = self._sleepers = self._slots = None  # type: ignore[assignment]
                self._g.close()
                self._g = None  # type: ignore[assignment]


class _Loan:
    """RingWriter.loan with the C publisher: the writer's lock held from __enter__ to __exit__ (other
    threads' writes wait), the slot taken and published in C (~2 us a loan, against ~10 in a generator)."""

    __slots__ = ("_writer", "_publisher", "_nbytes", "_buf")

    def __init__(self, writer: RingWriter, publisher: Publisher, nbytes: int) -> None:
        self._writer = writer
        self._publisher = publisher
        self._nbytes = nbytes

    def __enter__(self) -> memoryview:
        writer, publisher, n = self._writer, self._publisher, self._nbytes
        writer._acquire()
        try:
            off = publisher.loan(n)
            if off < 0:
                off = writer._loan_slow(publisher, n)
        except BaseException:
            writer._release()
            raise
        try:
            self._buf = buf = writer._mv[off:off + n]
        except BaseException:
            publisher.abort()
            writer._release()
            raise
        return buf

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        publisher = self._publisher
        try:
            self._buf.release()  # (BufferError if something made from it is still alive: use it inside the block)
            if kind is None:
                publisher.commit()
            else:
                publisher.abort()
        except BaseException:
            publisher.abort()
            raise
        finally:
            self._writer._release()


def _most_grown_slots(stride: int, normal_count: int, limit: int) -> int:
    """How many slots of ``stride`` bytes a grown generation may have: the normal ring's count within
    _GROWN_FILE_BUDGET (at least _MIN_GROWN_SLOTS), and at least 2 within the link's memory."""
    count = max(_MIN_GROWN_SLOTS, min(normal_count, _GROWN_FILE_BUDGET // stride))
    return max(2, min(count, (limit - _SLOTS_OFF) // stride))
