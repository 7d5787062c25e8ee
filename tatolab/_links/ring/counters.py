"""The runtime's look at a ring: its live counters, its newest bag, and clearing a reader's record.

The runtime never writes bags, and reads none in order (no reader record): it opens the newest generation, reads the header
and the reader table (layout.py) as they are at that moment, and closes it again.
"""

from __future__ import annotations

from .. import latency
from ..futex import NEEDS_FENCE, fence
from ..shm import RingError
from .layout import (
    _RECORD_BYTES,
    _SLOT_HEADER,
    _WRITE_SEQ,
    MAX_READERS,
    _Gen,
    _gen_path,
    _generations,
    _last_publish_ns,
)


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
        return  # a ring made without one
    try:
        stats.clear(index)  # its latency block too
    finally:
        stats.close()


def newest_bag(base: str) -> bytes | None:
    """A copy of the ring's newest bag as it is now (the seqlock's read, reader.py), or None while
    none was written (or the writer kept lapping the copy): what the relay looks at to tell what
    an output carries. Takes no reader record and counts nothing."""
    g = _open_for_runtime(base)
    try:
        q = g.q
        for _ in range(3):
            ws = q[_WRITE_SEQ]
            if ws <= g.base_seq:
                return None  # no bag in this generation yet
            h = g.slots_q + ((ws - 1) % g.count) * g.stride_q
            v = q[h]
            if NEEDS_FENCE:
                fence()
            n = q[h + 1]
            if v != 2 * ws or n > g.slot_size:
                continue  # the writer is on it: look again
            off = (h << 3) + _SLOT_HEADER
            data = g.mv[off:off + n].tobytes()
            fence()
            if q[h] == v:
                return data
        return None
    finally:
        g.close()
