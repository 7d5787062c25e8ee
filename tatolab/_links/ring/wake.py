"""How readers sleep and are woken: the futex word, the sleepers line, one watcher.

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
sleeps there, so every mix stays correct. The watcher's wait on a link that is not busy is
_native.watch_wait: the same steps (claim, sleepers byte, sleep, clear, release, hand on) in
one call, as the Python between a wake and the next read was most of what a woken reader spent.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Sequence
from typing import Callable, Protocol

from ..futex import full_fence, futex_wait, futex_waitv, futex_wake
from .layout import _NO_SLEEPERS, _R_PID, _WORD_MASK, MAX_READERS, _alive, _Gen



class Waiter(Protocol):
    """What waiting needs of a reader (RingReader is one): its record, the generation it maps,
    how busy its link is, how long it naps as a follower, and whether a bag is there."""

    index: int
    _g: _Gen
    _gap: int
    _check_watcher_s: float
    spin_ns: int


    def has_new(self) -> bool: ...


_compare_exchange: Callable[[int, int, int], bool] | None
_watch_wait: Callable[[mmap.mmap, int, int, float | None], bool | int] | None
try:  # the watcher's claim in C (see _native.c); without it every reader sleeps on the writer's word
    from .._native import compare_exchange as _compare_exchange
    from .._native import watch_wait as _watch_wait
except ImportError:
    _compare_exchange = _watch_wait = None

# A reader whose last two bags were published less than _SPIN_GAP_NS apart polls for up
# to _SPIN_NS of its own CPU (yielding the CPU between looks) before it sleeps. Slower links sleep at
# once, so an idle or 1 kHz reader costs no extra CPU.
_SPIN_GAP_NS = 50_000
_SPIN_NS = 50_000  # of the poller's own CPU (see _spin)
_SPIN_WALL_NS = 1_000_000  # a poller the machine starves of CPU sleeps after this long all the same
# A follower looks at its watcher this often while no hand-off comes, doubling up to the
# most while nothing is published: what a killed or stopped watcher can cost it.
_CHECK_WATCHER_S = 0.005
_CHECK_WATCHER_MAX_S = 0.5


def bump_and_wake(g: _Gen) -> None:
    """Wake whoever waits on generation `g` (an interrupt, or the writer moving on from it)."""
    word = g.word
    word.value = ((word.value + 1) & _WORD_MASK) | (_WORD_MASK + 1)  # never a publish's value
    futex_wake(g.addr)
    full_fence()  # the bump before the followers line is read: a follower sees one or the other
    hand_on(g)


def hand_on(g: _Gen) -> None:
    """Wake the followers, if any may be asleep (after a full barrier: the caller's CAS)."""
    if g.followers_q != _NO_SLEEPERS:
        g.handoff.value += 1  # (wraps at 2**32: any change is all futex_wait needs)
        futex_wake(g.handoff_addr)


def wait(reader: Waiter, timeout_s: float | None) -> bool:
    """RingReader.wait: as the watcher, or as a follower when another reader watches."""
    g = reader._g
    w = g.word.value
    if reader.has_new():
        return True
    if reader.spin_ns and _spin_for([g.word], [w], reader.spin_ns):
        return True  # taken within the reader's spin window: no sleep, no wake (an input's spin_us)
    claim = _compare_exchange
    if claim is None:
        return _watch(reader, g, w, timeout_s)
    if reader._gap >= _SPIN_GAP_NS and _watch_wait is not None:  # (a busy link polls first: _watch below)
        got = _watch_wait(g.mm, reader.index, w, timeout_s)  # the watcher's whole wait in C
        if type(got) is bool:
            return got
        return _follow_watcher(reader, g, w, got, timeout_s)
    me = reader.index + 1
    watch = g.watch  # held while waiting: no other thread can unmap the word under a compare-and-swap
    watcher = watch.value
    if watcher > MAX_READERS:  # no reader's: a damaged word, which would stop every wait here
        claim(g.watch_addr, watcher, 0)
        return True
    if watcher != me and not (watcher == 0 and claim(g.watch_addr, 0, me)):
        return _follow_watcher(reader, g, w, watcher, timeout_s)
    try:
        return _watch(reader, g, w, timeout_s)
    finally:
        claim(g.watch_addr, me, 0)  # (also the full barrier before hand_on reads the followers line)
        hand_on(g)


def _watch(reader: Waiter, g: _Gen, w: int, timeout_s: float | None) -> bool:
    """Poll (on a busy link), then sleep on the writer's word."""
    if reader._gap < _SPIN_GAP_NS and _spin([g.word], [w]):
        return True
    sleepers, i = g.sleepers, reader.index
    sleepers[i] = 1  # before futex_wait's load of the word: see the module docstring
    try:
        return futex_wait(g.addr, w, timeout_s)
    finally:
        sleepers[i] = 0


def _follow_watcher(reader: Waiter, g: _Gen, w: int, watcher: int, timeout_s: float | None) -> bool:
    """Sleep on the hand-off word until the watcher hands a wake on (True), the role is
    free again (True: the caller looks and waits again), or `timeout_s` is up (False)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    followers, i, claim = g.followers, reader.index, _compare_exchange
    assert claim is not None  # (wait() follows only where the claim was built)
    while True:
        h = g.handoff.value
        followers[i] = 1
        try:
            # the CAS is a fenced load of the watcher: the flag is visible before it, write_seq
            # and the writer's word are read (the module docstring's handshake; a word
            # changed since the wait began is a publish, a move or an interrupt)
            if not claim(g.watch_addr, watcher, watcher) or reader.has_new() or g.word.value != w:
                return True
            nap = reader._check_watcher_s
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                nap = min(nap, left)
            if futex_wait(g.handoff_addr, h, nap):
                reader._check_watcher_s = _CHECK_WATCHER_S
                return True
        finally:
            followers[i] = 0
        if reader.has_new() or not _alive(g.q[g.record_q(watcher - 1) + _R_PID]):
            # a bag came and no hand-off, or the watcher is gone: it will not hand on
            claim(g.watch_addr, watcher, 0)
            reader._check_watcher_s = _CHECK_WATCHER_S
            return True
        reader._check_watcher_s = min(2 * reader._check_watcher_s, _CHECK_WATCHER_MAX_S)


def wait_any(readers: Sequence[Waiter], timeout_s: float | None) -> bool:
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
    spin_ns = max(r.spin_ns for r in readers)
    if spin_ns and _spin_for([r._g.word for r in readers], [w for _, w in words], spin_ns):
        return True  # an input's spin window (see wait)
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




def _spin(words: list, expected: list[int]) -> bool:
    """Poll the futex words for up to _SPIN_NS of this thread's own CPU (and at most
    _SPIN_WALL_NS), yielding the CPU between looks; True as soon as one changes (a publish, a
    move or an interrupt), False when the time is up.

    Own CPU, not wall time: on a core shared with other work (four readers and their writer on
    two cores) a poller that gets the core a few times in 50 us of wall time gave up before
    the next bag, slept, and the writer paid a wake for it on most writes (71% of them with 4
    readers against 22% with 1, bench/links.py --fan-out). Counted in its own CPU it polls as
    long as before whenever it has a core, and costs no more CPU than before."""
    cpu, wall, pause = time.thread_time_ns, time.monotonic_ns, os.sched_yield
    deadline = cpu() + _SPIN_NS
    wall_deadline = wall() + _SPIN_WALL_NS
    while True:
        pause()
        for word, w in zip(words, expected):
            if word.value != w:
                return True
        if cpu() > deadline or wall() > wall_deadline:
            return False


def _spin_for(words: list, expected: list[int], spin_ns: int) -> bool:
    """A reader asked to spin (``@node.input(spin_us=...)``): poll the writer's word for up to
    `spin_ns` of wall time before sleeping, yielding the CPU between looks (a core another
    process needs is given up at once); True as soon as it changes (a publish, a move or an
    interrupt). Costs up to a core while the window lasts: a link whose bags come less than
    the window apart keeps its reader awake, and the writer never pays for a wake."""
    wall, pause = time.monotonic_ns, os.sched_yield
    deadline = wall() + spin_ns
    if len(words) == 1:
        word, w = words[0], expected[0]
        while True:
            if word.value != w:
                return True
            if wall() > deadline:
                return False
            pause()
    while True:
        for word, w in zip(words, expected):
            if word.value != w:
                return True
        if wall() > deadline:
            return False
        pause()
