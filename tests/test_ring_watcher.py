"""The watcher's role on a ring (ring/wake.py, "One watcher, the others hand the wake on"): what
its followers do when the watcher never hands a wake on. Needs the C claim (_native.c)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import uuid

import pytest

from tatolab._links import ring, shm
from tatolab._links.ring import RingReader, RingWriter, create_ring, reap

from test_ring import _bag, _check, _run, _wait_for, _write_one

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture(autouse=True)
def the_claim_is_built():
    assert ring.wake._compare_exchange is not None, (
        "tatolab/_links/_native.c was not built, so readers have no watcher: install a C compiler "
        "and Python's headers (apt install gcc python3-dev), then scripts/setup"
    )


@pytest.fixture
def base():
    b = f"{shm.private_folder()}/test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield b
    reap(b)
    folder, name = os.path.split(b)
    assert not [e for e in os.listdir(folder) if e.startswith(name)]


def _watch_then_report(base: str, ready) -> None:
    r = RingReader(base, 0, "ordered", start="now")
    ready.send(os.getpid())
    while True:
        r.wait(30.0)
        r.read_many()


def test_followers_go_on_when_their_watcher_is_stopped(base):
    """A watcher that never hands the wake on (SIGSTOPped inside its wait) costs its
    followers one check, not the bag: they take the role back and read it."""
    create_ring(base, slot_size=256, slot_count=8)
    parent, child = SPAWN.Pipe()
    proc = _run(_watch_then_report, base, child)
    try:
        assert parent.poll(30)
        pid = parent.recv()
        follower = RingReader(base, 1, "ordered", start="now")
        g = follower._g
        _wait_for(lambda: g.watch.value == 1 and g.sleepers[0] == 1, "the other process watching")
        os.kill(pid, signal.SIGSTOP)
        w = RingWriter(base)
        w.write(_bag(1))
        assert follower.wait(10.0) is True
        got = follower.read_many()
        if not got:  # the first return frees the role; the next wait takes it
            assert follower.wait(10.0) is True
            got = follower.read_many()
        assert [_check(b) for b, _ in got] == [1]
        follower.close()
        w.close()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)


def test_a_dead_watchers_role_is_taken_back(base):
    """A reader killed while it was the watcher leaves its claim in the ring; the next
    reader to wait sees its process gone and takes the role instead of sleeping for ever."""
    create_ring(base, slot_size=256, slot_count=8)
    dead = _run(_write_one, base)
    dead.join(10)
    ghost = RingReader(base, 0, "ordered")
    ghost._q[ghost._r] = dead.pid  # record 0 names the dead process, and holds the role
    ghost._g.watch.value = 1
    r = RingReader(base, 1, "ordered", start="now")
    assert r.wait(10.0) is True, "waited out its timeout behind a dead watcher"
    assert r._g.watch.value == 0
    w = RingWriter(base)
    w.write(_bag(1))
    assert r.wait(10.0) is True
    assert len(r.read_many()) == 1
    for x in (ghost, r, w):
        x.close()


def test_a_follower_is_woken_by_an_interrupt(base):
    """A node's stop wakes its reader even while that reader follows another's watch."""
    import threading

    create_ring(base, slot_size=256, slot_count=8)
    watcher = RingReader(base, 0, "ordered", start="now")
    follower = RingReader(base, 1, "ordered", start="now")
    results = {}
    threads = [
        threading.Thread(target=lambda: results.__setitem__("watcher", watcher.wait(10.0))),
        threading.Thread(target=lambda: results.__setitem__("follower", follower.wait(10.0))),
    ]
    threads[0].start()
    g = follower._g
    _wait_for(lambda: g.watch.value == 1 and g.sleepers[0] == 1, "the watcher asleep")
    threads[1].start()
    _wait_for(lambda: g.followers[1] == 1, "the follower asleep")
    follower.interrupt()
    threads[1].join(15)
    assert results.get("follower") is True, "the interrupt did not reach the follower"
    assert not threads[1].is_alive()
    watcher.interrupt()
    threads[0].join(15)
    assert results.get("watcher") is True
    watcher.close()
    follower.close()


def test_a_follower_does_not_sleep_through_an_interrupt_made_as_it_began_to_wait(base):
    """A stop's interrupt can come between a follower's first look and its flag (the
    hand-on then finds no follower to wake): the changed writer's word must stop it
    from sleeping."""
    create_ring(base, slot_size=256, slot_count=8)
    holder = RingReader(base, 0, "ordered", start="now")  # holds the role, and stays alive, but never waits
    holder._g.watch.value = 1
    follower = RingReader(base, 1, "ordered", start="now")
    g = follower._g
    w = g.word.value  # what wait() read first
    follower.interrupt()
    assert ring.wake._follow_watcher(follower, g, w, 1, 10.0) is True, "slept through the interrupt"
    holder.close()
    follower.close()


def test_a_damaged_watch_word_is_freed_not_followed(base):
    create_ring(base, slot_size=256, slot_count=8)
    r = RingReader(base, 0, "ordered", start="now")
    r._g.watch.value = 0xFFFFFFFF  # no reader's index
    assert r.wait(10.0) is True
    assert r._g.watch.value == 0
    w = RingWriter(base)
    w.write(_bag(1))
    assert r.wait(10.0) is True and len(r.read_many()) == 1
    r.close()
    w.close()
