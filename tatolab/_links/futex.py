"""Futex wait / wake / waitv over a shared mapping, and the memory-ordering helpers.

This is the one place that knows about syscalls and CPU memory ordering. The futex
words live in MAP_SHARED files, so every call here uses the shared (not PRIVATE)
operations: a wake from one process reaches waiters in another.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import platform
import threading
import time
from typing import Callable

__all__ = [
    "fence",
    "full_fence",
    "NEEDS_FENCE",
    "word_at",
    "futex_wait",
    "futex_wake",
    "futex_waitv",
    "WAITV_MAX",
]

_MACHINE = platform.machine().lower()
# (futex, futex_waitv) syscall numbers: x86-64's own table, and the generic one arm64 uses
_SYSCALLS = {"x86_64": (202, 449), "amd64": (202, 449), "aarch64": (98, 449), "arm64": (98, 449)}
if _MACHINE not in _SYSCALLS:  # pragma: no cover - x86-64 and arm64 are the machines built and tested
    raise ImportError(
        f"tatolab links run on x86-64 and arm64 Linux (this machine is {_MACHINE}): the futex "
        "syscall numbers and the memory-ordering rules here are known for those two"
    )

# x86-64 (TSO) keeps stores in program order and loads in program order, which is all the
# seqlock needs from the Python paths: each aligned 8-byte store or load the interpreter
# makes is one `mov`, so fence() is a no-op and the Python publish needs none. A machine
# without total store order (arm64) needs real barriers there: the compiled module
# (_native.c, C11 atomics) publishes and reads the runs, and its fences serve the Python
# reader's copy; the Python publish is refused (ring/writer.py). Without the compiled module
# such a machine cannot use the links at all, and says so here, at import.
NEEDS_FENCE = _MACHINE not in ("x86_64", "amd64")
if NEEDS_FENCE:
    try:
        from ._native import fence as _native_fence
        from ._native import full_fence as _native_full_fence
    except ImportError:
        raise ImportError(
            f"tatolab links on {_MACHINE} need their compiled part (tatolab/_links/_native.c): this "
            "machine reorders memory, and the pure-Python ring would hand readers torn bags. Install a C "
            "compiler and Python's headers (apt install gcc python3-dev; Python 3.11 or newer), then "
            "reinstall tatolab (scripts/setup in a checkout)"
        ) from None


def fence() -> None:
    """An acquire fence between a reader's loads (a no-op on x86-64; the C module's elsewhere)."""


if NEEDS_FENCE:
    fence = _native_fence


_FENCE_LOCK = threading.Lock()
_fence_acquire = _FENCE_LOCK.acquire
_fence_release = _FENCE_LOCK.release


def full_fence() -> None:
    """A store->load barrier: every store before it is visible to other CPUs before any
    load after it. TSO allows exactly that reordering (a store waits in the store buffer
    while a later load goes ahead), so Dekker-style handshakes need it even on x86-64.

    Pure Python has no fence instruction (and this must work where _native.c was not
    built), so this takes and releases a private, never-contended lock. Acquiring any mutex needs an
    atomic read-modify-write (or an mfence): mutual exclusion cannot be built from plain
    loads and stores on a machine that reorders store->load (Attiya et al., "Laws of
    Order", POPL 2011). CPython's lock is a sem_trywait/sem_post (3.11) or a PyMutex
    compare-exchange (3.13), i.e. `lock cmpxchg` / `lock xadd`, and on x86-64 every
    locked instruction drains the store buffer: a full barrier. ~0.15 us, against
    ~1.5-2.5 us for the futex wake syscall it lets the writer skip.

    RingWriter's publish does not call this: in C it has a real fence; in Python it takes a
    lock of its own for every write (so threads may share a writer), and that lock's release
    is the same barrier.
    """
    _fence_acquire()
    _fence_release()


if NEEDS_FENCE:
    full_fence = _native_full_fence  # (a CPython lock's release need not be a full barrier there)


_SYS_FUTEX, _SYS_FUTEX_WAITV = _SYSCALLS[_MACHINE]
_FUTEX_WAIT = 0
_FUTEX_WAKE = 1
_FUTEX_32 = 2  # futex_waitv flag: 32-bit word, shared (no FUTEX_PRIVATE_FLAG)
_CLOCK_MONOTONIC = 1
_INT_MAX = 0x7FFFFFFF
WAITV_MAX = 128

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.syscall.argtypes = [ctypes.c_long] * 6
_syscall: Callable[..., int] = _libc.syscall


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _WaitvEntry(ctypes.Structure):
    _fields_ = [
        ("val", ctypes.c_uint64),
        ("uaddr", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


def word_at(mm: mmap.mmap, offset: int) -> tuple[ctypes.c_uint32, int]:
    """The 32-bit word at `offset` in `mm`, and its address.

    Keep the returned object alive while the address is in use, and drop it before
    closing the mapping (it holds a buffer export, so mmap.close() refuses while it lives).
    """
    if offset % 4:
        raise ValueError(f"a futex word must be 4-byte aligned, offset {offset} is not")
    word = ctypes.c_uint32.from_buffer(mm, offset)
    return word, ctypes.addressof(word)


def _futex_wake(addr: int, count: int = _INT_MAX) -> int:
    """Wake up to `count` waiters on the word at `addr` (all by default); returns how many woke."""
    return _syscall(_SYS_FUTEX, addr, _FUTEX_WAKE, count, 0, 0)


def _futex_wait(addr: int, expected: int, timeout_s: float | None) -> bool:
    """Sleep while the word at `addr` still holds `expected`, for at most `timeout_s`.

    Returns False only on timeout. A wake, a changed word (EAGAIN) or a signal (EINTR)
    return True, so the caller re-checks its condition; a Python signal handler then
    runs as soon as control is back in the interpreter, which lets a node stop.
    """
    if timeout_s is None:
        ts_ptr = 0
    else:
        timeout_s = max(0.0, timeout_s)
        ts = _Timespec(int(timeout_s), int((timeout_s % 1.0) * 1e9))
        ts_ptr = ctypes.addressof(ts)
    rc = _syscall(_SYS_FUTEX, addr, _FUTEX_WAIT, expected, ts_ptr, 0)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.ETIMEDOUT:
        return False
    if err in (errno.EAGAIN, errno.EINTR):
        return True
    raise OSError(err, f"futex wait failed: {errno.errorcode.get(err, err)}")


futex_wake: Callable[..., int] = _futex_wake
futex_wait: Callable[[int, int, "float | None"], bool] = _futex_wait
try:  # the same two syscalls in C: a ctypes call costs ~1.5 us, the syscall ~0.1 (see _native.c)
    from ._native import futex_wait, futex_wake  # noqa: F811
except ImportError:
    pass


def futex_waitv(words: list[tuple[int, int]], timeout_s: float | None) -> int:
    """Sleep on several (addr, expected) words at once until any of them is woken.

    Returns the index of the woken word, -2 when a word had already changed or a signal
    arrived (the caller should re-check everything), and -1 on timeout.
    """
    n = len(words)
    if not 0 < n <= WAITV_MAX:
        raise ValueError(f"futex_waitv takes 1 to {WAITV_MAX} words, got {n}")
    entries = (_WaitvEntry * n)()
    for i, (addr, expected) in enumerate(words):
        entries[i].val = expected
        entries[i].uaddr = addr
        entries[i].flags = _FUTEX_32
    if timeout_s is None:
        ts_ptr = 0
    else:
        # futex_waitv takes an absolute deadline on the given clock.
        deadline = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + int(max(0.0, timeout_s) * 1e9)
        ts = _Timespec(deadline // 1_000_000_000, deadline % 1_000_000_000)
        ts_ptr = ctypes.addressof(ts)
    rc = _syscall(_SYS_FUTEX_WAITV, ctypes.addressof(entries), n, 0, ts_ptr, _CLOCK_MONOTONIC)
    if rc >= 0:
        return rc
    err = ctypes.get_errno()
    if err == errno.ETIMEDOUT:
        return -1
    if err in (errno.EAGAIN, errno.EINTR):
        return -2
    if err == errno.ENOSYS:
        raise OSError(err, "futex_waitv is not available: tatolab links need Linux 5.16 or newer")
    raise OSError(err, f"futex_waitv failed: {errno.errorcode.get(err, err)}")
