"""How old bags are when they are read: fixed histograms beside each ring, in shared memory.

Every ring `<base>` has a file `<base>#latency` (made by `create`, at the ring's creation, and
reaped with it). Each reader record of the ring owns one block in it, written only by that
reader (so no lock and no atomic is needed), read by the runtime for `tatolab graph`:

    0      header: magic, version, writer_starts (bumped by every RingWriter that opens the
           ring: a reader seeing it change starts its windows again, and counts a reset)
    4096   MAX_READERS blocks of BLOCK_BYTES: the link set, then PATHS path sets

A set is one histogram of ages in nanoseconds (monotonic clock, the same in every process):

    0      u64 words: origin id (path sets: the source output the ages are counted from;
           0 while the set is free), bags since start, max since start, writer_starts seen
           (link set), window resets (link set), origins that found no free path set (link set)
    64     u64[WINDOW]: the second (monotonic ns // 1e9) each window slot counts
    160    u64[WINDOW]: each slot's max age
    256    u64[BUCKETS]: counts since start
    1152   u32[WINDOW][BUCKETS]: counts per second, a ring of WINDOW seconds

Buckets are log-spaced: 0 holds ages under 1.024 us, then 4 per power of two (each at most 25 %
wide) up to 2**38 ns (~275 s); the last bucket holds anything older. A percentile is the upper
edge of its bucket (never below the true value), capped by the max seen.

The link set counts read time minus the bag's publish time; a path set counts read time minus
the bag's origin time (ring.py: the slot header carries it), one set per origin output. The
recording itself is _native.c's `Recorder` and `RunReader` where the C module was built, and
`Recorder` and `note` below where it was not: both write the same words.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import time
from typing import Any

from . import shm
from .shm import RingError

MAGIC = int.from_bytes(b"TATOLAT1", "little")
VERSION = 1
MAX_READERS = 64
BUCKETS = 112
WINDOW = 12  # seconds kept; a summary counts the last WINDOW_S of them
WINDOW_S = 10
PATHS = 8  # origins one reader tells apart
SET_BYTES = 6528
SETS = 1 + PATHS
BLOCK_BYTES = SETS * SET_BYTES
HEADER_BYTES = 4096
FILE_BYTES = HEADER_BYTES + MAX_READERS * BLOCK_BYTES
_STARTS_Q = 2
# set word offsets (u64)
_ID, _COUNT, _MAX, _SEEN_STARTS, _RESETS, _OVERFLOW = range(6)
_SECS_Q = 8
_MAXS_Q = 20
_TOTAL_Q = 32
_WIN_OFF = 1152
assert _WIN_OFF + WINDOW * BUCKETS * 4 == SET_BYTES and _TOTAL_Q * 8 + BUCKETS * 8 == _WIN_OFF

SUFFIX = "#latency"


def path_of(base: str) -> str:
    return base + SUFFIX


def origin_id(base: str) -> int:
    """The id a ring's writer stamps on the bags it originates: 63 bits of its base's hash, never 0.

    The runtime finds the output back from it by hashing the bases it knows."""
    digest = hashlib.blake2b(base.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") >> 1) or 1


def bucket(ns: int) -> int:
    if ns < 1024:
        return 0
    e = ns.bit_length() - 1
    i = (e - 10) * 4 + ((ns >> (e - 2)) & 3) + 1
    return i if i < BUCKETS else BUCKETS - 1


def upper_ns(i: int) -> int:
    """The upper edge of bucket `i` (exclusive)."""
    if i == 0:
        return 1024
    e, sub = (i - 1) // 4 + 10, (i - 1) % 4
    return (4 + sub + 1) << (e - 2)


def create(base: str) -> None:
    """Make (afresh) the latency file of the ring at `base` (in a folder only this user can write:
    checked first, as for the ring's own files)."""
    shm.check_folder(os.path.dirname(base) or ".")
    path = path_of(base)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = shm.create_exclusive(path, FILE_BYTES)
    try:
        with mmap.mmap(fd, HEADER_BYTES) as mm, memoryview(mm) as mv, mv.cast("Q") as q:
            q[0], q[1] = MAGIC, VERSION
    finally:
        os.close(fd)


def remove(base: str) -> None:
    try:
        os.unlink(path_of(base))
    except FileNotFoundError:
        pass


class LatencyFile:
    """A mapped latency file: readers record into their block, the runtime reads every block."""

    def __init__(self, base: str) -> None:
        path = path_of(base)
        self.mm = shm.map_owned(path, FILE_BYTES, "a tatolab latency file", FILE_BYTES)
        self.mv = memoryview(self.mm)
        self.q = self.mv.cast("Q")
        if self.q[0] != MAGIC or self.q[1] != VERSION:
            self.close()
            raise RingError(f"{path} is not a tatolab latency file of version {VERSION}")

    def writer_started(self) -> None:
        self.q[_STARTS_Q] += 1

    def clear(self, index: int) -> None:
        """Forget reader `index`'s histograms (its record was released: a new reader starts afresh)."""
        off = HEADER_BYTES + index * BLOCK_BYTES
        self.mv[off:off + BLOCK_BYTES] = bytes(BLOCK_BYTES)

    def close(self) -> None:
        self.q.release()
        self.mv.release()
        self.mm.close()


def block_offset(index: int) -> int:
    return HEADER_BYTES + index * BLOCK_BYTES


# -- recording without the C module -------------------------------------------------------------


def _record_set(q: Any, w: Any, s: int, age: int, sec: int) -> None:
    """Count `age` in the set whose first u64 word is q[s] (w: the same file as u32 words)."""
    q[s + _COUNT] += 1
    if age > q[s + _MAX]:
        q[s + _MAX] = age
    slot = sec % WINDOW
    win = (s * 8 + _WIN_OFF) // 4 + slot * BUCKETS
    if q[s + _SECS_Q + slot] != sec:
        w[win:win + BUCKETS] = _ZEROS
        q[s + _MAXS_Q + slot] = 0
        q[s + _SECS_Q + slot] = sec
    b = bucket(age)
    q[s + _TOTAL_Q + b] += 1
    w[win + b] += 1
    if age > q[s + _MAXS_Q + slot]:
        q[s + _MAXS_Q + slot] = age


_ZEROS = memoryview(bytes(BUCKETS * 4)).cast("I")


def note(views: tuple[Any, Any], block: int, now: int, publish_ns: int, origin_ns: int, origin: int) -> None:
    """Record one bag read at `now` (what _native.note does): its age on the link, and its age
    since its origin on the path from output `origin` (0: none known)."""
    q, w = views
    s = block // 8
    starts = q[_STARTS_Q]
    if q[s + _SEEN_STARTS] != starts:
        if q[s + _SEEN_STARTS]:  # the writer restarted: the windows start again
            for k in range(SETS):
                base = s + k * SET_BYTES // 8 + _SECS_Q
                q[base:base + WINDOW] = _ZERO_SECS
            q[s + _RESETS] += 1
        q[s + _SEEN_STARTS] = starts
    sec = now // 1_000_000_000
    _record_set(q, w, s, now - publish_ns if now > publish_ns else 0, sec)
    if not origin:
        return
    for k in range(1, SETS):
        p = s + k * SET_BYTES // 8
        have = q[p + _ID]
        if have == origin or not have:
            if not have:
                q[p + _ID] = origin
            _record_set(q, w, p, now - origin_ns if now > origin_ns else 0, sec)
            return
    q[s + _OVERFLOW] += 1


_ZERO_SECS = memoryview(bytes(WINDOW * 8)).cast("Q")


class Recorder:
    """What _native.Recorder does, in Python: reader block `block` of a mapped latency file
    (`views`: it as u64 and u32 words); `note` records one bag read now."""

    def __init__(self, views: tuple[Any, Any], block: int) -> None:
        self._views: tuple[Any, Any] | None = views
        self._block = block

    def note(self, publish_ns: int, origin_ns: int, origin: int) -> None:
        if self._views is not None:
            note(self._views, self._block, time.monotonic_ns(), publish_ns, origin_ns, origin)

    def close(self) -> None:
        self._views = None


# -- reading (the runtime) ----------------------------------------------------------------------


def _summary(counts: list[int], bags: int, max_ns: int) -> dict[str, Any]:
    out: dict[str, Any] = {"p50_us": None, "p90_us": None, "p99_us": None, "max_us": None, "bags": bags}
    if not bags:
        return out
    total = sum(counts)
    for name, frac in (("p50_us", 0.5), ("p90_us", 0.9), ("p99_us", 0.99)):
        want = frac * total
        seen = 0
        for i, c in enumerate(counts):
            seen += c
            if c and seen >= want:
                out[name] = round(min(upper_ns(i), max_ns) / 1000, 1)
                break
    out["max_us"] = round(max_ns / 1000, 1)
    return out


Raw = tuple  # (bucket counts, bags, max ns): a histogram as read, before summing


def _read_set(q: Any, w: Any, s: int, now_sec: int) -> tuple[Raw, Raw]:
    """(the last WINDOW_S seconds, since start) of the set at q[s], raw."""
    window = [0] * BUCKETS
    bags = max_ns = 0
    for slot in range(WINDOW):
        sec = q[s + _SECS_Q + slot]
        if now_sec - WINDOW_S < sec <= now_sec:
            win = (s * 8 + _WIN_OFF) // 4 + slot * BUCKETS
            counts = w[win:win + BUCKETS].tolist()
            window = [a + b for a, b in zip(window, counts)]
            bags += sum(counts)
            max_ns = max(max_ns, q[s + _MAXS_Q + slot])
    total = q[s + _TOTAL_Q:s + _TOTAL_Q + BUCKETS].tolist()
    return (window, bags, max_ns), (total, q[s + _COUNT], q[s + _MAX])


def summary(*raws: Raw) -> dict[str, Any]:
    """`{"p50_us", "p90_us", "p99_us", "max_us", "bags"}` of one raw histogram, or of several summed
    (a sink input fed by more than one link from the same origin)."""
    if len(raws) == 1:
        return _summary(*raws[0])
    counts = [sum(c) for c in zip(*(r[0] for r in raws))] if raws else [0] * BUCKETS
    return _summary(counts, sum(r[1] for r in raws), max((r[2] for r in raws), default=0))


def read(base: str, indexes: list[int], now_ns: int | None = None) -> dict[int, dict[str, Any]]:
    """For each reader record in `indexes`: {"window", "total" (raw histograms of the link's
    ages), "resets", "paths": {origin id: (window, total)}, "paths_untracked"}. Raises RingError
    when the file is missing or not a latency file."""
    f = LatencyFile(base)
    try:
        q, w = f.q, f.mv.cast("I")
        try:
            now_sec = (now_ns if now_ns is not None else time.monotonic_ns()) // 1_000_000_000
            out = {}
            for index in indexes:
                if not 0 <= index < MAX_READERS:
                    continue
                s = block_offset(index) // 8
                window, total = _read_set(q, w, s, now_sec)
                paths = {}
                for k in range(1, SETS):
                    p = s + k * SET_BYTES // 8
                    if q[p + _ID]:
                        paths[q[p + _ID]] = _read_set(q, w, p, now_sec)
                out[index] = {"window": window, "total": total, "resets": q[s + _RESETS],
                              "paths": paths, "paths_untracked": q[s + _OVERFLOW]}
            return out
        finally:
            w.release()
    finally:
        f.close()
