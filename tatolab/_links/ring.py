"""Shared-memory rings: one writer per output, any number of readers, each at its own pace.

A ring lives in files `<base>.<generation>` (base is a full path in the user's own 0700
folder under /dev/shm, see shm.py: no other user can create, replace or open a name there,
and every file is created O_EXCL|O_NOFOLLOW, mode 0600, and fstat-checked when opened).
The runtime creates generation 0 with `create_ring` before starting any process and removes
every file with `reap` (at unload, and at its start for files a dead runtime left). A writer
grows the ring when a bag does not fit a slot by creating the next generation; readers
follow it. Once bags fit the normal slot again (_SHRINK_AFTER in a row, or _SHRINK_AFTER_S
after the last big one, also when no bag follows: the node host calls `relax` while idle)
the writer moves back to a generation of the normal size. A ring
never takes more than its max_bytes, fixed by `create_ring` (the runtime's
TATOLAB_LINK_MEMORY_MB, default 2048 MiB) and kept in the header across generations.

File layout (all integers little-endian u64 unless said):

    0      header: magic, version, generation, slot_size, slot_count, write_seq,
           last_write_ns (the last bag's time when this generation was made; a bag's
           own time is its slot's publish_ns), moved, base_seq, slot_stride, slots_offset,
           normal_slot_size, normal_slot_count (the size generation 0 was made with),
           max_bytes (the most the ring's file may take)
    128    futex word (u32), bumped after every publish and when the ring moves
    192    sleepers line: byte i is 1 while reader i may be asleep on the futex word
           (reader i owns it like its record; the writer only reads it)
    256    reader table: 64 records of 64 bytes:
           pid, read_count, dropped, last_read_ns, active, next_seq, bad, generation
           (read: bags taken, less those given back with discard/unread, so that
           for a node's input it is what the node got; bad: bags that did not decode;
           generation: the one the reader maps, so the writer shrinks only once no live
           reader still needs an older one: a reader follows only to the newest
           generation, and the ones between are gone)
    4352   watch line: the watcher (u32: its reader index + 1, 0 while none), then the
           hand-off word (u32), which followers sleep on and the watcher bumps
    4416   followers line: byte i is 1 while reader i may be asleep on the hand-off word
    8192   slots, each `slot_stride` bytes: seq, length, publish_ns, origin_ns, origin
           (the bag's origin: the output it comes from and when, latency.py), (pad to 64), payload

Sequence numbers start at 1 and continue across generations. Slot seq word is
2*s - 1 while bag s is being written and 2*s once published (a seqlock): a reader copies
the payload, then re-reads the word; a change means the writer lapped it mid-copy. A reader
that keeps failing (_MAX_TRIES in a row: the header was damaged, or something other than
the writer wrote the file) raises RingError instead of trying forever.

Waking: a writer calls FUTEX_WAKE only when some sleepers byte is set (a wake syscall
costs ~2 us even with nobody waiting). The handshake is Dekker's:

    reader: sleepers[i] = 1; futex_wait(word, w)    (kernel: smp_mb, then load word)
    writer: word += 1;       release its lock;      load sleepers; wake if any is set

The kernel documents a full barrier in futex_wait between queueing the waiter and
loading the word (hb_waiters_inc + smp_mb, kernel/futex/waitwake.c), so the reader's
flag store precedes its load of the word. On the writer's side the barrier is the
release of the writer's own lock (taken for every write, so threads of one node may share
a writer): releasing a CPython lock is an atomic read-modify-write (sem_post's
`lock cmpxchg` in 3.11, PyMutex's compare-exchange in 3.13), and on x86-64 every locked
instruction drains the store buffer, so the word store is visible before the sleepers
load (see futex.full_fence). Both stores precede both loads, so at least one side sees
the other: either the kernel sees the new word and the wait returns at once, or the
writer sees the flag and wakes. A reader killed while asleep leaves its byte set; the
writer then just keeps calling wake (the old cost), harming nobody. Readers on a busy
link (bags less than _SPIN_GAP_NS apart) poll briefly before sleeping, so they rarely
sleep and the writer rarely pays for a wake.

One watcher, the others hand the wake on: the writer's cost must not grow with its
readers (a FUTEX_WAKE costs about a microsecond more for every sleeper it wakes, and four
readers polling on two cores take the writer's CPU), so at most one reader at a time, the
watcher, polls and sleeps on the writer's word. A reader that comes to wait claims the
role with a compare-and-swap on the watch line (_native.compare_exchange); when someone
else holds it, the reader is a follower: it sets its followers byte and sleeps on the
hand-off word, without polling. The watcher, whatever wakes it, releases the role and, if
any followers byte is set, bumps the hand-off word and wakes them all: their wake costs
the watcher's process, not the writer. The same Dekker handshake holds between the two:

    follower: followers[i] = 1; CAS-load watcher (a full barrier); check write_seq and the
              writer's word; sleep
    watcher:  CAS release;      load followers; if any is set: hand-off += 1, wake them

so either the watcher sees the flag, or the follower sees the role released or the new
bag (and does not sleep); a follower loads the hand-off word before its flag, so a bump
the watcher makes after seeing the flag always makes its futex_wait return. An interrupt
(or a move) bumps the writer's word, then wakes the followers the same way. A watcher that never hands on (killed, SIGSTOPped) is noticed
by its followers: they sleep at most _CHECK_WATCHER_S (doubling to _CHECK_WATCHER_MAX_S
while nothing happens), and take the role back when a bag came without a hand-off or the
watcher's process is gone. Readers without the C module, and a node waiting on several
rings at once (wait_any), sleep on the writer's word as before: the writer wakes whoever
sleeps there, so every mix stays correct.

Publishing: RingWriter.write is the C publisher of _native.c where it was built (the same
stores in the same order, a real fence, the wake syscall made directly: ~60 ns against ~1 us
in Python), and the Python write below where it was not (no compiler at install, Python
3.10). Both write the same bytes; tests run both. Likewise an ordered reader's read_many
copies its run of whole bags in C (_native.read_run, the same seqlock checks), and the
watcher's claim is C's compare-and-swap; without them the Python loop reads and every
reader sleeps on the writer's word.
"""

from __future__ import annotations

import contextlib
import itertools
from array import array
from typing import Any
import mmap
import os
import threading
import time

from . import latency, shm
from .futex import NEEDS_FENCE, fence, full_fence, futex_wait, futex_waitv, futex_wake, word_at

# RingWriter.write leaves out the fence() calls (no-ops on x86-64, the only machine futex.py
# accepts): ~30 ns each on a path that costs a few hundred.
assert not NEEDS_FENCE, "RingWriter.write needs fences on this machine"
from .shm import RingError

try:  # the publish and the watcher's claim in C (see _native.c); without them RingWriter.write
    # publishes in Python and every reader sleeps on the writer's word
    from ._native import LAYOUT as _PUBLISH_LAYOUT
    from ._native import Publisher as _Publisher
    from ._native import compare_exchange as _compare_exchange
    from ._native import note as _c_note
    from ._native import read_run as _read_run
except ImportError:
    _Publisher = _compare_exchange = _read_run = _c_note = None

__all__ = [
    "BagTooLarge",
    "RingError",
    "create_ring",
    "reap",
    "RingWriter",
    "RingReader",
    "wait_any",
    "read_counters",
    "release_reader",
    "MAX_READERS",
    "MAX_BAG_BYTES",
    "link_memory_limit",
]

MAGIC = int.from_bytes(b"TATORNG1", "little")
# 2: the sleepers line (a version-1 reader would never set it, and miss wakes)
# 3: normal size and max_bytes in the header (a version-2 writer would never shrink or cap)
VERSION = 3
MAX_READERS = 64
MAX_BAG_BYTES = 1 << 30  # 1 GiB
_MIB = 1 << 20
_GROWN_FILE_BUDGET = 128 * _MIB
_MIN_GROWN_SLOTS = 4
LINK_MEMORY_ENV = "TATOLAB_LINK_MEMORY_MB"
DEFAULT_LINK_MEMORY_MB = 2048
_MIN_LINK_MEMORY_MB = 4  # a normal ring (2 MiB) and room to grow
# A grown ring goes back to its normal size at the first small bag after this many small
# bags in a row, or this long after the last big one.
_SHRINK_AFTER = 128
_SHRINK_AFTER_S = 1.0
_SHRINK_CHECK_NS = 50_000_000  # while a reader lags in an older generation, look again this often
# Consecutive failed attempts at one bag before a reader calls the ring damaged. A healthy
# ring fails an attempt only when the writer laps the copy, and each retry jumps half a
# ring ahead, so a handful is already rare.
_MAX_TRIES = 1000

# header word indices (u64)
(_MAGIC, _VERSION, _GEN, _SLOT_SIZE, _SLOT_COUNT, _WRITE_SEQ, _LAST_WRITE_NS, _MOVED, _BASE_SEQ, _STRIDE,
 _H_SLOTS_OFF, _NORMAL_SLOT_SIZE, _NORMAL_SLOT_COUNT, _MAX_BYTES) = range(14)
_FUTEX_OFF = 128
# The writer stores the futex word as the low half of the u64 at 128 (bytes 132..135 are
# unused): the bag's sequence number, 31 bits. An interrupt or a move sets the top bit
# instead (_Gen.bump_and_wake), so a publish always changes the word from any value a
# reader may have seen before it, which is all futex_wait's compare needs.
_FUTEX_Q = _FUTEX_OFF // 8
_WORD_MASK = 0x7FFFFFFF
_SLEEPERS_OFF = 192
# The sleepers line as 8 u64 words: comparing two 'Q' views of 8 items is ~4x cheaper than 64 bytes.
_NO_SLEEPERS = memoryview(bytes(MAX_READERS)).cast("Q")
# A reader whose last two bags were published less than _SPIN_GAP_NS apart polls for up
# to _SPIN_NS (yielding the CPU between looks) before it sleeps. Slower links sleep at
# once, so an idle or 1 kHz reader costs no extra CPU.
_SPIN_GAP_NS = 50_000
_SPIN_NS = 50_000
_TABLE_OFF = 256
_RECORD_BYTES = 64
_TABLE_BYTES = MAX_READERS * _RECORD_BYTES
_WATCH_OFF = _TABLE_OFF + _TABLE_BYTES
_HANDOFF_OFF = _WATCH_OFF + 4
_FOLLOWERS_OFF = _WATCH_OFF + 64
_SLOTS_OFF = 8192
_SLOT_HEADER = 64
# A follower looks at its watcher this often while no hand-off comes, doubling up to the
# most while nothing is published: what a killed or stopped watcher can cost it.
_CHECK_WATCHER_S = 0.005
_CHECK_WATCHER_MAX_S = 0.5
if _Publisher is not None and _PUBLISH_LAYOUT != {
    "write_seq_q": _WRITE_SEQ, "futex_off": _FUTEX_OFF, "sleepers_off": _SLEEPERS_OFF, "slot_header": _SLOT_HEADER,
    "latency_file_bytes": latency.FILE_BYTES,
}:
    raise ImportError(f"tatolab/_links/_native was built for another ring layout ({_PUBLISH_LAYOUT}); reinstall tatolab")
# Whether new RingWriters publish in C (tests set it False to check the Python publish).
COMPILED_PUBLISH = _Publisher is not None
# reader record word offsets (u64, relative to the record)
_R_PID, _R_READ, _R_DROPPED, _R_LAST_READ_NS, _R_ACTIVE, _R_NEXT, _R_BAD, _R_GEN = range(8)

_OPEN_RETRY_S = 2.0
_clock = time.monotonic_ns
_NO_ORIGIN = array("Q", [0, 0])  # a writer outside process(): every bag is its own origin


class BagTooLarge(ValueError):
    """A bag is bigger than a link can carry."""


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _gen_path(base: str, gen: int) -> str:
    return f"{base}.{gen}"


def _generations(base: str) -> list[int]:
    folder, name = os.path.split(base)
    prefix = name + "."
    gens = []
    try:
        entries = os.listdir(folder or ".")
    except FileNotFoundError:
        return []
    for entry in entries:
        if entry.startswith(prefix) and entry[len(prefix):].isdigit():
            gens.append(int(entry[len(prefix):]))
    return sorted(gens)


def link_memory_limit() -> int:
    """The most bytes one ring may take in /dev/shm: TATOLAB_LINK_MEMORY_MB (default 2048) MiB.

    Read where the ring is created (tatolabd's environment: like every TATOLAB_* setting it
    never reaches a node) and written into the ring's header, where its writer finds it."""
    raw = os.environ.get(LINK_MEMORY_ENV, "").strip()
    if not raw:
        return DEFAULT_LINK_MEMORY_MB * _MIB
    try:
        mb = int(raw)
    except ValueError:
        mb = 0
    if mb < _MIN_LINK_MEMORY_MB:
        raise ValueError(
            f"{LINK_MEMORY_ENV}={raw!r} is not a number of MiB of at least {_MIN_LINK_MEMORY_MB}; set it "
            f"to a whole number such as {DEFAULT_LINK_MEMORY_MB} (the default), or unset it"
        )
    return mb * _MIB


def _file_size(slot_size: int, slot_count: int) -> int:
    return _SLOTS_OFF + (_SLOT_HEADER + _round_up(slot_size, 64)) * slot_count


def _make_generation(
    base: str, gen: int, slot_size: int, slot_count: int, seq: int, table: bytes | None,
    normal: tuple[int, int] | None = None, max_bytes: int = 0, last_ns: int = 0,
) -> None:
    """Write generation `gen` completely under a temporary name, then rename it into place,
    so nobody ever opens a half-made file."""
    shm.check_folder(os.path.dirname(base) or ".")
    stride = _SLOT_HEADER + _round_up(slot_size, 64)
    size = _SLOTS_OFF + stride * slot_count
    final = _gen_path(base, gen)
    tmp = final + ".tmp"
    _unlink_quietly(tmp)  # left by a writer killed mid-way (only this user can name files here)
    fd = shm.create_exclusive(tmp, size)
    try:
        with mmap.mmap(fd, _SLOTS_OFF) as mm:
            with memoryview(mm) as mv, mv.cast("Q") as q:
                q[_MAGIC] = MAGIC
                q[_VERSION] = VERSION
                q[_GEN] = gen
                q[_SLOT_SIZE] = slot_size
                q[_SLOT_COUNT] = slot_count
                q[_WRITE_SEQ] = seq
                q[_LAST_WRITE_NS] = last_ns
                q[_MOVED] = 0
                q[_BASE_SEQ] = seq
                q[_STRIDE] = stride
                q[_H_SLOTS_OFF] = _SLOTS_OFF
                q[_NORMAL_SLOT_SIZE], q[_NORMAL_SLOT_COUNT] = normal or (slot_size, slot_count)
                q[_MAX_BYTES] = max_bytes
                if table is not None:
                    mv[_TABLE_OFF:_TABLE_OFF + _TABLE_BYTES] = table
    finally:
        os.close(fd)
    os.rename(tmp, final)


class _Gen:
    """One mapped generation file and the views the hot paths use."""

    def __init__(self, path: str) -> None:
        fd = shm.open_owned(path)
        try:
            size = os.fstat(fd).st_size
            if size < _SLOTS_OFF:
                raise RingError(f"{path} is not a tatolab ring (only {size} bytes)")
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.path = path
        self.mv = memoryview(self.mm)
        self.q = self.mv.cast("Q")
        q = self.q
        if q[_MAGIC] != MAGIC or q[_VERSION] != VERSION:
            self.close()
            raise RingError(
                f"{path} is not a tatolab ring of link protocol version {VERSION}; "
                "the runtime and the node's tatolab must be the same version"
            )
        self.gen = q[_GEN]
        self.slot_size = q[_SLOT_SIZE]
        self.count = q[_SLOT_COUNT]
        self.base_seq = q[_BASE_SEQ]
        self.stride_q = q[_STRIDE] // 8
        self.slots_q = q[_H_SLOTS_OFF] // 8
        self.normal = (q[_NORMAL_SLOT_SIZE], q[_NORMAL_SLOT_COUNT])
        self.max_bytes = q[_MAX_BYTES] or DEFAULT_LINK_MEMORY_MB * _MIB
        if (
            self.count < 2 or q[_H_SLOTS_OFF] != _SLOTS_OFF or q[_STRIDE] != _SLOT_HEADER + _round_up(self.slot_size, 64)
            or _file_size(self.slot_size, self.count) > size
        ):
            self.close()
            raise RingError(
                f"{path} is a damaged ring: its header says {self.count} slots of {self.slot_size} bytes "
                f"in a file of {size} bytes; stop and start the stream to make it afresh"
            )
        self.word, self.addr = word_at(self.mm, _FUTEX_OFF)
        self.sleepers = self.mv[_SLEEPERS_OFF:_SLEEPERS_OFF + MAX_READERS]
        self.sleepers_q = self.sleepers.cast("Q")
        self.watch, self.watch_addr = word_at(self.mm, _WATCH_OFF)
        self.handoff, self.handoff_addr = word_at(self.mm, _HANDOFF_OFF)
        self.followers = self.mv[_FOLLOWERS_OFF:_FOLLOWERS_OFF + MAX_READERS]
        self.followers_q = self.followers.cast("Q")

    def record_q(self, index: int) -> int:
        return (_TABLE_OFF + index * _RECORD_BYTES) // 8

    def bump_and_wake(self) -> None:
        word = self.word
        word.value = ((word.value + 1) & _WORD_MASK) | (_WORD_MASK + 1)  # never a publish's value
        futex_wake(self.addr)
        full_fence()  # the bump before the followers line is read: a follower sees one or the other
        self.hand_on()

    def hand_on(self) -> None:
        """Wake the followers, if any may be asleep (after a full barrier: the caller's CAS)."""
        if self.followers_q != _NO_SLEEPERS:
            self.handoff.value += 1  # (wraps at 2**32: any change is all futex_wait needs)
            futex_wake(self.handoff_addr)

    def close(self) -> None:
        self.word = self.watch = self.handoff = None
        sleepers = getattr(self, "sleepers", None)  # absent when the header was refused
        if sleepers is not None:
            self.sleepers_q.release()
            sleepers.release()
            self.followers_q.release()
            self.followers.release()
        self.q.release()
        self.mv.release()
        self.mm.close()


def _open_latest(base: str, newer_than: int = -1) -> _Gen:
    """Open the newest generation of `base`, retrying briefly while the runtime or a
    writer is still creating it."""
    deadline = time.monotonic() + _OPEN_RETRY_S
    while True:
        gens = [g for g in _generations(base) if g > newer_than]
        if gens:
            try:
                return _Gen(_gen_path(base, gens[-1]))
            except FileNotFoundError:
                pass  # a writer replaced it between listing and opening
        if time.monotonic() > deadline:
            raise RingError(
                f"no ring file for {base}: expected {_gen_path(base, 0)} "
                "(the runtime creates it with create_ring before starting nodes)"
            )
        time.sleep(0.001)


def create_ring(
    base: str, *, slot_size: int = 16 * 1024, slot_count: int = 128, max_bytes: int | None = None
) -> None:
    """Create generation 0 of the ring at `base` (removing any older generations of it).

    `max_bytes`: the most its file may ever take, bigger bags included (default:
    `link_memory_limit()`, from TATOLAB_LINK_MEMORY_MB)."""
    if max_bytes is None:
        max_bytes = link_memory_limit()
    if _file_size(slot_size, slot_count) > max_bytes:
        raise ValueError(
            f"a ring of {slot_count} slots of {slot_size} bytes does not fit its limit of {max_bytes:,} bytes"
        )
    if slot_size <= 0 or slot_count < 2:
        raise ValueError(f"a ring needs slot_size > 0 and at least 2 slots, got {slot_size} and {slot_count}")
    if slot_size > MAX_BAG_BYTES:
        raise ValueError(f"slot_size {slot_size} is larger than the {MAX_BAG_BYTES} byte bag limit")
    for gen in _generations(base):
        _unlink_quietly(_gen_path(base, gen))
    latency.create(base)
    _make_generation(base, 0, slot_size, slot_count, seq=0, table=None, max_bytes=max_bytes)


def _unlink_quietly(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def remove_ring(base: str) -> None:
    """Unlink every generation of the ring at `base` (a node removed from a running stream)."""
    for gen in _generations(base):
        _unlink_quietly(_gen_path(base, gen))
    latency.remove(base)


def reap(prefix: str) -> int:
    """Unlink every file whose name starts with `prefix`; returns how many went.

    `prefix` is a full path (`/dev/shm/tatolab-<uid>/tatolab-<ns>-`) or a bare name looked
    up in the user's own folder (shm.default_folder()). Unlinking never follows a symlink.
    """
    folder, name = os.path.split(prefix)
    folder = folder or shm.default_folder()
    try:
        entries = os.listdir(folder)
    except FileNotFoundError:
        return 0
    return sum(_unlink_quietly(os.path.join(folder, e)) for e in entries if e.startswith(name))


class RingWriter:
    """The one writer of a ring. Never waits for, or looks at, its readers.

    Threads may share it: each write holds the writer's lock for the few hundred
    nanoseconds of the copy (never while waiting for anything)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._lock = threading.Lock()
        self._acquire = self._lock.acquire
        self._release = self._lock.release
        self._wakes = 0
        # Where a bag's origin comes from (latency.py): the node host's cell while process()
        # runs, else the bag originates here.
        self._origin_id = latency.origin_id(base)
        self._cell: Any = _NO_ORIGIN
        self._publisher = _Publisher(self._write_slow) if COMPILED_PUBLISH else None
        if self._publisher is not None:
            self._publisher.set_origin(None, self._origin_id)
        if self._publisher is not None:
            # The hot path is the C publisher's own method: no Python frame per bag. Bags it
            # cannot take (too big, ring grown, a move under way) come back to _write_slow.
            self.write = self._publisher.write
        self._attach(_open_latest(base))
        try:
            stats = latency.LatencyFile(base)
        except (OSError, RingError):
            pass  # a ring made without one (an older runtime): nothing to restart
        else:
            stats.writer_started()  # its readers' windows start again
            stats.close()

    def set_origin(self, cell: Any) -> None:
        """Bags written while `cell[0]` (an array('Q', [origin_ns, origin_id])) is not 0 carry that
        origin; the others originate when written. The node host shares one cell among its outputs."""
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
        self._last_big_seq = self._seq
        self._last_big_ns = time.monotonic_ns()
        self._next_shrink_check_ns = 0
        if self._publisher is not None:
            self._publisher.attach(g.mm, g.slots_q * 8, g.stride_q * 8, g.count, g.slot_size, self._seq, self._fits)

    @property
    def seq(self) -> int:
        """Sequence number of the last bag written (0 before the first)."""
        return self._seq if self._publisher is None else self._publisher.seq

    @property
    def wakes(self) -> int:
        """How many writes found a reader that may be asleep, and so paid for a wake syscall."""
        return self._wakes if self._publisher is None else self._publisher.wakes

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
            q[h] = s + s - 1  # (no fence() calls here: see the import)
            q[h_len] = n
            q[h_ns] = t = _clock()
            cell = self._cell
            if cell[0]:
                q[h_on], q[h_oid] = cell
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

    def _write_slow(self, payload) -> int:
        """The C publisher's way back for a bag it does not take: under the lock, with every
        other thread's writes sent here too (gate), resize or move the ring, then publish."""
        with self._exclusive() as publisher:
            if self._g is None:
                raise RingError(f"the writer of {self.base} is closed")
            n = len(payload) if type(payload) is bytes else memoryview(payload).nbytes
            if n > self._fits:
                payload, n = self._resize_for(payload)
            return publisher.publish(payload)

    @contextlib.contextmanager
    def _exclusive(self):
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

    def _resize_for(self, payload):
        """The slow path: a bag that may not fit, or any bag while the ring is grown."""
        if type(payload) is not bytes:
            payload = memoryview(payload).cast("B")
        n = payload.nbytes if type(payload) is memoryview else len(payload)
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
        return payload, n

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
        count = max(_MIN_GROWN_SLOTS, min(self._count, _GROWN_FILE_BUDGET // stride))
        count = max(2, min(count, (limit - _SLOTS_OFF) // stride))
        self._move(slot_size, count)

    def _move(self, slot_size: int, count: int) -> None:
        """Continue in a new generation with `count` slots of `slot_size` bytes; readers follow."""
        old = self._g
        table = bytes(old.mv[_TABLE_OFF:_TABLE_OFF + _TABLE_BYTES])
        _make_generation(self.base, old.gen + 1, slot_size, count, seq=self._seq, table=table,
                         normal=old.normal, max_bytes=old.max_bytes, last_ns=_last_publish_ns(old))
        self._attach(_Gen(_gen_path(self.base, old.gen + 1)))
        old.q[_MOVED] = 1
        old.bump_and_wake()
        # Readers still mapping the old file keep it alive; nobody new should open it.
        _unlink_quietly(old.path)
        old.close()

    def close(self) -> None:
        """Unmap the ring (the files stay: the runtime removes them)."""
        with self._exclusive():
            if self._publisher is not None:
                self._publisher.detach()
            if self._g is not None:
                self._q = self._mv = self._mm = self._word = self._sleepers = self._slots = None
                self._g.close()
                self._g = None


class RingReader:
    """One reader of a ring, with its counters in record `reader_index` of the ring's table.

    `profile` is "newest" (read the latest bag, skipped ones count as dropped) or
    "ordered" (every bag in order until lapped; lost ones count as dropped). A fresh
    record starts at the first bag ever written (start="beginning", so bags written before
    the reader attached are delivered or counted as dropped) or at the next one
    (start="now", for taps); a record that already has a position resumes from it.

    Every bag read is recorded in the record's latency block (latency.py): its age, and its
    age since its origin. With `origins`, read and read_many give (payload, publish_ns,
    origin_ns, origin_id) for each bag, which the node host needs to stamp what it writes.
    """

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
        self._origins = origins
        self._compiled = _read_run is not None  # (tests set it None to check the Python read)
        self._stats: latency.LatencyFile | None = None
        self._hist: Any = None  # the latency file as the C note takes it (None: not recorded)
        self._views: Any = None  # ... and as latency.note takes it
        self._block = latency.block_offset(reader_index)
        try:
            self._stats = latency.LatencyFile(base)
        except (OSError, RingError):
            pass  # a ring made without one (an older runtime): ages are not recorded
        else:
            self._hist = self._stats.mm
            self._views = (self._stats.q, self._stats.mv.cast("I"))
        # one bag's ages recorded by C's note (on the mapping) or latency.note (on its views)
        self._note = _c_note if self._compiled and _c_note is not None else latency.note
        self._note_in = self._hist if self._note is _c_note else self._views
        self._attach(g)

    def _attach(self, g: _Gen) -> None:
        self._g = g
        self._q = g.q
        self._mv = g.mv
        self._count = g.count
        self._first = g.base_seq + 1
        self._slot_size = g.slot_size
        self._slots = [g.slots_q + i * g.stride_q for i in range(g.count)]
        self._r = g.record_q(self.index)
        q, r = self._q, self._r
        q[r + _R_PID] = os.getpid()
        q[r + _R_READ] = self.read_count
        q[r + _R_DROPPED] = self.dropped
        q[r + _R_BAD] = self.bad
        q[r + _R_NEXT] = self._next
        q[r + _R_GEN] = g.gen
        q[r + _R_ACTIVE] = 1
        g.sleepers[self.index] = 0
        g.followers[self.index] = 0
        self._check_watcher_s = _CHECK_WATCHER_S

    @property
    def generation(self) -> int:
        return self._g.gen

    def _follow(self) -> None:
        """The writer moved to a bigger generation: continue there."""
        old = self._g
        self._attach(_open_latest(self.base, newer_than=old.gen))
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

    def read_into(self, buffer) -> tuple[int, int] | None:
        """Copy the next bag into `buffer` (any writable buffer: bytearray, numpy array,
        mmap) and return (length, publish_ns), or None when there is nothing new.

        For big bags: no new object per bag (a fresh 8 MB bytes costs its page faults
        every time). The bag is checked after the copy, so `buffer[:length]` is never torn.
        Raises ValueError, leaving the bag unread, when it does not fit."""
        with memoryview(buffer) as mv, mv.cast("B") as dest:
            return self._read(dest)

    def read_many(self, limit: int = 64) -> list[tuple[bytes, int]]:
        """Up to `limit` bags as (payload, publish_ns), oldest first; [] when nothing is new.

        For "ordered" readers this takes every bag already published in one pass (one
        counter update per call); "newest" gives at most one bag, as `read` does."""
        if self._newest or limit < 1:
            got = self._read(None)
            return [] if got is None else [got]
        out = []
        while True:
            q = self._q
            nxt = self._next
            last = q[_WRITE_SEQ]
            room = limit - len(out)
            if last - nxt >= room:
                last = nxt + room - 1
            run = self._run(nxt, last) if nxt <= last else []
            out += run
            s = nxt + len(run)
            ts = run[-1][1] if run else 0
            if s > nxt:
                got = s - nxt
                self.read_count += got
                self._next = s
                if got > 1:
                    self._gap = (ts - out[-got][1]) // (got - 1)
                else:
                    self._gap = (ts - self._last_ts) // (s - 1 - self._last_seq)
                self._last_ts, self._last_seq = ts, s - 1
                r = self._r
                q[r + _R_READ] = self.read_count
                q[r + _R_NEXT] = s
                q[r + _R_LAST_READ_NS] = time.monotonic_ns()
            if len(out) >= limit or s > q[_WRITE_SEQ] and not q[_MOVED]:
                return out
            # lapped, torn, or the ring moved: the one-bag path sorts it out (and counts drops)
            try:
                got = self._read(None)
            except RingError:
                if out:
                    return out  # hand over what was read whole; the next call raises again
                raise
            if got is None:
                return out
            out.append(got)
            if len(out) >= limit:
                return out

    def _run(self, first: int, last: int) -> list[tuple[bytes, int]]:
        """Bags first..last as (payload, publish_ns), up to the first that is not whole in its
        slot (lapped, torn): _native.read_run where it was built, this loop where it was not."""
        g = self._g
        if self._compiled:
            return _read_run(self._mv, g.slots_q, g.stride_q, self._count, self._slot_size, first, last,
                             self._hist, self._block, self._origins)
        q, slots, count, mv, size = self._q, self._slots, self._count, self._mv, self._slot_size
        out: list = []
        now = time.monotonic_ns()
        for s in range(first, last + 1):
            # Bag s is in its slot, whole, exactly when the slot's seqlock word reads 2*s
            # before and after the copy
            h = slots[(s - 1) % count]
            v = q[h]
            if v != 2 * s:
                break
            n = q[h + 1]
            if n > size:
                break
            ts, o_ns, o_id = q[h + 2:h + 5]
            off = (h << 3) + _SLOT_HEADER
            data = mv[off:off + n].tobytes()
            fence()
            if q[h] != v:
                break
            if self._views is not None:
                latency.note(self._views, self._block, now, ts, o_ns, o_id)
            out.append((data, ts, o_ns, o_id) if self._origins else (data, ts))
        return out

    def _damaged(self, ws: int, target: int, v: int) -> RingError:
        return RingError(
            f"the ring {self.base} makes no sense: its header says bag {ws:,} was written last, "
            f"but the slot of bag {target:,} holds {'bag ' + format(v // 2, ',') if v else 'nothing'} "
            f"after {_MAX_TRIES} tries; the ring file was damaged (or written by something other "
            "than its node), so this reader gives up on it"
        )

    def _read(self, dest: memoryview | None) -> tuple[bytes, int] | tuple[int, int] | None:
        q = self._q
        floor = self._next
        tries = 0
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
                # a generation with no bag in it yet, reached past one that is gone: what that
                # one held (we never mapped it) is lost to this reader
                if self._next < self._first:
                    self.dropped += self._first - self._next
                    self._next = self._run_start = self._first
                    q[self._r + _R_DROPPED] = self.dropped
                    q[self._r + _R_NEXT] = self._next
                return None
            h = self._slots[(target - 1) % self._count]
            v = q[h]
            if v != 2 * target:
                # overwritten since write_seq was read: the writer is on this slot right now
                if tries >= _MAX_TRIES:
                    raise self._damaged(ws, target, v)
                floor = self._headroom(target)
                continue
            n = q[h + 1]
            ts, o_ns, o_id = q[h + 2:h + 5]
            if n > self._slot_size:
                if tries >= _MAX_TRIES:
                    raise self._damaged(ws, target, v)
                floor = self._headroom(target)
                continue
            off = (h << 3) + _SLOT_HEADER
            if dest is None:
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
                if tries >= _MAX_TRIES:
                    raise self._damaged(ws, target, v)
                floor = self._headroom(target)  # torn: lapped during the copy
                continue
            nxt = self._next
            if target > nxt:
                self.dropped += target - nxt
                q[self._r + _R_DROPPED] = self.dropped
                self._run_start = target
            self.read_count += 1
            self._next = target + 1
            self._gap = (ts - self._last_ts) // (target - self._last_seq)
            self._last_ts, self._last_seq = ts, target
            r = self._r
            q[r + _R_READ] = self.read_count
            q[r + _R_NEXT] = target + 1
            q[r + _R_LAST_READ_NS] = now = time.monotonic_ns()
            if self._note_in is not None:
                self._note(self._note_in, self._block, now, ts, o_ns, o_id)
            return (data, ts, o_ns, o_id) if self._origins else (data, ts)

    def wait(self, timeout_s: float | None) -> bool:
        """Sleep until the writer publishes (or moves the ring), at most `timeout_s`.

        Returns False on timeout, True when new data may exist (also after a signal,
        so a node's stop handler gets to run)."""
        g = self._g
        w = g.word.value
        if self.has_new():
            return True
        claim = _compare_exchange
        if claim is None:
            return self._watch(g, w, timeout_s)
        me = self.index + 1
        watch = g.watch  # held while waiting: no other thread can unmap the word under a compare-and-swap
        watcher = watch.value
        if watcher > MAX_READERS:  # no reader's: a damaged word, which would stop every wait here
            claim(g.watch_addr, watcher, 0)
            return True
        if watcher != me and not (watcher == 0 and claim(g.watch_addr, 0, me)):
            return self._follow_watcher(g, w, watcher, timeout_s)
        try:
            return self._watch(g, w, timeout_s)
        finally:
            claim(g.watch_addr, me, 0)  # (also the full barrier before hand_on reads the followers line)
            g.hand_on()

    def _watch(self, g: _Gen, w: int, timeout_s: float | None) -> bool:
        """Poll (on a busy link), then sleep on the writer's word."""
        if self._gap < _SPIN_GAP_NS and _spin([g.word], [w]):
            return True
        sleepers, i = g.sleepers, self.index
        sleepers[i] = 1  # before futex_wait's load of the word: see the module docstring
        try:
            return futex_wait(g.addr, w, timeout_s)
        finally:
            sleepers[i] = 0

    def _follow_watcher(self, g: _Gen, w: int, watcher: int, timeout_s: float | None) -> bool:
        """Sleep on the hand-off word until the watcher hands a wake on (True), the role is
        free again (True: the caller looks and waits again), or `timeout_s` is up (False)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        followers, i, claim = g.followers, self.index, _compare_exchange
        while True:
            h = g.handoff.value
            followers[i] = 1
            try:
                # the CAS is a fenced load of the watcher: the flag is visible before it, write_seq
                # and the writer's word are read (the module docstring's handshake; a word
                # changed since the wait began is a publish, a move or an interrupt)
                if not claim(g.watch_addr, watcher, watcher) or self.has_new() or g.word.value != w:
                    return True
                nap = self._check_watcher_s
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    nap = min(nap, left)
                if futex_wait(g.handoff_addr, h, nap):
                    self._check_watcher_s = _CHECK_WATCHER_S
                    return True
            finally:
                followers[i] = 0
            if self.has_new() or not _alive(g.q[g.record_q(watcher - 1) + _R_PID]):
                # a bag came and no hand-off, or the watcher is gone: it will not hand on
                claim(g.watch_addr, watcher, 0)
                self._check_watcher_s = _CHECK_WATCHER_S
                return True
            self._check_watcher_s = min(2 * self._check_watcher_s, _CHECK_WATCHER_MAX_S)

    def interrupt(self) -> None:
        """Wake whoever waits on this ring now (any thread): a stop request must not wait
        for the next bag, which may never come once the node upstream has stopped."""
        g = self._g
        if g is not None and g.word is not None:
            g.bump_and_wake()

    def close(self) -> None:
        """Detach; the record keeps its totals and position so a restarted reader resumes."""
        if self._g is not None:
            self._q[self._r + _R_ACTIVE] = 0
            self._q = self._mv = None
            self._g.close()
            self._g = None
        if self._stats is not None:
            self._views[1].release()
            self._hist = self._views = self._note_in = None
            self._stats.close()
            self._stats = None


def wait_any(readers: list[RingReader], timeout_s: float | None) -> bool:
    """Sleep until any of `readers` may have something new (fan-in), at most `timeout_s`.

    Returns False on timeout, True otherwise (including after a signal)."""
    words = []
    busy = False
    for r in readers:
        g = r._g
        w = g.word.value
        if r.has_new():
            return True
        words.append((g.addr, w))
        if r._gap < _SPIN_GAP_NS:
            busy = True
    if busy and _spin([r._g.word for r in readers], [w for _, w in words]):
        return True
    for r in readers:
        r._g.sleepers[r.index] = 1
    try:
        return futex_waitv(words, timeout_s) != -1
    finally:
        for r in readers:
            if r._g is not None:
                r._g.sleepers[r.index] = 0


def _alive(pid: int) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _spin(words: list, expected: list[int]) -> bool:
    """Poll the futex words for up to _SPIN_NS, yielding the CPU between looks; True as
    soon as one changes (a publish, a move or an interrupt), False when the time is up."""
    deadline = time.monotonic_ns() + _SPIN_NS
    clock, pause = time.monotonic_ns, os.sched_yield
    while True:
        pause()
        for word, w in zip(words, expected):
            if word.value != w:
                return True
        if clock() > deadline:
            return False


def _open_for_runtime(base: str) -> _Gen:
    gens = _generations(base)
    if not gens:
        raise RingError(f"no ring file for {base} (was it created, or already reaped?)")
    for gen in reversed(gens):
        try:
            return _Gen(_gen_path(base, gen))
        except FileNotFoundError:
            continue
    # The runtime calls this on its event loop: never wait for a file to appear here.
    raise RingError(f"no ring file for {base} (reaped while it was being read?)")


def _last_publish_ns(g: _Gen) -> int:
    """When the last bag was published: its slot's publish_ns (the writer does not spend a
    store per bag on the header's last_write_ns, which holds the time a generation began with)."""
    q = g.q
    for _ in range(3):
        ws = q[_WRITE_SEQ]
        if ws <= g.base_seq:
            break  # no bag in this generation yet
        h = g.slots_q + ((ws - 1) % g.count) * g.stride_q
        ts = q[h + 2]
        if q[h] == 2 * ws:  # read after ts: a writer already on this slot has changed it
            return ts
    return q[_LAST_WRITE_NS]


def read_counters(base: str) -> dict:
    """The ring's live counters, as the runtime shows them."""
    g = _open_for_runtime(base)
    try:
        q = g.q
        readers = []
        for i in range(MAX_READERS):
            r = g.record_q(i)
            pid, read, dropped, last, active, next_seq, bad = q[r:r + 7]
            if active or pid or read or dropped or bad:
                # bags written that this reader has neither read nor dropped yet
                behind = max(0, q[_WRITE_SEQ] - (next_seq - 1)) if next_seq else None
                readers.append(
                    {"index": i, "pid": pid, "read": read, "dropped": dropped, "bad": bad,
                     "last_read_ns": last, "active": bool(active), "behind": behind}
                )
        return {
            "write_seq": q[_WRITE_SEQ],
            "last_write_ns": _last_publish_ns(g),
            "slot_size": g.slot_size,
            "slot_count": g.count,
            "generation": g.gen,
            "readers": readers,
        }
    finally:
        g.close()


def release_reader(base: str, index: int) -> None:
    """Clear reader record `index` (a tap ended); the next reader there starts afresh."""
    if not 0 <= index < MAX_READERS:
        raise ValueError(f"reader_index must be 0..{MAX_READERS - 1}, got {index}")
    g = _open_for_runtime(base)
    try:
        r = g.record_q(index)
        for k in range(_RECORD_BYTES // 8):
            g.q[r + k] = 0
    finally:
        g.close()
    try:
        stats = latency.LatencyFile(base)
    except (OSError, RingError):
        return
    try:
        stats.clear(index)
    finally:
        stats.close()
