"""One reader of a ring: taking bags out of their slots, each reader at its own pace.

Reading (the seqlock's other half): bag s is whole in its slot exactly when the slot's seq
word reads 2*s before and after the copy (the writer sets it to 2*s - 1 while bag s is
being written, see writer.py): a reader loads the word, then the length, publish_ns and
payload, then loads the word again; a change means the writer lapped it mid-copy, and the
reader tries again further ahead. Those loads must happen in that order: the C run reader
(_native.RunReader, which an ordered reader's read_many uses where it was built) orders them
with C11 acquire loads and fences (ring_protocol.h); the Python copy below relies on the
machine keeping loads in program order on x86-64 (fence() is a no-op there, see futex.py) and
calls the C module's acquire fences elsewhere. `read` and `read_into` share
that one copy (`_copy`), and so does the Python loop of read_many. A view of a big bag (read_view,
and read_many's big bags) is taken in C in the common case (_native.RunReader.view: the bag whole
in its slot, held, recorded), and by `_copy` otherwise. A reader that keeps
finding what no writer leaves (_MAX_TRIES in a row: the header was damaged, or something other
than the writer wrote the file) raises RingError instead of trying forever; being lapped, however
often, is no such thing.

Each reader owns record `reader_index` of the ring's table (layout.py) and keeps its counters
there: bags read, dropped (lapped or skipped) and bad, its next sequence number, its pid; and
block `reader_index` of the ring's latency file (../latency.py), where it records each bag's
age when read and its age since its origin (C's note or RunReader, or latency.note).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from .. import latency
from ..futex import NEEDS_FENCE, fence
from ..shm import RingError
from . import views, wake
from .layout import (
    _MOVED,
    _ACTIVE_NEWEST,
    _ACTIVE_ORDERED,
    _R_ACTIVE,
    _R_BAD,
    _R_DROPPED,
    _R_GEN,
    _R_LAST_READ_NS,
    _R_NEXT,
    _R_PID,
    _R_READ,
    _SLOT_HEADER,
    _WRITE_SEQ,
    MAX_READERS,
    _Gen,
    _open_latest,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer  # (for type checkers only: not a dependency)

try:  # an ordered reader's run of whole bags, copied, recorded and counted in C (see _native.c)
    from .._native import Recorder as _Recorder
    from .._native import RunReader as _RunReader
except ImportError:
    _RunReader = _Recorder = None  # type: ignore[misc, assignment]



class _PyReaderCore:
    """_native.ReaderCore's members, where the C module was not built."""

    __slots__ = ("_next", "read_count", "_gap", "_last_ts", "_last_seq", "_runs", "_big", "views")


if TYPE_CHECKING:
    _Core = _PyReaderCore
else:
    try:  # the members the node host's per-bag path reads and writes in C (_native.c, _ordered.h)
        from .._native import ReaderCore as _Core
    except ImportError:
        _Core = _PyReaderCore

# Consecutive failed attempts at one bag before a reader calls the ring damaged. A healthy
# ring fails an attempt only when the writer laps the copy, and each retry jumps half a
# ring ahead, so a handful is already rare.
_MAX_TRIES = 1000
_VIEW: Any = memoryview(b"")  # read_view's `dest`: a view of the slot (a big bag) or a copy
# A reader the writer keeps lapping mid-copy (a later bag in the slot each time) returns None
# after this long, so its caller can look at its stop flag, and reads again on its next call.
_LAPPED_FOR_S = 0.05


class RingReader(_Core):
    """One reader of a ring, with its counters in record `reader_index` of the ring's table.

    `profile` is "newest" (read the latest bag, skipped ones count as dropped) or
    "ordered" (every bag in order until lapped; lost ones count as dropped). A fresh
    record starts at the first bag ever written (start="beginning", so bags written before
    the reader attached are delivered or counted as dropped) or at the next one
    (start="now", for taps); a record that already has a position resumes from it.

    Every bag read is recorded in the record's latency block (../latency.py): its age, and its
    age since its origin. With `origins`, read, read_into and read_many give (payload,
    publish_ns, origin_ns, origin_id) for each bag: the node host stamps what it writes with them.
    """

    # Its attributes are slots (and _Core's): a subclass of a C type keeps instance attributes in a
    # dict the interpreter does not specialise its loads for (each cost twice a slot's); __dict__
    # stays for anything else set on a reader.
    __slots__ = ("base", "index", "profile", "_newest", "dropped", "bad", "_run_start", "spin_ns", "_origins",
                 "_compiled", "_stats", "_hist", "_views", "_recorder", "_note", "_block", "_holds", "_left", "_g",
                 "_q", "_mv", "_count", "_first", "_slot_size", "_slots", "_r", "_check_watcher_s", "__dict__",
                 "__weakref__")

    def __init__(
        self, base: str, reader_index: int, profile: str, *, start: str = "beginning", origins: bool = False
    ) -> None:
        if profile not in ("newest", "ordered"):
            raise ValueError(f'delivery profile must be "newest" or "ordered", got {profile!r}')
        if not 0 <= reader_index < MAX_READERS:
            raise ValueError(f"reader_index must be 0..{MAX_READERS - 1}, got {reader_index}")
        if start not in ("beginning", "now"):
            raise ValueError(f'start must be "beginning" or "now", got {start!r}')
        self.base = base
        self.index = reader_index
        self.profile = profile
        self._newest = profile == "newest"
        g = _open_latest(base)
        q = g.q
        r = g.record_q(reader_index)
        self.read_count = q[r + _R_READ]
        self.dropped = q[r + _R_DROPPED]
        self.bad = q[r + _R_BAD]
        self._next = q[r + _R_NEXT] or (1 if start == "beginning" else q[_WRITE_SEQ] + 1)
        self._run_start = self._next  # bags _run_start.._next-1 were all read, none skipped
        self._last_ts = self._last_seq = 0
        # ns between two bags the writer published, from the last two this reader read (a
        # reader that skips bags still sees how busy the link is): poll before sleeping?
        self._gap = 1 << 62
        # ns to poll the ring before sleeping, whatever the link's pace (an input's spin_us): 0, none
        self.spin_ns = 0
        # read_many gives a big bag (one the ring grew for) as a BagView of its slot, not a copy
        # (a node's inputs: tatolab/_host/ports.py releases each once the node is done with it)
        self.views = False
        self._origins = origins
        self._compiled = _RunReader is not None  # (tests set it None to check the Python read)
        self._runs: Any = None  # the C run reader of the generation mapped (read_many)
        self._stats: latency.LatencyFile | None = None
        self._hist: Any = None  # the latency file, for RunReader (None: ages are not recorded)
        self._views: Any = None  # ... as u64 and u32 words, for latency.note
        self._recorder: Any = None
        self._note: Any = None  # records one bag (the one-bag path); None: not recorded
        self._block = latency.block_offset(reader_index)
        try:
            self._stats = latency.LatencyFile(base)
        except (OSError, RingError):
            pass  # a ring made without one (an older runtime): ages are not recorded
        else:
            self._hist = self._stats.mm
            self._views = (self._stats.q, self._stats.mv.cast("I"))
            if self._compiled and _Recorder is not None:
                self._recorder = _Recorder(self._hist, self._block)
            else:
                self._recorder = latency.Recorder(self._views, self._block)
            self._note = self._recorder.note
        self._holds: dict[_Gen, int] = {}  # generation -> views of its slots held (read_view)
        self._left: list[_Gen] = []  # generations followed away from while views of them are held
        self._attach(g)

    def _attach(self, g: _Gen) -> None:
        self._g = g
        self._q = g.q
        self._mv = g.mv
        self._count = g.count
        self._first = g.base_seq + 1
        self._slot_size = g.slot_size
        self._big = g.slot_size > g.normal[0]  # a generation grown for big bags (views: views.py)
        self._slots = [g.slots_q + i * g.stride_q for i in range(g.count)]
        self._r = g.record_q(self.index)
        q, r = self._q, self._r
        q[r + _R_PID] = os.getpid()
        q[r + _R_READ] = self.read_count
        q[r + _R_DROPPED] = self.dropped
        q[r + _R_BAD] = self.bad
        q[r + _R_NEXT] = self._next
        q[r + _R_GEN] = g.gen
        q[r + _R_ACTIVE] = _ACTIVE_NEWEST if self._newest else _ACTIVE_ORDERED
        g.sleepers[self.index] = 0
        g.followers[self.index] = 0
        self._check_watcher_s = wake._CHECK_WATCHER_S
        if self._compiled:
            assert _RunReader is not None
            self._runs = _RunReader(g.mv, g.slots_q, g.stride_q, g.count, g.slot_size, self._hist, self._block,
                                    self._origins, r + _R_READ, r + _R_NEXT, r + _R_LAST_READ_NS)

    @property
    def generation(self) -> int:
        return self._g.gen

    def _follow(self) -> None:
        """The writer moved to a bigger generation: continue there."""
        old, runs = self._g, self._runs
        self._attach(_open_latest(self.base, newer_than=old.gen))
        if runs is not None:
            runs.close()  # (its buffer export of the old mapping would keep it from closing)
        if self._holds.get(old):
            self._left.append(old)  # closed once its last view is released
        else:
            old.close()

    def discard(self, n: int = 1) -> None:
        """`n` bags this reader took off the ring never reached the node (a `newest` bag
        replaced by a newer one before the node read it, or a backlog left at exit): count
        them as dropped, not read, so the counters say what the node saw."""
        self.read_count -= n
        self.dropped += n
        q, r = self._q, self._r
        q[r + _R_READ] = self.read_count
        q[r + _R_DROPPED] = self.dropped

    def unread(self, n: int) -> None:
        """The last `n` bags read never reached the node (it is closing with them still
        queued): give them back, so a reader resuming this record reads them again, or
        counts them dropped if they were overwritten meanwhile. Bags behind a skip cannot
        be given back one by one, so those count as dropped now."""
        back = min(n, self._next - self._run_start)
        if n > back:
            self.discard(n - back)
        self._next -= back
        self._last_seq = min(self._last_seq, self._next - 1)  # the busy-link gap counts from bags still read
        self.read_count -= back
        q, r = self._q, self._r
        q[r + _R_READ] = self.read_count
        q[r + _R_NEXT] = self._next

    def count_dropped(self) -> None:
        """The last bag read named a frame already gone (its surface reused): dropped, not read."""
        self.read_count -= 1
        self.dropped += 1
        q, r = self._q, self._r
        q[r + _R_READ] = self.read_count
        q[r + _R_DROPPED] = self.dropped

    def count_bad(self) -> None:
        """The last bag read did not decode: it counts as bad, not read."""
        self.read_count -= 1
        self.bad += 1
        q, r = self._q, self._r
        q[r + _R_READ] = self.read_count
        q[r + _R_BAD] = self.bad

    def has_new(self) -> bool:
        q = self._q
        return q[_WRITE_SEQ] >= self._next or q[_MOVED] != 0

    def _headroom(self, target: int) -> int:
        # After losing a race with the writer, retry half a ring ahead of the oldest slot:
        # retrying at the oldest would race the writer for the same slot again and again
        # when it is faster than our copy (big bags).
        return max(target + 1, self._q[_WRITE_SEQ] - self._count // 2 + 1)

    def read(self) -> tuple[bytes, int] | None:
        """The next bag as (payload, publish_ns), or None when there is nothing new."""
        return self._read(None)

    def read_into(self, buffer: Buffer) -> tuple[int, int] | None:
        """Copy the next bag into `buffer` (any writable buffer: bytearray, numpy array,
        mmap) and return (length, publish_ns), or None when there is nothing new.

        For big bags: no new object per bag (a fresh 8 MB bytes costs its page faults
        every time). The bag is checked after the copy, so `buffer[:length]` is never torn.
        Raises ValueError, leaving the bag unread, when it does not fit."""
        with memoryview(buffer) as mv, mv.cast("B") as dest:
            return self._read(dest)


    def read_view(self) -> views.BagView | None:
        """The next bag as a BagView (a read-only memoryview and its publish_ns), or None when
        there is nothing new. A big bag (one the ring grew for) is not copied: the view is of
        its slot, which the writer leaves alone while the view is held (views.py); release it
        (`with reader.read_view() as data:`, or .release()) as soon as it is used. Small bags
        are copied, as `read` does."""
        got = self._read(_VIEW)
        if got is None:
            return None
        data = got[0]
        if type(data) is bytes:
            return views.BagView(memoryview(data), got[1], None)
        return data  # type: ignore[no-any-return]

    def _release_view(self, g: _Gen, addr: int) -> None:
        views.unhold(addr)
        left = self._holds[g] - 1
        if left:
            self._holds[g] = left
            return
        del self._holds[g]
        if g in self._left:
            self._left.remove(g)
            g.close()

    def read_many(self, limit: int = 64) -> list[tuple[Any, ...]]:
        """Up to `limit` bags as (payload, publish_ns), oldest first; [] when nothing is new.

        For "ordered" readers this takes every bag already published in one pass (one
        counter update per call); "newest" gives at most one bag, as `read` does."""
        if self._newest or limit < 1:
            got = self._read(None)
            return [] if got is None else [got]
        q = self._q
        if q[_WRITE_SEQ] < self._next and not q[_MOVED]:
            return []  # nothing new (the node host asks once more before every wait)
        if self._big and self.views:  # big bags, one at a time, each a view of its slot
            got = self._read(_VIEW)
            return [] if got is None else [got]
        out: list[Any] = []
        while True:
            q = self._q
            nxt = self._next
            last = q[_WRITE_SEQ]
            room = limit - len(out)
            if last - nxt >= room:
                last = nxt + room - 1
            run: list[Any]
            if nxt > last:
                run = []
            elif self._compiled:  # copied, recorded and counted in the record in C
                run = self._runs.run(nxt, last)
            else:
                run = self._run(nxt, last)
            if out:
                out += run
            else:
                out = run  # (a fresh list: no copy)
            s = nxt + len(run)
            if s > nxt:
                ts = run[-1][1]
                taken = s - nxt
                self.read_count += taken
                self._next = s
                if taken > 1:
                    self._gap = (ts - out[-taken][1]) // (taken - 1)
                else:
                    self._gap = (ts - self._last_ts) // (s - 1 - self._last_seq)
                self._last_ts, self._last_seq = ts, s - 1
                if not self._compiled:
                    r = self._r
                    q[r + _R_READ] = self.read_count
                    q[r + _R_NEXT] = s
                    q[r + _R_LAST_READ_NS] = time.monotonic_ns()
            if len(out) >= limit or s > q[_WRITE_SEQ] and not q[_MOVED]:
                return out
            # lapped, torn, or the ring moved: the one-bag path sorts it out (and counts drops)
            try:
                got = self._read(_VIEW if self.views else None)  # (into a grown generation: a view)
            except RingError:
                if out:
                    return out  # hand over what was read whole; the next call raises again
                raise
            if got is None:
                return out
            out.append(got)
            if len(out) >= limit:
                return out

    def _run(self, first: int, last: int) -> list[tuple[Any, ...]]:
        """Bags first..last as (payload, publish_ns), up to the first that is not whole in its
        slot (lapped, torn), where the C module was not built (read_many uses _native.RunReader
        where it was)."""
        slots, count, copy = self._slots, self._count, self._copy
        out: list[Any] = []
        for s in range(first, last + 1):
            got = copy(slots[(s - 1) % count], s, None)
            if got is None:
                break
            out.append(got)
        return out

    def _copy(self, h: int, s: int, dest: memoryview | None) -> tuple[Any, ...] | None:
        """Bag `s` out of the slot whose header is word `h`, recorded as read: (payload,
        publish_ns) (with `origins`, also origin_ns, origin_id), or (length, ...) once copied
        into `dest`; None when the slot does not hold it whole (not yet written, overwritten
        since, or lapped during the copy)."""
        q = self._q
        v = q[h]
        if NEEDS_FENCE:
            fence()  # the word before the rest (an acquire; x86-64 keeps loads in order by itself)
        if v != 2 * s:
            return None
        n = q[h + 1]
        if n > self._slot_size:
            return None
        ts = q[h + 2]
        o_ns = q[h + 3]
        o_id = q[h + 4]
        off = (h << 3) + _SLOT_HEADER
        data: Any
        if dest is _VIEW:
            if self._g.slot_size > self._g.normal[0] and views.VIEWS:
                addr = views.held_addr(self._g, h)
                views.hold(addr)  # (a full barrier) before the second look: views.py's handshake
                if q[h] == v and q[_WRITE_SEQ] <= s + self._count - 2:
                    g = self._g
                    self._holds[g] = self._holds.get(g, 0) + 1
                    data = views.BagView(self._mv[off:off + n].toreadonly(), ts,
                                         lambda: self._release_view(g, addr))
                    note = self._note
                    if note is not None:
                        note(ts, o_ns, o_id)
                    return (data, ts, o_ns, o_id) if self._origins else (data, ts)
                views.unhold(addr)  # the writer is about to reach this slot: copy the bag instead
            data = self._mv[off:off + n].tobytes()
        elif dest is None:
            data = self._mv[off:off + n].tobytes()
        else:
            if n > dest.nbytes:
                raise ValueError(
                    f"a bag of {n:,} bytes does not fit the {dest.nbytes:,} byte buffer "
                    f"given to read_into on {self.base}; pass a buffer of at least "
                    f"{self._slot_size:,} bytes (the ring's slot size)"
                )
            dest[:n] = self._mv[off:off + n]
            data = n
        fence()
        if q[h] != v:
            return None
        note = self._note
        if note is not None:
            note(ts, o_ns, o_id)
        return (data, ts, o_ns, o_id) if self._origins else (data, ts)

    def _damaged(self, ws: int, target: int, v: int) -> RingError:
        return RingError(
            f"the ring {self.base} makes no sense: its header says bag {ws:,} was written last, "
            f"but the slot of bag {target:,} holds {'bag ' + format(v // 2, ',') if v else 'nothing'} "
            f"after {_MAX_TRIES} tries; the ring file was damaged (or written by something other "
            "than its node), so this reader gives up on it"
        )


    def _held_view(self) -> tuple[Any, ...] | None:
        """The common case of a view in C (_native.RunReader.view): the next bag (for "newest" the
        latest) whole in its slot of a grown generation, held; None where the Python path must look."""
        got = self._runs.view(self._next, self._newest)
        if got is None:
            return None
        s, off, n, ts, o_ns, o_id = got
        self._taken(s, ts)  # (the record was counted in C)
        g = self._g
        self._holds[g] = self._holds.get(g, 0) + 1
        addr = views.held_addr(g, (off - _SLOT_HEADER) >> 3)
        data = views.BagView(self._mv[off:off + n].toreadonly(), ts, lambda: self._release_view(g, addr))
        return (data, ts, o_ns, o_id) if self._origins else (data, ts)

    def _taken(self, s: int, ts: int) -> None:
        """Bag `s` (published at `ts`) was read: the ones skipped to reach it are dropped, and the busy-link
        gap counts from it (the caller updates the record's read, next and last-read words)."""
        nxt = self._next
        if s > nxt:  # (newest: the ones between are skipped; ordered: lapped)
            self.dropped += s - nxt
            self._q[self._r + _R_DROPPED] = self.dropped
            self._run_start = s
        self.read_count += 1
        self._next = s + 1
        self._gap = (ts - self._last_ts) // (s - self._last_seq)
        self._last_ts, self._last_seq = ts, s

    def _read(self, dest: memoryview | None) -> tuple[Any, int] | None:
        """One bag (the next, or for "newest" the latest) through `_copy`, with the counters."""
        if self._newest and self._q[_MOVED]:
            self._follow()  # the latest bag is in the generation the writer moved to (it carried the last ones)
        if dest is _VIEW and self._big and self._runs is not None and views.VIEWS and self._q[_WRITE_SEQ] >= self._next:
            got = self._held_view()
            if got is not None:
                return got
        q = self._q
        floor = self._next
        tries = 0
        lapped_since: float | None = None
        while True:
            tries += 1
            ws = q[_WRITE_SEQ]
            if floor > ws:
                if self._next > ws:
                    if q[_MOVED]:
                        self._follow()
                        q = self._q
                        floor = self._next
                        continue
                    return None
                floor = ws  # lapped while looking; take the newest
            target = ws if self._newest else floor
            oldest = ws - self._count + 1
            if oldest < self._first:
                oldest = self._first
            if target < oldest:
                target = oldest
            if target > ws:
                self._skip_to_first()
                return None
            h = self._slots[(target - 1) % self._count]
            got = self._copy(h, target, dest)
            if got is None:
                # overwritten since write_seq was read, or torn: the writer is on this slot right now
                v = q[h]
                if target < (v + 1) // 2 <= q[_WRITE_SEQ] + 1:
                    # a later bag, at most the one being written: the writer lapped this copy, which
                    # is no sign of damage however often it happens (a flat-out writer on a small
                    # ring outruns a copy in Python); past a while of it, give the caller its loop back
                    tries -= 1
                    if lapped_since is None:
                        lapped_since = time.monotonic()
                    elif time.monotonic() - lapped_since > _LAPPED_FOR_S:
                        return None
                elif tries >= _MAX_TRIES:
                    raise self._damaged(ws, target, v)
                floor = self._headroom(target)
                continue
            self._taken(target, got[1])
            r = self._r
            q[r + _R_READ] = self.read_count
            q[r + _R_NEXT] = target + 1
            q[r + _R_LAST_READ_NS] = time.monotonic_ns()
            return got

    def _skip_to_first(self) -> None:
        """A generation with no bag in it yet, reached past one that is gone: what that one
        held (this reader never mapped it) is lost to it."""
        if self._next < self._first:
            self.dropped += self._first - self._next
            self._next = self._run_start = self._first
            self._q[self._r + _R_DROPPED] = self.dropped
            self._q[self._r + _R_NEXT] = self._next

    def wait(self, timeout_s: float | None) -> bool:
        """Sleep until the writer publishes (or moves the ring), at most `timeout_s`.

        Returns False on timeout, True when new data may exist (also after a signal,
        so a node's stop handler gets to run). How: wake.py."""
        return wake.wait(self, timeout_s)

    def interrupt(self) -> None:
        """Wake whoever waits on this ring now (any thread): a stop request must not wait
        for the next bag, which may never come once the node upstream has stopped."""
        g = self._g
        if g is not None and g.word is not None:
            wake.bump_and_wake(g)

    def close(self) -> None:
        """Detach; the record keeps its totals and position so a restarted reader resumes."""
        if self._runs is not None:
            self._runs.close()
            self._runs = None
        if self._g is not None:
            self._q[self._r + _R_ACTIVE] = 0
            self._q = self._mv = None  # type: ignore[assignment]  # (unusable once closed)
            if self._holds.get(self._g):
                self._left.append(self._g)  # a view of it is still held: closed at its release
            else:
                self._g.close()
            self._g = None  # type: ignore[assignment]
        if self._stats is not None:
            self._recorder.close()
            self._views[1].release()
            self._hist = self._views = self._recorder = self._note = None
            self._stats.close()
            self._stats = None


