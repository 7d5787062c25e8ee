"""Types of the compiled module (tatolab/_links/_native.c): the links' hot paths in C."""

from collections import deque
from collections.abc import Callable
from typing import Any
from typing_extensions import Buffer

LAYOUT: dict[str, int]  # the ring offsets it was built for (checked by ring/layout.py)

def bag_fits(bag: object) -> bool:
    """bag holds exactly what the fast path of _bags.encode takes."""

def compare_exchange(addr: int, expected: int, new: int, /) -> bool:
    """Atomically set the u32 at addr to new if it holds expected (a full barrier either way)."""

def futex_wait(addr: int, expected: int, timeout_s: float | None, /) -> bool:
    """Sleep while the u32 at addr holds expected, at most timeout_s (None: no limit); False only on timeout."""

def futex_wake(addr: int, count: int = ..., /) -> int:
    """Wake up to count (default: all) waiters on the u32 at addr; returns how many woke."""

def clock_of(obj: object, /) -> int:
    """time.monotonic_ns(), ignoring its argument: a property's getter without a Python frame (ctx.time)."""

def fence() -> None:
    """An acquire-release fence (the Python reader's loads in order where the CPU reorders them)."""

def watch_wait(mapping: Buffer, index: int, expected: int, timeout_s: float | None, /) -> bool | int:
    """A reader's wait as the ring's watcher (ring/wake.py): True when woken, False on timeout; the watcher's
    index + 1 when another reader holds the role."""

def release_hold(addr: int, /) -> None:
    """One view fewer of the slot whose holds count is the u32 at addr (ring/views.py)."""

def full_fence() -> None:
    """A sequentially consistent fence: every store before it is visible before any load after it."""

class Publisher:
    """The ring writer's fast path (see ring/writer.py)."""

    def __init__(self, slow: Callable[[Buffer], int], /) -> None: ...
    def attach(self, mapping: Buffer, slots_offset: int, stride: int, count: int, slot_size: int, seq: int,
               fits: int, /) -> None: ...
    def set_origin(self, cell: list[int] | None, own_id: int, /) -> None: ...
    def detach(self) -> None: ...
    def write(self, payload: Buffer, /) -> int: ...
    def publish(self, payload: Buffer, /) -> int: ...
    def gate(self) -> None: ...
    def open(self, fits: int, /) -> None: ...
    def set_grown(self, big_from: int, may_widen: bool, /) -> None: ...
    def loan(self, nbytes: int, fits: int = ..., /) -> int:
        """The offset of the next slot's payload, taken for a bag written in place; -1: the slow path's case."""
    def commit(self) -> int: ...
    def abort(self) -> None: ...
    @property
    def big(self) -> tuple[int, int]: ...
    @property
    def seq(self) -> int: ...
    @property
    def wakes(self) -> int: ...

class RunReader:
    """An ordered ring reader's runs out of one mapped generation (see ring/reader.py)."""

    def __init__(self, mapping: Buffer, slots_q: int, stride_q: int, count: int, slot_size: int,
                 hist: Buffer | None, block_off: int, origins: bool, read_q: int, next_q: int, last_read_q: int,
                 /) -> None: ...
    def run(self, first: int, last: int, /) -> list[tuple[bytes, int]] | list[tuple[bytes, int, int, int]]:
        """The whole bags first..last as (payload, publish_ns), or with ``origins`` (payload,
        publish_ns, origin_ns, origin), in order, up to the first that is not whole; each taken is
        recorded in the latency block of ``hist`` (the mapped latency file, or None) and counted in
        the reader's record (words read_q, next_q, last_read_q of the mapping)."""
    def view(self, next: int, newest: bool, /) -> tuple[int, int, int, int, int, int] | None:
        """(seq, offset, length, publish_ns, origin_ns, origin) of a bag held in its slot of a grown
        generation, recorded and counted; None where the reader's Python path must look."""
    def close(self) -> None: ...

class Recorder:
    """A reader's latency block (latency.py), recorded in C."""

    def __init__(self, hist: Buffer, block_off: int, /) -> None: ...
    def note(self, publish_ns: int, origin_ns: int, origin: int, /) -> None: ...
    def close(self) -> None: ...

class NodeTimer:
    """A node's process() and wait histograms in its status file (tatolab/_host/status.py), in C."""

    def __init__(self, status: Buffer, cell: list[int], /) -> None: ...
    def begin(self) -> None: ...
    def end(self) -> None: ...
    def close(self) -> None: ...

class ReaderCore:
    """The members of ring.RingReader that the node host's per-bag path in C reads and writes (_ordered.h)."""

    _next: int
    read_count: int
    _gap: int
    _last_ts: int
    _last_seq: int
    _runs: RunReader | None
    _big: bool
    views: bool

class LinkCore:
    """The members of ports._Link that the node host's per-bag path in C reads and writes (_ordered.h)."""

    pending: tuple[Any, ...] | None
    backlog: deque[tuple[Any, ...]]
    taken: int

def fill_ordered(link: LinkCore, reader: ReaderCore, cell: list[int], /) -> bool | None:
    """InputPort.fill for a port fed by one ordered link whose bag was taken and backlog is empty: the
    run of bags published since, the first delivered (link.pending) and the rest behind it; False when
    nothing is new, None where it is not the common case (the Python path then does it, taking nothing here)."""

def take_ordered(link: LinkCore, origin: list[int] | None, decode: Callable[[bytes], Any], /) -> Any:
    """The bag delivered on a port's one ordered link, decoded and taken (the origin cell made the older of
    the two); None where it is not that case or the bag does not decode (nothing taken)."""
