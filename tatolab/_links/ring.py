"""Shared-memory rings: one writer per output, any number of readers, each at its own pace.

A ring lives in files `<base>.<generation>` (base is a full path under /dev/shm that the
runtime chooses). The runtime creates generation 0 with `create_ring` before starting any
process and removes every file with `reap`. A writer grows the ring when a bag does not fit
a slot by creating the next generation; readers follow it.

File layout (all integers little-endian u64 unless said):

    0      header: magic, version, generation, slot_size, slot_count, write_seq,
           last_write_ns, moved, base_seq, slot_stride, slots_offset
    128    futex word (u32), bumped after every publish and when the ring moves
    256    reader table: 64 records of 64 bytes:
           pid, read_count, dropped, last_read_ns, active, next_seq, 0, 0
    8192   slots, each `slot_stride` bytes: seq, length, publish_ns, (pad to 64), payload

Sequence numbers start at 1 and continue across generations. Slot seq word is
2*s - 1 while bag s is being written and 2*s once published (a seqlock): a reader copies
the payload, then re-reads the word; a change means the writer lapped it mid-copy.
"""

from __future__ import annotations

import mmap
import os
import time

from .futex import fence, futex_wait, futex_waitv, futex_wake, word_at

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
]

MAGIC = int.from_bytes(b"TATORNG1", "little")
VERSION = 1
MAX_READERS = 64
MAX_BAG_BYTES = 1 << 30  # 1 GiB
_MIB = 1 << 20
_GROWN_FILE_BUDGET = 128 * _MIB
_MIN_GROWN_SLOTS = 4

# header word indices (u64)
_MAGIC, _VERSION, _GEN, _SLOT_SIZE, _SLOT_COUNT, _WRITE_SEQ, _LAST_WRITE_NS, _MOVED, _BASE_SEQ, _STRIDE, _H_SLOTS_OFF = range(11)
_FUTEX_OFF = 128
_TABLE_OFF = 256
_RECORD_BYTES = 64
_TABLE_BYTES = MAX_READERS * _RECORD_BYTES
_SLOTS_OFF = 8192
_SLOT_HEADER = 64
# reader record word offsets (u64, relative to the record)
_R_PID, _R_READ, _R_DROPPED, _R_LAST_READ_NS, _R_ACTIVE, _R_NEXT = range(6)

_OPEN_RETRY_S = 2.0


class RingError(RuntimeError):
    """A ring file is missing or not a tatolab ring."""


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


def _make_generation(base: str, gen: int, slot_size: int, slot_count: int, seq: int, table: bytes | None) -> None:
    """Write generation `gen` completely under a temporary name, then rename it into place,
    so nobody ever opens a half-made file."""
    stride = _SLOT_HEADER + _round_up(slot_size, 64)
    size = _SLOTS_OFF + stride * slot_count
    final = _gen_path(base, gen)
    tmp = final + ".tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            os.ftruncate(fd, size)
        except OSError:
            _unlink_quietly(tmp)
            raise
        with mmap.mmap(fd, _SLOTS_OFF) as mm:
            with memoryview(mm) as mv, mv.cast("Q") as q:
                q[_MAGIC] = MAGIC
                q[_VERSION] = VERSION
                q[_GEN] = gen
                q[_SLOT_SIZE] = slot_size
                q[_SLOT_COUNT] = slot_count
                q[_WRITE_SEQ] = seq
                q[_LAST_WRITE_NS] = 0
                q[_MOVED] = 0
                q[_BASE_SEQ] = seq
                q[_STRIDE] = stride
                q[_H_SLOTS_OFF] = _SLOTS_OFF
                if table is not None:
                    mv[_TABLE_OFF:_TABLE_OFF + _TABLE_BYTES] = table
    finally:
        os.close(fd)
    os.rename(tmp, final)


class _Gen:
    """One mapped generation file and the views the hot paths use."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR)
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
        self.word, self.addr = word_at(self.mm, _FUTEX_OFF)

    def slot_q(self, seq: int) -> int:
        return self.slots_q + ((seq - 1) % self.count) * self.stride_q

    def record_q(self, index: int) -> int:
        return (_TABLE_OFF + index * _RECORD_BYTES) // 8

    def bump_and_wake(self) -> None:
        self.word.value += 1  # c_uint32 wraps
        futex_wake(self.addr)

    def close(self) -> None:
        self.word = None
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


def create_ring(base: str, *, slot_size: int = 16 * 1024, slot_count: int = 128) -> None:
    """Create generation 0 of the ring at `base` (removing any older generations of it)."""
    if slot_size <= 0 or slot_count < 2:
        raise ValueError(f"a ring needs slot_size > 0 and at least 2 slots, got {slot_size} and {slot_count}")
    if slot_size > MAX_BAG_BYTES:
        raise ValueError(f"slot_size {slot_size} is larger than the {MAX_BAG_BYTES} byte bag limit")
    for gen in _generations(base):
        _unlink_quietly(_gen_path(base, gen))
    _make_generation(base, 0, slot_size, slot_count, seq=0, table=None)


def _unlink_quietly(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def reap(prefix: str) -> int:
    """Unlink every file whose name starts with `prefix`; returns how many went.

    `prefix` is a full path (`/dev/shm/tatolab-<ns>-`) or a bare name looked up in /dev/shm.
    """
    folder, name = os.path.split(prefix)
    folder = folder or "/dev/shm"
    try:
        entries = os.listdir(folder)
    except FileNotFoundError:
        return 0
    return sum(_unlink_quietly(os.path.join(folder, e)) for e in entries if e.startswith(name))


class RingWriter:
    """The one writer of a ring. Never waits for, or looks at, its readers."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._attach(_open_latest(base))

    def _attach(self, g: _Gen) -> None:
        self._g = g
        self._q = g.q
        self._mv = g.mv
        self._slot_size = g.slot_size
        self._count = g.count
        self._seq = g.q[_WRITE_SEQ]
        # q index of each slot's header, so the write path does no arithmetic beyond one add
        self._slots = [g.slots_q + i * g.stride_q for i in range(g.count)]
        self._i = self._seq % g.count
        self._word = g.word
        self._addr = g.addr

    @property
    def seq(self) -> int:
        """Sequence number of the last bag written (0 before the first)."""
        return self._seq

    @property
    def generation(self) -> int:
        return self._g.gen

    def write(self, payload: bytes) -> int:
        """Publish one bag and wake every waiting reader; returns its sequence number."""
        n = len(payload)
        if n > self._slot_size:
            if type(payload) is not bytes:
                payload = memoryview(payload).cast("B")
                n = payload.nbytes
            if n > self._slot_size:
                self._grow(n)
        s = self._seq + 1
        q = self._q
        h = self._slots[self._i]
        q[h] = 2 * s - 1
        fence()
        ts = time.monotonic_ns()
        q[h + 1] = n
        q[h + 2] = ts
        off = (h << 3) + _SLOT_HEADER
        self._mv[off:off + n] = payload
        fence()
        q[h] = 2 * s
        q[_WRITE_SEQ] = s
        q[_LAST_WRITE_NS] = ts
        self._seq = s
        i = self._i + 1
        self._i = 0 if i == self._count else i
        word = self._word
        word.value += 1
        futex_wake(self._addr)
        return s

    def _grow(self, n: int) -> None:
        if n > MAX_BAG_BYTES:
            raise BagTooLarge(
                f"a bag of {n:,} bytes is larger than the {MAX_BAG_BYTES:,} byte limit of a link; "
                "send a reference (a file or surface id) instead of the data"
            )
        old = self._g
        slot_size = _round_up(n, _MIB)
        count = max(_MIN_GROWN_SLOTS, min(old.count, _GROWN_FILE_BUDGET // (slot_size + _SLOT_HEADER)))
        table = bytes(old.mv[_TABLE_OFF:_TABLE_OFF + _TABLE_BYTES])
        _make_generation(self.base, old.gen + 1, slot_size, count, seq=self._seq, table=table)
        self._attach(_Gen(_gen_path(self.base, old.gen + 1)))
        old.q[_MOVED] = 1
        old.bump_and_wake()
        # Readers still mapping the old file keep it alive; nobody new should open it.
        _unlink_quietly(old.path)
        old.close()

    def close(self) -> None:
        """Unmap the ring (the files stay: the runtime removes them)."""
        if self._g is not None:
            self._q = self._mv = self._word = None
            self._slots = []
            self._g.close()
            self._g = None


class RingReader:
    """One reader of a ring, with its counters in record `reader_index` of the ring's table.

    `profile` is "newest" (read the latest bag, skipped ones count as dropped) or
    "ordered" (every bag in order until lapped; lost ones count as dropped). A fresh
    record starts at the first bag ever written (start="beginning", so bags written before
    the reader attached are delivered or counted as dropped) or at the next one
    (start="now", for taps); a record that already has a position resumes from it.
    """

    def __init__(self, base: str, reader_index: int, profile: str, *, start: str = "beginning") -> None:
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
        self._next = q[r + _R_NEXT] or (1 if start == "beginning" else q[_WRITE_SEQ] + 1)
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
        q[r + _R_NEXT] = self._next
        q[r + _R_ACTIVE] = 1

    @property
    def generation(self) -> int:
        return self._g.gen

    def _follow(self) -> None:
        """The writer moved to a bigger generation: continue there."""
        old = self._g
        self._attach(_open_latest(self.base, newer_than=old.gen))
        old.close()

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
        q = self._q
        floor = self._next
        while True:
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
            h = self._slots[(target - 1) % self._count]
            v = q[h]
            if v != 2 * target:
                # overwritten since write_seq was read: the writer is on this slot right now
                floor = self._headroom(target)
                continue
            n = q[h + 1]
            ts = q[h + 2]
            if n > self._slot_size:
                floor = self._headroom(target)
                continue
            off = (h << 3) + _SLOT_HEADER
            data = self._mv[off:off + n].tobytes()
            fence()
            if q[h] != v:
                floor = self._headroom(target)  # torn: lapped during the copy
                continue
            nxt = self._next
            if target > nxt:
                self.dropped += target - nxt
                q[self._r + _R_DROPPED] = self.dropped
            self.read_count += 1
            self._next = target + 1
            r = self._r
            q[r + _R_READ] = self.read_count
            q[r + _R_NEXT] = target + 1
            q[r + _R_LAST_READ_NS] = time.monotonic_ns()
            return data, ts

    def wait(self, timeout_s: float | None) -> bool:
        """Sleep until the writer publishes (or moves the ring), at most `timeout_s`.

        Returns False on timeout, True when new data may exist (also after a signal,
        so a node's stop handler gets to run)."""
        g = self._g
        w = g.word.value
        if self.has_new():
            return True
        return futex_wait(g.addr, w, timeout_s)

    def close(self) -> None:
        """Detach; the record keeps its totals and position so a restarted reader resumes."""
        if self._g is not None:
            self._q[self._r + _R_ACTIVE] = 0
            self._q = self._mv = None
            self._g.close()
            self._g = None


def wait_any(readers: list[RingReader], timeout_s: float | None) -> bool:
    """Sleep until any of `readers` may have something new (fan-in), at most `timeout_s`.

    Returns False on timeout, True otherwise (including after a signal)."""
    words = []
    for r in readers:
        g = r._g
        w = g.word.value
        if r.has_new():
            return True
        words.append((g.addr, w))
    return futex_waitv(words, timeout_s) != -1


def _open_for_runtime(base: str) -> _Gen:
    gens = _generations(base)
    if not gens:
        raise RingError(f"no ring file for {base} (was it created, or already reaped?)")
    for gen in reversed(gens):
        try:
            return _Gen(_gen_path(base, gen))
        except FileNotFoundError:
            continue
    return _open_latest(base)


def read_counters(base: str) -> dict:
    """The ring's live counters, as the runtime shows them."""
    g = _open_for_runtime(base)
    try:
        q = g.q
        readers = []
        for i in range(MAX_READERS):
            r = g.record_q(i)
            pid, read, dropped, last, active = q[r:r + 5]
            if active or pid or read or dropped:
                readers.append(
                    {"index": i, "pid": pid, "read": read, "dropped": dropped,
                     "last_read_ns": last, "active": bool(active)}
                )
        return {
            "write_seq": q[_WRITE_SEQ],
            "last_write_ns": q[_LAST_WRITE_NS],
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
