"""The surface pool on shared memory: the CPU backend of frame surfaces.

One pool per runtime. A control file holds the slot table, the holders (one per process that
leases surfaces) and a lease count per slot and holder; each slot's pixels live in a file of
their own beside it, grown when a larger frame needs the slot. A surface id is
``<slot>#<generation>``: the generation moves on each time a slot is given to a new frame,
so an id that outlived its frame is refused by name.

Leasing is a Dekker handshake, never a wait: a reader stores its count then loads the slot's
generation; a writer taking a slot stores the new generation then loads the counts. One of
the two always sees the other, so a slot is never given out while a reader holds it. A
holder's cells are written only by that holder; the cells of a holder whose process died are
zeroed by the next writer that finds the pool full, so a killed reader's leases come back.

A GPU backend serves the same operations (allocate, lease, release, publish) with CUDA memory
shared between processes; the bags and ``VideoFrame`` do not change.
"""

from __future__ import annotations

import atexit
import fcntl
import mmap
import os
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

from tatolab._links.futex import full_fence
from tatolab._safe_fs import create_private_file, open_own_file

MAGIC = int.from_bytes(b"TATOSRF1", "little")
VERSION = 1
DEFAULT_HOLDERS = 1024  # processes that may hold surfaces at once (TATOLAB_SURFACE_HOLDERS)
HOLDERS_SETTING = "TATOLAB_SURFACE_HOLDERS"
DEFAULT_SLOTS = 32
DEFAULT_BUDGET_BYTES = 2 << 30  # 2 GiB of /dev/shm at most
FORMATS = {"rgba8": 4}  # bytes per pixel; NV12 and others follow with their own plane layout

_HEADER = 4096
_HOLDER_BYTES = 16  # pid u32, pad, start time u64
_SLOT_BYTES = 64  # generation u64, capacity u64, width u32, height u32, format u32, pad, used_ns u64
_H = struct.Struct("<QIIIIQ")  # magic, version, slots, holders, pad, budget
_EXHAUSTED_OFF = 40  # u64, counted under the allocation lock
_REFUSED_OFF = 48  # u64: processes refused a holder's place, counted under the table lock
_REFUSED_PIDS_OFF = 56  # u64 x _REFUSED_KEPT: the last pids refused one (a ring, by the count above)
_REFUSED_KEPT = 32


class SurfaceError(ValueError):
    """A surface id that names no surface now: unknown, malformed or stale."""


class PoolExhausted(RuntimeError):
    """Every slot is held or the byte budget is spent: the writer drops this frame."""


def frame_bytes(width: int, height: int, format: str) -> int:
    if format not in FORMATS:
        raise SurfaceError(f"format {format!r} is not one Tatolab knows; use one of: {', '.join(FORMATS)}")
    if width <= 0 or height <= 0:
        raise SurfaceError(f"a frame needs a width and height above 0, got {width}x{height}")
    return width * height * FORMATS[format]


def parse_id(surface_id: Any) -> tuple[int, int]:
    if isinstance(surface_id, str):
        slot, sep, gen = surface_id.partition("#")
        if sep and slot.isdigit() and gen.isdigit():
            return int(slot), int(gen)
    raise SurfaceError(f"{surface_id!r} is not a surface id; one looks like '3#17' (slot#generation)")


def _layout(slots: int, holders: int) -> tuple[int, int, int, int]:
    holders_off = _HEADER
    slots_off = holders_off + holders * _HOLDER_BYTES
    leases_off = slots_off + slots * _SLOT_BYTES
    size = leases_off + slots * holders * 4
    return holders_off, slots_off, leases_off, size


def create(base: str, *, slots: int = DEFAULT_SLOTS, budget_bytes: int = DEFAULT_BUDGET_BYTES,
           holders: int = DEFAULT_HOLDERS) -> int:
    """Make an empty pool at ``base``; returns its byte budget, at most half the free shared memory
    (a container's /dev/shm may hold only 64 MiB)."""
    _, _, _, size = _layout(slots, holders)
    disk = os.statvfs(os.path.dirname(base) or ".")
    budget_bytes = max(0, min(budget_bytes, disk.f_bavail * disk.f_frsize // 2))
    fd = create_private_file(base, "the surface pool's control file")
    try:
        os.ftruncate(fd, size)
        os.pwrite(fd, _H.pack(MAGIC, VERSION, slots, holders, 0, budget_bytes), 0)
    finally:
        os.close(fd)
    return budget_bytes


def _start_time(pid: int) -> int:
    """The process's start time in clock ticks (/proc), so a reused pid is not taken for the holder."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return -1
    return int(data[data.rindex(b")") + 2:].split()[19])


@dataclass
class SlotInfo:
    slot: int
    generation: int
    capacity: int
    width: int
    height: int
    format: str
    used_ns: int


class Pool:
    """A process's handle on the pool: its holder index, its mappings, its leases.

    The CPU backend of ``backend.SurfaceBackend``."""

    dlpack_device = (1, 0)  # kDLCPU

    def __init__(self, base: str) -> None:
        self.base = base
        self.fd = open_own_file(base, os.O_RDWR, "the surface pool's control file")
        head = os.pread(self.fd, _H.size, 0)
        magic, version, slots, holders, _, budget = _H.unpack(head)
        if magic != MAGIC or version != VERSION:
            os.close(self.fd)
            raise SurfaceError(f"{base} is not a surface pool this Tatolab reads (version {version})")
        self.slots = slots
        self.holders = holders
        self.budget = budget
        self._no_leases = bytes(holders * 4)
        self._holders_off, self._slots_off, self._leases_off, size = _layout(slots, holders)
        self.mm = mmap.mmap(self.fd, size)
        self.words = memoryview(self.mm).cast("B")
        self.q = memoryview(self.mm).cast("Q")  # 8-byte words
        self.i = memoryview(self.mm).cast("I")  # 4-byte words
        self.holder: int | None = None
        self._lock = threading.Lock()  # this process's lease counts
        self._table_lock = threading.Lock()  # with flock: the slot and holder tables
        self._maps: dict[int, tuple[int, mmap.mmap]] = {}  # slot -> (size, mapping)
        self._pid = os.getpid()

    # -- the table ------------------------------------------------------------------------

    def _slot_q(self, slot: int, field: int) -> int:
        return (self._slots_off + slot * _SLOT_BYTES) // 8 + field

    def _lease_i(self, slot: int, holder: int) -> int:
        return (self._leases_off + (slot * self.holders + holder) * 4) // 4

    def info(self, slot: int) -> SlotInfo:
        gen, cap = self.q[self._slot_q(slot, 0)], self.q[self._slot_q(slot, 1)]
        wh = self.q[self._slot_q(slot, 2)]
        fmt = self.q[self._slot_q(slot, 3)] & 0xFFFFFFFF
        return SlotInfo(slot, gen, cap, wh & 0xFFFFFFFF, wh >> 32, list(FORMATS)[fmt] if fmt < len(FORMATS) else "?",
                        self.q[self._slot_q(slot, 4)])

    def holders_of(self, slot: int) -> list[int]:
        start = self._lease_i(slot, 0)
        return [h for h, count in enumerate(self.i[start:start + self.holders]) if count]

    def _holder_pid(self, holder: int) -> tuple[int, int]:
        off = (self._holders_off + holder * _HOLDER_BYTES) // 8
        return self.q[off] & 0xFFFFFFFF, self.q[off + 1]

    def _holder_alive(self, holder: int) -> bool:
        pid, started = self._holder_pid(holder)
        return pid != 0 and _start_time(pid) == started

    def _clear_holder(self, holder: int) -> None:
        for slot in range(self.slots):
            self.i[self._lease_i(slot, holder)] = 0
        off = (self._holders_off + holder * _HOLDER_BYTES) // 8
        self.q[off] = 0
        self.q[off + 1] = 0

    def _locked(self) -> Any:
        pool = self

        class _Guard:
            # flock excludes other processes; threads of this one share its descriptor, so they
            # take a lock of their own first
            def __enter__(self) -> None:
                pool._table_lock.acquire()
                try:
                    fcntl.flock(pool.fd, fcntl.LOCK_EX)
                except BaseException:
                    pool._table_lock.release()
                    raise

            def __exit__(self, *_: Any) -> None:
                try:
                    fcntl.flock(pool.fd, fcntl.LOCK_UN)
                finally:
                    pool._table_lock.release()

        return _Guard()

    def _me(self) -> int:
        """This process's holder index, claimed on first use and given back at exit."""
        if self.holder is not None and self._pid == os.getpid():
            return self.holder
        with self._locked():
            if self.holder is not None and self._pid == os.getpid():
                return self.holder  # another thread claimed it meanwhile
            for holder in range(self.holders):
                pid, _ = self._holder_pid(holder)
                if pid == 0 or not self._holder_alive(holder):
                    self._clear_holder(holder)
                    off = (self._holders_off + holder * _HOLDER_BYTES) // 8
                    self.q[off + 1] = _start_time(os.getpid())
                    self.q[off] = os.getpid()
                    self.holder, self._pid = holder, os.getpid()
                    atexit.register(self.close)
                    return holder
            refused = self.q[_REFUSED_OFF // 8]
            self.q[_REFUSED_PIDS_OFF // 8 + refused % _REFUSED_KEPT] = os.getpid()
            self.q[_REFUSED_OFF // 8] = refused + 1
        raise PoolExhausted(
            f"this process cannot use frames: all {self.holders} places in the surface pool are held by other "
            f"running processes (the limit is {HOLDERS_SETTING}={self.holders}); set {HOLDERS_SETTING} higher "
            "for tatolabd and restart it, or run fewer nodes that handle frames")

    def refused_pids(self) -> set[int]:
        """The last processes refused a place in the holder table (for their nodes' graph entries)."""
        refused = self.q[_REFUSED_OFF // 8]
        return {self.q[_REFUSED_PIDS_OFF // 8 + i] for i in range(min(refused, _REFUSED_KEPT))}

    # -- leases ---------------------------------------------------------------------------

    def lease(self, surface_id: str) -> SlotInfo:
        """Hold the surface ``surface_id`` names until ``release``; a stale or unknown id is refused."""
        slot, gen = parse_id(surface_id)
        if slot >= self.slots:
            raise SurfaceError(f"surface {surface_id} is unknown: the pool has {self.slots} slots (0 to {self.slots - 1})")
        me = self._me()
        cell = self._lease_i(slot, me)
        with self._lock:
            self.i[cell] += 1
        full_fence()  # our count is visible before we look at the generation
        info = self.info(slot)
        if info.generation != gen:
            with self._lock:
                self.i[cell] -= 1
            now = f"{slot}#{info.generation}" if info.generation else "never written"
            raise SurfaceError(
                f"surface {surface_id} is stale: its slot now holds a newer frame ({now}). "
                "Frames are valid while a reader holds them; read the newest bag again"
            )
        return info

    def release(self, slot: int) -> None:
        if self.holder is None or self._pid != os.getpid():
            return  # a forked child never held what its parent held
        with self._lock:
            cell = self._lease_i(slot, self.holder)
            if self.i[cell]:
                self.i[cell] -= 1

    def allocate(self, width: int, height: int, format: str = "rgba8") -> SlotInfo:
        """A slot for a new frame, held by this process: the oldest free one, grown if needed.

        Raises ``PoolExhausted`` (counted in the pool) rather than waiting for one to come free."""
        need = frame_bytes(width, height, format)
        me = self._me()
        with self._locked():
            info = self._take(need, width, height, format, me)
            if info is None:
                self._reclaim_dead()
                info = self._take(need, width, height, format, me)
            if info is None:
                self.q[_EXHAUSTED_OFF // 8] += 1
                raise PoolExhausted(
                    f"the surface pool is full: all {self.slots} slots are held by readers or the "
                    f"{self.budget >> 20} MiB budget is spent; this frame was dropped"
                )
            return info

    def _free(self, slot: int) -> bool:
        start = self._lease_i(slot, 0) * 4
        return self.words[start:start + self.holders * 4] == self._no_leases

    def _take(self, need: int, width: int, height: int, format: str, me: int) -> SlotInfo | None:
        free = [self.info(s) for s in range(self.slots) if self._free(s)]
        # the oldest frame first, so a bag just sent stays readable as long as possible
        free.sort(key=lambda i: (i.used_ns, i.capacity < need))
        used = sum(self.q[self._slot_q(s, 1)] for s in range(self.slots))
        for info in free:
            if info.capacity < need and used - info.capacity + need > self.budget:
                continue
            slot = info.slot
            self.q[self._slot_q(slot, 0)] = info.generation + 1
            full_fence()  # the new generation is visible before we look at the counts again
            if not self._free(slot):
                continue  # a reader leased the old frame just now: it keeps it
            if info.capacity < need:
                try:
                    self._grow(slot, need)
                except OSError:  # shared memory is full: the frame is dropped, never a SIGBUS later
                    return None
            self.q[self._slot_q(slot, 2)] = width | (height << 32)
            self.q[self._slot_q(slot, 3)] = list(FORMATS).index(format)
            self.q[self._slot_q(slot, 4)] = time.monotonic_ns()  # last given out: the order slots are reused in
            with self._lock:
                self.i[self._lease_i(slot, me)] += 1
            return self.info(slot)
        return None

    def _reclaim_dead(self) -> int:
        reclaimed = 0
        for holder in range(self.holders):
            pid, _ = self._holder_pid(holder)
            if pid and not self._holder_alive(holder):
                self._clear_holder(holder)
                reclaimed += 1
        return reclaimed

    def _grow(self, slot: int, need: int) -> None:
        path = self.slot_path(slot)
        try:
            fd = open_own_file(path, os.O_RDWR, "a surface's file")
        except FileNotFoundError:
            fd = create_private_file(path, "a surface's file")
        try:
            # reserved now: a full /dev/shm refuses here (ENOSPC) rather than kill a node with
            # SIGBUS when it first touches a page
            os.posix_fallocate(fd, 0, need)
        finally:
            os.close(fd)
        self.q[self._slot_q(slot, 1)] = need

    def publish(self, slot: int) -> None:
        self.q[self._slot_q(slot, 4)] = time.monotonic_ns()

    # -- pixels ---------------------------------------------------------------------------

    def slot_path(self, slot: int) -> str:
        return f"{self.base}-{slot}"

    def mapping(self, slot: int, need: int) -> mmap.mmap:
        """The slot's memory, mapped once per process (again only when the slot's file grew)."""
        cached = self._maps.get(slot)
        if cached is not None and cached[0] >= need:
            return cached[1]
        fd = open_own_file(self.slot_path(slot), os.O_RDWR, "a surface's file")
        try:
            size = os.fstat(fd).st_size
            mapped = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        # an older, smaller mapping stays alive as long as views over it do
        self._maps[slot] = (size, mapped)
        return mapped

    # -- counts for the graph ---------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        in_use = 0
        live: dict[int, bool] = {}
        for slot in range(self.slots):
            for holder in self.holders_of(slot):
                if holder not in live:
                    live[holder] = self._holder_alive(holder)
                if live[holder]:
                    in_use += 1
                    break
        return {
            "slots": self.slots,
            "in_use": in_use,
            "bytes": sum(self.q[self._slot_q(s, 1)] for s in range(self.slots)),
            "budget_bytes": self.budget,
            "exhausted": self.q[_EXHAUSTED_OFF // 8],
            "holders": self.holders,  # processes that may hold surfaces at once (TATOLAB_SURFACE_HOLDERS)
            "holders_refused": self.q[_REFUSED_OFF // 8],  # processes refused a place: no frames for them
        }

    def dispose(self) -> None:
        """Unmap and close (a handle that never leased, like the runtime's for its counts)."""
        self.close()
        for view in (self.words, self.q, self.i):
            view.release()
        self.mm.close()
        os.close(self.fd)

    def close(self) -> None:
        if self.holder is not None and self._pid == os.getpid():
            try:
                with self._locked():
                    self._clear_holder(self.holder)
            except (OSError, ValueError):
                pass
            self.holder = None


_current: Pool | None = None
_configured: str | None = None
_current_lock = threading.Lock()


def configure(base: str | None) -> None:
    """Point this process at the runtime's pool (the node host does, from the node's spec).

    Opened on first use, so a node that never touches a frame never opens it."""
    global _current, _configured
    with _current_lock:
        _current, _configured = None, base


def current() -> Pool:
    global _current
    if _current is None:
        base = _configured or os.environ.get("TATOLAB_SURFACE_POOL")
        if base:
            with _current_lock:
                if _current is None:
                    _current = Pool(base)
    if _current is None:
        raise SurfaceError(
            "no surface pool here: frames exist only inside a node the runtime started "
            "(or a process given TATOLAB_SURFACE_POOL)"
        )
    return _current
