"""A ring's files: their layout, their generations, and making and removing them.

A ring lives in files `<base>.<generation>` (base is a full path in the user's own 0700
folder under /dev/shm, see shm.py: no other user can create, replace or open a name there,
and every file is created O_EXCL|O_NOFOLLOW, mode 0600, and fstat-checked when opened).
The runtime creates generation 0 with `create_ring` before starting any process and removes
every file with `reap` (at unload, and at its start for files a dead runtime left). A writer
grows the ring when a bag does not fit a slot by creating the next generation (4 slots at
first, all its budget's once an ordered reader nears being lapped: writer.py), which starts
with the last bags of the one before; readers follow it. Once bags fit the normal slot again
(_SHRINK_AFTER in a row, or _SHRINK_AFTER_S after the last big one, also when no bag follows:
the node host calls `relax` while idle) the writer moves back to a generation of the normal size.
A ring never takes more than its max_bytes, fixed by `create_ring` (the runtime's
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
           (active: 0, or 1 for a newest reader, 2 for an ordered one; read: bags taken,
           less those given back with discard/unread, so that for a node's input it is
           what the node got; bad: bags that did not decode;
           generation: the one the reader maps, so the writer shrinks only once no live
           reader still needs an older one: a reader follows only to the newest
           generation, and the ones between are gone)
    4352   watch line: the watcher (u32: its reader index + 1, 0 while none), then the
           hand-off word (u32), which followers sleep on and the watcher bumps
    4416   followers line: byte i is 1 while reader i may be asleep on the hand-off word
    8192   slots, each `slot_stride` bytes: seq, length, publish_ns, origin_ns, origin
           (the bag's origin: the output it comes from and when, ../latency.py), (pad to 64), payload

Sequence numbers start at 1 and continue across generations. How a bag is published into
its slot and read out of it (a seqlock) is writer.py's and reader.py's; how readers sleep
and are woken through the futex, sleepers, watch and followers lines is wake.py's.
"""

from __future__ import annotations

import mmap
import os
import time

from tatolab import _settings as settings

from .. import latency, shm
from ..futex import word_at
from ..shm import RingError

_PUBLISH_LAYOUT: dict[str, int] | None
try:  # the C publisher checks its offsets against these (see _native.c)
    from .._native import LAYOUT as _PUBLISH_LAYOUT
except ImportError:
    _PUBLISH_LAYOUT = None

MAGIC = int.from_bytes(b"TATORNG1", "little")
# 2: the sleepers line (a version-1 reader would never set it, and miss wakes)
# 3: normal size and max_bytes in the header (a version-2 writer would never shrink or cap)
VERSION = 3
MAX_READERS = 64
MAX_BAG_BYTES = 1 << 30  # 1 GiB
_MIB = 1 << 20
LINK_MEMORY_ENV = "TATOLAB_LINK_MEMORY_MB"
DEFAULT_LINK_MEMORY_MB = 2048

# header word indices (u64)
(_MAGIC, _VERSION, _GEN, _SLOT_SIZE, _SLOT_COUNT, _WRITE_SEQ, _LAST_WRITE_NS, _MOVED, _BASE_SEQ, _STRIDE,
 _H_SLOTS_OFF, _NORMAL_SLOT_SIZE, _NORMAL_SLOT_COUNT, _MAX_BYTES) = range(14)
_FUTEX_OFF = 128
# The writer stores the futex word as the low half of the u64 at 128 (bytes 132..135 are
# unused): the bag's sequence number, 31 bits. An interrupt or a move sets the top bit
# instead (wake.bump_and_wake), so a publish always changes the word from any value a
# reader may have seen before it, which is all futex_wait's compare needs.
_FUTEX_Q = _FUTEX_OFF // 8
_WORD_MASK = 0x7FFFFFFF
_SLEEPERS_OFF = 192
# The sleepers line as 8 u64 words: comparing two 'Q' views of 8 items is ~4x cheaper than 64 bytes.
_NO_SLEEPERS = memoryview(bytes(MAX_READERS)).cast("Q")
_TABLE_OFF = 256
_RECORD_BYTES = 64
_TABLE_BYTES = MAX_READERS * _RECORD_BYTES
_WATCH_OFF = _TABLE_OFF + _TABLE_BYTES
_HANDOFF_OFF = _WATCH_OFF + 4
_FOLLOWERS_OFF = _WATCH_OFF + 64
_SLOTS_OFF = 8192
_SLOT_HEADER = 64
# reader record word offsets (u64, relative to the record)
_R_PID, _R_READ, _R_DROPPED, _R_LAST_READ_NS, _R_ACTIVE, _R_NEXT, _R_BAD, _R_GEN = range(8)
# _R_ACTIVE of a reader that is attached: which profile it reads with (the writer widens a grown ring for an
# ordered one about to be lapped, writer.py)
_ACTIVE_NEWEST, _ACTIVE_ORDERED = 1, 2
_RECORD_Q = _RECORD_BYTES // 8  # words in a reader's record
_HELD_OFF = 40  # bytes into a slot's header: the u32 count of views held of it (views.py)
if _PUBLISH_LAYOUT is not None and _PUBLISH_LAYOUT != {
    "write_seq_q": _WRITE_SEQ, "futex_off": _FUTEX_OFF, "sleepers_off": _SLEEPERS_OFF, "slot_header": _SLOT_HEADER,
    "latency_file_bytes": latency.FILE_BYTES, "table_q": _TABLE_OFF // 8, "record_q": _RECORD_Q,
    "r_active": _R_ACTIVE, "r_next": _R_NEXT, "active_ordered": _ACTIVE_ORDERED, "held_off": _HELD_OFF,
    "watch_off": _WATCH_OFF, "handoff_off": _HANDOFF_OFF, "followers_off": _FOLLOWERS_OFF,
}:
    raise ImportError(f"tatolab/_links/_native was built for another ring layout ({_PUBLISH_LAYOUT}); reinstall tatolab")

_OPEN_RETRY_S = 2.0


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
    return int(settings.value(LINK_MEMORY_ENV)) * _MIB  # a SettingError (a ValueError) says what is allowed


def _file_size(slot_size: int, slot_count: int) -> int:
    return _SLOTS_OFF + (_SLOT_HEADER + _round_up(slot_size, 64)) * slot_count


def _make_generation(
    base: str, gen: int, slot_size: int, slot_count: int, seq: int, table: bytes | None,
    normal: tuple[int, int] | None = None, max_bytes: int = 0, last_ns: int = 0, carry: _Gen | None = None,
) -> None:
    """Write generation `gen` completely under a temporary name, then rename it into place,
    so nobody ever opens a half-made file. With `carry` (the generation it follows), it starts
    with that one's last bags, as many as both hold: a reader that never mapped `carry` (it
    follows to the newest) finds them here."""
    shm.check_folder(os.path.dirname(base) or ".")
    stride = _SLOT_HEADER + _round_up(slot_size, 64)
    size = _SLOTS_OFF + stride * slot_count
    final = _gen_path(base, gen)
    tmp = final + ".tmp"
    _unlink_quietly(tmp)  # left by a writer killed mid-way (only this user can name files here)
    fd = shm.create_exclusive(tmp, size)
    carried = _carried(carry, seq, slot_count, slot_size) if carry is not None else range(0)
    try:
        with mmap.mmap(fd, size if carried else _SLOTS_OFF) as mm:
            with memoryview(mm) as mv, mv.cast("Q") as q:
                if carry is not None:
                    for s in carried:
                        _copy_bag(carry, s, mv, q, _SLOTS_OFF + stride * ((s - 1) % slot_count))
                q[_MAGIC] = MAGIC
                q[_VERSION] = VERSION
                q[_GEN] = gen
                q[_SLOT_SIZE] = slot_size
                q[_SLOT_COUNT] = slot_count
                q[_WRITE_SEQ] = seq
                q[_LAST_WRITE_NS] = last_ns
                q[_MOVED] = 0
                q[_BASE_SEQ] = carried.start - 1 if carried else seq
                q[_STRIDE] = stride
                q[_H_SLOTS_OFF] = _SLOTS_OFF
                q[_NORMAL_SLOT_SIZE], q[_NORMAL_SLOT_COUNT] = normal or (slot_size, slot_count)
                q[_MAX_BYTES] = max_bytes
                if table is not None:
                    mv[_TABLE_OFF:_TABLE_OFF + _TABLE_BYTES] = table
    finally:
        os.close(fd)
    os.rename(tmp, final)


def _carried(old: _Gen, seq: int, count: int, slot_size: int) -> range:
    """The bags of `old` (bag `seq` its last) that a generation of `count` slots of `slot_size` takes along:
    its last whole ones, as many as both hold (none into smaller slots)."""
    if slot_size < old.slot_size:
        return range(0)
    first = seq + 1
    while first > max(old.base_seq + 1, seq - min(old.count, count) + 1) and \
            old.q[old.slots_q + ((first - 2) % old.count) * old.stride_q] == 2 * (first - 1):
        first -= 1
    return range(first, seq + 1)


def _copy_bag(old: _Gen, s: int, mv: memoryview, q: memoryview, at: int) -> None:
    """Bag `s` of `old` into the slot at byte `at` of a generation being made: its seq word, length,
    publish and origin times, origin, and payload (not the views held of it: none are, of the copy)."""
    h = old.slots_q + ((s - 1) % old.count) * old.stride_q
    n = old.q[h + 1]
    q[at // 8:at // 8 + 5] = old.q[h:h + 5]
    mv[at + _SLOT_HEADER:at + _SLOT_HEADER + n] = old.mv[(h << 3) + _SLOT_HEADER:(h << 3) + _SLOT_HEADER + n]


class _Gen:
    """One mapped generation file and the views the hot paths use."""

    def __init__(self, path: str) -> None:
        self.mm = shm.map_owned(path, _SLOTS_OFF, "a tatolab ring")
        size = len(self.mm)
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

    def close(self) -> None:
        self.word = self.watch = self.handoff = None  # type: ignore[assignment]  # (unusable once closed)
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
    _make_generation(base, 0, slot_size, slot_count, seq=0, table=None, max_bytes=max_bytes)
    latency.create(base)


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


