"""Shared-memory rings: fan-out, profiles, drops, fan-in wakeups, growth, counters, cleanup."""

from __future__ import annotations

import mmap
import multiprocessing
import os
import signal
import struct
import threading
import time
import uuid

import pytest

from tatolab._links import futex, shm
from tatolab._links import ring
from tatolab._links.ring import (
    BagTooLarge,
    RingReader,
    RingWriter,
    create_ring,
    read_counters,
    reap,
    release_reader,
    wait_any,
)

SPAWN = multiprocessing.get_context("spawn")


def _files(base: str) -> list[str]:
    folder, name = os.path.split(base)
    return sorted(e for e in os.listdir(folder) if e.startswith(name) and not e.endswith("#latency"))


@pytest.fixture(autouse=True, params=["c", "python"] if ring.writer._Publisher is not None else ["python"])
def publish(request, monkeypatch):
    """Every test runs with the C publisher, reader run and watcher claim (_native.c) and with the Python
    fallback (every reader sleeping on the writer's word): both must work on the same rings
    (readers and writers in child processes are the module's own, so mixes are tested too)."""
    monkeypatch.setattr(ring.writer, "COMPILED_PUBLISH", request.param == "c")
    if request.param == "python":
        monkeypatch.setattr(ring.wake, "_compare_exchange", None)
        monkeypatch.setattr(ring.reader, "_RunReader", None)
        monkeypatch.setattr(ring.wake, "futex_wait", futex._futex_wait)  # the ctypes syscalls
        monkeypatch.setattr(ring.wake, "futex_wake", futex._futex_wake)
        monkeypatch.setattr(ring.writer, "futex_wake", futex._futex_wake)
    return request.param


@pytest.mark.parametrize("way", ["c", "ctypes"])
def test_futex_wait_sleeps_until_woken_and_says_when_it_timed_out(way):
    """Both ways to the syscalls (_native.c's, and ctypes' where it was not built) keep the one
    contract wake.py relies on: False only on timeout; True when woken or the word had changed."""
    if way == "c" and futex.futex_wait is futex._futex_wait:
        pytest.fail("tatolab/_links/_native.c was not built: futex_wait goes through ctypes")
    wait, wake = (futex.futex_wait, futex.futex_wake) if way == "c" else (futex._futex_wait, futex._futex_wake)
    mm = mmap.mmap(-1, 4096)
    word, addr = futex.word_at(mm, 0)
    assert wait(addr, 0, 0.01) is False  # the word holds 0: sleeps the whole timeout
    assert wait(addr, 7, None) is True  # the word does not hold 7: back at once
    woken = threading.Event()

    def sleeper() -> None:
        wait(addr, 0, 10.0)
        woken.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    try:
        while not woken.is_set():  # (a wake before the sleeper sleeps wakes nobody: try again)
            wake(addr)
            woken.wait(0.01)
    finally:
        thread.join(timeout=10)
    assert woken.is_set()
    if way == "c":
        with pytest.raises(ValueError, match="aligned"):
            wait(addr + 1, 0, 0.0)
    del word
    mm.close()


def test_the_c_publisher_is_built(base, publish):
    assert ring.writer._Publisher is not None, (
        "tatolab/_links/_native.c was not built, so rings publish in Python (about 3x slower): "
        "install a C compiler and Python's headers (apt install gcc python3-dev), then scripts/setup"
    )
    create_ring(base, slot_size=256, slot_count=4)
    w = RingWriter(base)
    assert w.compiled == (publish == "c")
    w.close()


@pytest.fixture
def base():
    b = f"{shm.private_folder()}/test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield b
    reap(b)
    assert _files(b) == []


def _bag(seq: int, size: int = 100) -> bytes:
    head = struct.pack("<Q", seq)
    return head + bytes([seq % 251]) * (size - len(head))


def _check(data: bytes) -> int:
    seq = struct.unpack_from("<Q", data)[0]
    assert data[8:] == bytes([seq % 251]) * (len(data) - 8), f"bag {seq} arrived torn"
    return seq


# --- child processes (module level so spawn can import them) -------------------------

def _read_all(base: str, index: int, profile: str, expect: int, out, hold: bool = False) -> None:
    """Read until bag `expect` arrives (with `hold`, only once told "go"); report the sequence numbers seen
    and counters."""
    r = RingReader(base, index, profile)
    out.send("attached")
    if hold:
        out.recv()
    seen, sizes = [], []
    while not seen or seen[-1] < expect:
        got = r.read()
        if got is None:
            r.wait(1.0)
            continue
        seen.append(_check(got[0]))
        sizes.append(len(got[0]))
    out.send((seen, sizes, r.read_count, r.dropped, r.generation))
    r.close()


def _wait_forever(base: str, index: int, ready) -> None:
    r = RingReader(base, index, "ordered")
    ready.send(os.getpid())
    while True:
        r.wait(10.0)
        r.read()


def _write_one(base: str) -> None:
    w = RingWriter(base)
    w.write(b"hello")
    w.close()


def _write_flat_out(base: str, count: int) -> None:
    w = RingWriter(base)
    for seq in range(1, count + 1):
        w.write(_bag(seq, 64 + seq % 200))
    w.close()


def _counters_elsewhere(base: str, out) -> None:
    out.send(read_counters(base))


def _run(target, *args) -> SPAWN.Process:
    p = SPAWN.Process(target=target, args=args, daemon=True)
    p.start()
    return p


# --- tests -----------------------------------------------------------------------------

def test_fan_out_two_readers_get_every_bag_in_order(base):
    n = 300
    create_ring(base, slot_size=1024, slot_count=512)
    pipes, procs = [], []
    for index in (0, 1):
        parent, child = SPAWN.Pipe()
        procs.append(_run(_read_all, base, index, "ordered", n, child))
        pipes.append(parent)
    w = RingWriter(base)
    for seq in range(1, n + 1):
        assert w.write(_bag(seq)) == seq
    for parent, proc in zip(pipes, procs):
        assert parent.poll(30) and parent.recv() == "attached"
        assert parent.poll(30), "a reader process did not finish"
        seen, _, read, dropped, _ = parent.recv()
        assert seen == list(range(1, n + 1))
        assert (read, dropped) == (n, 0)
        proc.join(10)
    w.close()
    counters = read_counters(base)
    assert counters["write_seq"] == n
    assert [(r["index"], r["read"], r["dropped"], r["active"]) for r in counters["readers"]] == [
        (0, n, 0, False),
        (1, n, 0, False),
    ]


def test_newest_reads_latest_and_counts_skipped_as_dropped(base):
    create_ring(base, slot_size=256, slot_count=16)
    w = RingWriter(base)
    r = RingReader(base, 0, "newest")
    assert r.read() is None
    for seq in range(1, 11):
        w.write(_bag(seq))
    data, ts = r.read()
    assert _check(data) == 10 and ts > 0
    assert (r.read_count, r.dropped) == (1, 9)
    assert r.read() is None
    w.write(_bag(11))
    assert _check(r.read()[0]) == 11
    assert (r.read_count, r.dropped) == (2, 9)
    r.close()
    w.close()


def test_lapped_ordered_reader_counts_exact_drops(base):
    create_ring(base, slot_size=256, slot_count=8)
    w = RingWriter(base)
    r = RingReader(base, 3, "ordered")
    w.write(_bag(1))
    assert _check(r.read()[0]) == 1
    for seq in range(2, 31):
        w.write(_bag(seq))
    seen = []
    while (got := r.read()) is not None:
        seen.append(_check(got[0]))
    assert seen == list(range(23, 31))  # the 8 still in the ring
    assert (r.read_count, r.dropped) == (9, 21)
    assert r.read_count + r.dropped == w.seq
    r.close()
    w.close()


@pytest.mark.parametrize("how", ["read", "read_many"])
def test_reader_racing_a_flat_out_writer_never_sees_a_torn_bag(base, how):
    n = 40_000
    create_ring(base, slot_size=512, slot_count=4)
    r = RingReader(base, 0, "ordered")
    proc = _run(_write_flat_out, base, n)
    last = 0
    while last < n:
        got = [r.read()] if how == "read" else r.read_many()
        if not got or got[0] is None:
            r.wait(1.0)
            continue
        for payload, _ in got:
            seq = _check(payload)
            assert seq > last
            last = seq
        assert r.read_count + r.dropped == last
    proc.join(10)
    r.close()


def test_a_writer_lapping_every_copy_is_no_damage_but_a_slot_from_the_future_is(base, monkeypatch):
    # a flat-out writer on a small ring can lap a Python copy more than a thousand times in a row
    # (CI saw it): the reader goes on, then gives its caller the loop back, never calls it damage
    create_ring(base, slot_size=256, slot_count=4)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    for seq in range(1, 5):
        w.write(_bag(seq))
    copy = r._copy
    laps = []
    overtakes = ring.reader._MAX_TRIES + 10

    def lapped(h, target, dest):
        if len(laps) >= overtakes:
            return copy(h, target, dest)  # the writer stopped: this copy is whole
        while r._q[h] == 2 * target:  # the writer overtakes the copy, every time
            w.write(_bag(w.seq + 1))
        laps.append(target)
        return None

    # more than _MAX_TRIES laps in a row, however long they take: still no damage, then a whole bag
    monkeypatch.setattr(r, "_copy", lapped)
    monkeypatch.setattr(ring.reader, "_LAPPED_FOR_S", 3600.0)
    payload, _ = r.read()
    assert len(laps) == overtakes and _check(payload) > 4 and r.read_count + r.dropped == _check(payload)
    # lapped for longer than _LAPPED_FOR_S: the reader gives its caller the loop back (None), no error
    laps.clear()
    overtakes = 10**9
    monkeypatch.setattr(ring.reader, "_LAPPED_FOR_S", 0.0)
    assert r.read() is None and laps
    monkeypatch.setattr(r, "_copy", copy)
    payload, _ = r.read()  # the writer stopped: the next read gets the newest whole bags
    assert _check(payload) > 4 and r.read_count + r.dropped == _check(payload)

    # a slot holding a bag the header says was never written: something else wrote the file
    h = r._slots[(r._next - 1) % r._count]
    r._q[h] = 2 * (w.seq + 100)
    monkeypatch.setattr(r, "_copy", lambda h, target, dest: None)
    w.write(_bag(w.seq + 1))
    with pytest.raises(shm.RingError, match="makes no sense"):
        r.read()
    r.close()
    w.close()


def test_publish_timestamps_are_monotonic(base):
    create_ring(base, slot_size=256, slot_count=8)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    before = time.monotonic_ns()
    w.write(b"a")
    w.write(b"b")
    (a, ta), (b, tb) = r.read(), r.read()
    assert (a, b) == (b"a", b"b")
    assert before <= ta <= tb <= time.monotonic_ns()
    r.close()
    w.close()


def test_wait_any_wakes_on_either_ring(base):
    base_a, base_b = base + "-a", base + "-b"
    create_ring(base_a, slot_size=256, slot_count=8)
    create_ring(base_b, slot_size=256, slot_count=8)
    ra, rb = RingReader(base_a, 0, "ordered"), RingReader(base_b, 0, "ordered")
    try:
        t0 = time.monotonic()
        assert wait_any([ra, rb], 0.05) is False
        assert time.monotonic() - t0 >= 0.04

        for target, woken, quiet in ((base_b, rb, ra), (base_a, ra, rb)):
            proc = _run(_write_one, target)
            t0 = time.monotonic()
            while not wait_any([ra, rb], 20.0):
                pass
            assert time.monotonic() - t0 < 15
            got = woken.read()
            while got is None:  # woken by the write, which may still be publishing
                wait_any([ra, rb], 5.0)
                got = woken.read()
            assert got[0] == b"hello"
            assert quiet.read() is None
            proc.join(10)
    finally:
        ra.close()
        rb.close()
        reap(base_a)
        reap(base_b)


def test_a_signal_interrupts_a_wait():
    base = f"{shm.private_folder()}/test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    create_ring(base, slot_size=256, slot_count=4)
    r = RingReader(base, 0, "ordered")

    class Stop(Exception):
        pass

    def on_alarm(signum, frame):
        raise Stop

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(Stop):
            while True:
                r.wait(10.0)
        assert time.monotonic() - t0 < 5
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(Stop):
            while True:
                wait_any([r], 10.0)
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        r.close()
        reap(base)
    assert _files(base) == []


def test_bag_four_times_the_slot_arrives_intact_across_growth(base):
    slot = 16 * 1024
    create_ring(base, slot_size=slot, slot_count=64)
    parent, child = SPAWN.Pipe()
    proc = _run(_read_all, base, 0, "ordered", 6, child)
    assert parent.poll(30) and parent.recv() == "attached"
    w = RingWriter(base)
    before = RingReader(base, 1, "ordered")
    w.write(_bag(1))
    w.write(_bag(2))
    w.write(_bag(3, 4 * slot))
    w.write(_bag(4))
    w.write(_bag(5, 3 * slot))
    w.write(_bag(6))
    # grown at bag 3 to 4 slots, then widened to all 64 at bag 5 (`before` had read none: it was about to be
    # lapped); `before` never mapped generation 1, and finds its bags in generation 2
    assert w.generation == 2
    assert _files(base) == [os.path.basename(base) + ".2"]  # the old generations are unlinked

    assert parent.poll(30), "the reader process did not finish"
    seen, sizes, read, dropped, generation = parent.recv()
    proc.join(10)
    assert seen == [1, 2, 3, 4, 5, 6]
    assert sizes[2] == 4 * slot and sizes[4] == 3 * slot
    assert (read, dropped, generation) == (6, 0, 2)

    # a reader that was on generation 0 the whole time follows too
    got = []
    while (bag := before.read()) is not None:
        got.append(_check(bag[0]))
    assert got == [1, 2, 3, 4, 5, 6] and before.generation == 2

    counters = read_counters(base)
    assert counters["generation"] == 2
    assert counters["slot_size"] == 1 << 20 and counters["slot_count"] == 64
    assert {r["index"]: r["read"] for r in counters["readers"]} == {0: 6, 1: 6}
    before.close()
    w.close()


def test_growth_keeps_big_files_bounded_and_refuses_oversized_bags(base, monkeypatch):
    create_ring(base, slot_size=1024, slot_count=128)
    w = RingWriter(base)
    lagging = RingReader(base, 0, "ordered")
    w.write(b"x" * (8 * 1000 * 1000))
    c = read_counters(base)
    assert c["slot_size"] == 8 << 20 and c["slot_count"] == 4
    for _ in range(3):  # the reader reads none: the ring widens to the 128 MiB budget's 15 slots, no more
        w.write(b"x" * (8 * 1000 * 1000))
    c = read_counters(base)
    assert c["slot_size"] == 8 << 20 and c["slot_count"] == 15
    lagging.close()
    monkeypatch.setattr(ring.writer, "MAX_BAG_BYTES", 16 << 20)
    with pytest.raises(BagTooLarge, match=r"17,000,000 bytes.*16,777,216 byte limit"):
        w.write(b"x" * 17_000_000)
    assert w.write(b"still fine") == 5
    w.close()


def test_counters_visible_from_another_process_and_resume_after_reopen(base):
    create_ring(base, slot_size=256, slot_count=8)
    w = RingWriter(base)
    for seq in range(1, 13):
        w.write(_bag(seq))
    r = RingReader(base, 5, "ordered")
    while r.read() is not None:
        pass
    assert (r.read_count, r.dropped) == (8, 4)

    parent, child = SPAWN.Pipe()
    proc = _run(_counters_elsewhere, base, child)
    assert parent.poll(30)
    counters = parent.recv()
    proc.join(10)
    assert counters["write_seq"] == 12 and counters["last_write_ns"] > 0
    assert counters["readers"] == [
        {"index": 5, "pid": os.getpid(), "read": 8, "dropped": 4, "bad": 0,
         "last_read_ns": counters["readers"][0]["last_read_ns"], "active": True, "behind": 0}
    ]
    r.close()
    assert read_counters(base)["readers"][0]["active"] is False

    for seq in range(13, 16):
        w.write(_bag(seq))
    again = RingReader(base, 5, "ordered")  # a restarted node: same index
    assert (again.read_count, again.dropped) == (8, 4)
    assert [_check(again.read()[0]) for _ in range(3)] == [13, 14, 15]
    assert (again.read_count, again.dropped) == (11, 4)
    again.close()

    release_reader(base, 5)
    assert read_counters(base)["readers"] == []
    fresh = RingReader(base, 5, "newest", start="now")
    assert fresh.read() is None and (fresh.read_count, fresh.dropped) == (0, 0)
    fresh.close()
    w.close()


def test_reap_removes_every_generation(base):
    create_ring(base, slot_size=64, slot_count=4)
    w = RingWriter(base)
    w.write(b"x" * 100)      # generation 1
    w.write(b"x" * (2 << 20))  # generation 2
    assert w.generation == 2
    w.close()
    other = base + "-other"
    create_ring(other)
    assert len(_files(base)) == 2  # base.2 and other.0
    assert reap(base) == 4  # and each one's latency file
    folder, name = os.path.split(base)
    assert [e for e in os.listdir(folder) if e.startswith(name)] == []
    with pytest.raises(ring.RingError, match="no ring file"):
        read_counters(base)


def test_writer_never_blocks_on_a_killed_reader(base):
    create_ring(base, slot_size=256, slot_count=16)
    ready, child = SPAWN.Pipe()
    proc = _run(_wait_forever, base, 2, child)
    assert ready.poll(30)
    pid = ready.recv()
    w = RingWriter(base)
    w.write(_bag(1))
    os.kill(pid, signal.SIGKILL)
    proc.join(10)
    t0 = time.monotonic()
    for seq in range(2, 20_002):
        w.write(_bag(seq))
    assert time.monotonic() - t0 < 5
    counters = read_counters(base)
    assert counters["write_seq"] == 20_001
    assert counters["readers"][0]["pid"] == pid
    live = RingReader(base, 3, "newest")
    assert _check(live.read()[0]) == 20_001
    live.close()
    w.close()


def test_errors_name_the_problem(base, monkeypatch):
    monkeypatch.setattr(ring.layout, "_OPEN_RETRY_S", 0.01)
    with pytest.raises(ring.RingError, match=r"create_ring"):
        RingReader(base, 0, "ordered")
    create_ring(base)
    with pytest.raises(ValueError, match="newest"):
        RingReader(base, 0, "latest")
    with pytest.raises(ValueError, match="0..63"):
        RingReader(base, 64, "ordered")


# --- batch reads, reads into a buffer, and wakes only for sleepers ----------------------

def test_read_many_takes_every_bag_in_order_and_counts_drops_exactly(base):
    create_ring(base, slot_size=256, slot_count=8)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    assert r.read_many() == []
    for seq in range(1, 6):
        w.write(_bag(seq))
    assert [_check(d) for d, _ in r.read_many(3)] == [1, 2, 3]
    assert [_check(d) for d, _ in r.read_many()] == [4, 5]
    for seq in range(6, 31):  # laps the reader
        w.write(_bag(seq))
    got = r.read_many()
    assert [_check(d) for d, _ in got] == list(range(23, 31))
    assert all(a[1] <= b[1] for a, b in zip(got, got[1:]))
    assert (r.read_count, r.dropped) == (13, 17)
    assert r.read_count + r.dropped == w.seq
    counters = read_counters(base)["readers"][0]
    assert (counters["read"], counters["dropped"]) == (13, 17)
    newest = RingReader(base, 1, "newest")
    assert [_check(d) for d, _ in newest.read_many()] == [30]
    newest.close()
    r.close()
    w.close()


def test_read_many_follows_the_ring_when_it_grows(base):
    create_ring(base, slot_size=1024, slot_count=16)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    w.write(_bag(1))
    w.write(_bag(2, 4096))  # moves to generation 1
    w.write(_bag(3))
    seen = []
    while got := r.read_many():
        seen += [_check(d) for d, _ in got]
    assert seen == [1, 2, 3] and r.generation == 1 and r.dropped == 0
    r.close()
    w.close()


def test_read_into_fills_the_buffer_and_refuses_one_too_small(base):
    create_ring(base, slot_size=4096, slot_count=4)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    buf = bytearray(4096)
    assert r.read_into(buf) is None
    w.write(_bag(1, 3000))
    n, ts = r.read_into(buf)
    assert n == 3000 and ts > 0 and _check(bytes(buf[:n])) == 1
    w.write(_bag(2, 3000))
    with pytest.raises(ValueError, match=r"3,000 bytes does not fit the 100 byte buffer.*4,096"):
        r.read_into(bytearray(100))
    assert (r.read_count, r.dropped) == (1, 0)  # the refused bag is still there
    n, _ = r.read_into(memoryview(buf)[:3000])
    assert _check(bytes(buf[:n])) == 2 and (r.read_count, r.dropped) == (2, 0)
    r.close()
    w.close()


def test_writer_calls_wake_only_while_a_reader_sleeps(base, monkeypatch):
    create_ring(base, slot_size=256, slot_count=8)
    w = RingWriter(base)
    r = RingReader(base, 4, "ordered")
    w.write(_bag(1))
    assert w.wakes == 0
    r._g.sleepers[4] = 1  # as a reader inside futex_wait (or killed there) leaves it
    w.write(_bag(2))
    assert w.wakes == 1
    r._g.sleepers[4] = 0
    assert len(r.read_many()) == 2
    assert r.wait(0.01) is False  # a real sleep: the byte is set during it and cleared after
    assert r._g.sleepers[4] == 0
    w.write(_bag(3))
    assert w.wakes == 1
    r.close()
    w.close()


def _count_missed_wakes(base: str, n: int, out, index: int = 0) -> None:
    """Read n bags, sleeping whenever there is nothing; report waits that timed out."""
    r = RingReader(base, index, "ordered")
    out.send("attached")
    timeouts, last = 0, 0
    while last < n:
        got = r.read_many()
        if not got:
            if not r.wait(10.0):
                timeouts += 1
            continue
        last = _check(got[-1][0])
    out.send((timeouts, r.read_count, r.dropped))
    r.close()


def test_readers_that_sleep_between_bags_are_always_woken(base):
    """The writer skips the wake syscall when no sleepers byte is set; a reader that went
    to sleep must still be woken for every bag (a missed wake shows as a 10 s timeout)."""
    n = 600
    create_ring(base, slot_size=256, slot_count=1024)
    parent, child = SPAWN.Pipe()
    proc = _run(_count_missed_wakes, base, n, child)
    assert parent.poll(30) and parent.recv() == "attached"
    w = RingWriter(base)
    for seq in range(1, n + 1):
        w.write(_bag(seq))
        if seq % 3 == 0:
            time.sleep(0.0003)  # sometimes long enough for the reader to sleep
    assert parent.poll(60), "the reader did not finish"
    timeouts, read, dropped = parent.recv()
    proc.join(10)
    assert (timeouts, read, dropped) == (0, n, 0)
    w.close()


def test_threads_may_share_a_writer(base):
    """A manual node's threads write to one output: each write is whole, numbered once,
    and none is lost (the writer takes its own lock; the node API holds none)."""
    import sys
    import threading

    create_ring(base, slot_size=256, slot_count=4096)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    numbers: list[int] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can

    def writes(t: int) -> None:
        for i in range(500):
            numbers.append(w.write(_bag(t * 1000 + i)))

    try:
        threads = [threading.Thread(target=writes, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(old)
    assert sorted(numbers) == list(range(1, 2001))
    got = []
    while batch := r.read_many(256):
        got += [_check(p) for p, _ in batch]
    assert sorted(got) == sorted(t * 1000 + i for t in range(4) for i in range(500))
    assert (r.read_count, r.dropped) == (2000, 0)
    r.close()
    w.close()


def test_last_write_ns_is_the_last_bags_publish_time(base, monkeypatch):
    create_ring(base, slot_size=1024, slot_count=4)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    assert read_counters(base)["last_write_ns"] == 0  # nothing written yet
    for seq in range(1, 7):  # round the ring once and a half
        w.write(_bag(seq))
    got = r.read_many()
    assert read_counters(base)["last_write_ns"] == got[-1][1]
    w.write(b"x" * 4096)  # grows: a new generation
    big_ns = r.read_many()[-1][1]
    assert read_counters(base)["last_write_ns"] == big_ns
    monkeypatch.setattr(ring.writer, "_SHRINK_AFTER_S", 0.0)
    monkeypatch.setattr(ring.writer, "_SHRINK_CHECK_NS", 0)
    assert w.relax()  # back to the normal size, no bag in that generation yet
    assert read_counters(base)["generation"] == 2
    assert read_counters(base)["last_write_ns"] == big_ns
    r.close()
    w.close()


def test_a_publish_after_an_interrupt_always_changes_the_futex_word(base):
    """The writer stores the futex word (the bag's number) instead of bumping it; an
    interrupt sets the word's top bit. A reader about to sleep on the value it saw after an
    interrupt must not sleep through the next bag: the publish has to change the word."""
    create_ring(base, slot_size=256, slot_count=64)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    seen = {r._g.word.value}
    for seq in range(1, 40):
        r.interrupt()
        after_interrupt = r._g.word.value
        assert after_interrupt not in seen
        seen.add(after_interrupt)
        w.write(_bag(seq))
        published = r._g.word.value
        assert published not in seen, f"bag {seq} left the futex word at {published}, a value seen before"
        seen.add(published)
    assert len(r.read_many(100)) == 39
    r.close()
    w.close()


def _wait_for(condition, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def test_sleeping_readers_cost_the_writer_one_wake_and_all_wake(base, publish):
    """Four readers asleep on an idle ring: one watcher on the writer's word and three
    followers on the hand-off word (the C claim), so a bag makes the writer wake one reader,
    and the watcher wakes the rest. Without the C claim all four sleep on the writer's word."""
    import threading

    create_ring(base, slot_size=256, slot_count=8)
    w = RingWriter(base)
    readers = [RingReader(base, i, "ordered", start="now") for i in range(4)]
    woke = [None] * 4
    threads = [threading.Thread(target=lambda i=i: woke.__setitem__(i, readers[i].wait(10.0))) for i in range(4)]
    for t in threads:
        t.start()
    g = readers[0]._g
    if ring.wake._compare_exchange is not None:
        _wait_for(lambda: sum(g.sleepers) == 1 and sum(g.followers) == 3, "one watcher and three followers")
    else:
        _wait_for(lambda: sum(g.sleepers) == 4, "four readers asleep on the writer's word")
    w.write(_bag(1))
    for t in threads:
        t.join(15)
    assert woke == [True] * 4, "a reader slept through the bag"
    assert w.wakes == 1
    assert [len(r.read_many()) for r in readers] == [1, 1, 1, 1]
    assert g.watch.value == 0 and sum(g.sleepers) == 0 and sum(g.followers) == 0
    for r in readers:
        r.close()
    w.close()


def test_four_readers_that_sleep_between_bags_each_get_every_bag(base):
    """The hand-off from watcher to followers must never lose a wake: four processes, each
    sleeping whenever it has nothing, read every bag of a bursty writer (a missed wake shows
    as a 10 s timeout)."""
    n = 600
    create_ring(base, slot_size=256, slot_count=1024)
    pipes, procs = [], []
    for index in range(4):
        parent, child = SPAWN.Pipe()
        procs.append(_run(_count_missed_wakes, base, n, child, index))
        pipes.append(parent)
    for parent in pipes:
        assert parent.poll(30) and parent.recv() == "attached"
    w = RingWriter(base)
    for seq in range(1, n + 1):
        w.write(_bag(seq))
        if seq % 3 == 0:
            time.sleep(0.0003)  # sometimes long enough for readers to sleep
    for parent, proc in zip(pipes, procs):
        assert parent.poll(60), "a reader did not finish"
        assert parent.recv() == (0, n, 0)
        proc.join(10)
    w.close()


def test_a_reader_reads_again_what_it_gave_back(base):
    create_ring(base, slot_size=256, slot_count=8)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    for seq in (1, 2):
        w.write(_bag(seq))
    assert [_check(b) for b, _ in r.read_many()] == [1, 2]
    r.unread(1)
    got = r.read()
    assert got is not None and _check(got[0]) == 2
    assert (r.read_count, r.dropped) == (2, 0)
    r.close()
    w.close()


@pytest.mark.parametrize("other_process", [False, True])
def test_a_grown_ring_widens_before_an_ordered_reader_is_lapped_and_it_gets_every_bag(base, other_process):
    """A grown ring starts with 4 slots (a writer going round few slots writes into memory still in the
    cache); an ordered reader that reads nothing while 14 big bags come still gets all 14, in order, none
    dropped: the ring took its whole budget (16 slots here) before the reader was lapped."""
    big = 300_000  # grown to 1 MiB slots
    create_ring(base, slot_size=1024, slot_count=16)
    w = RingWriter(base)
    if other_process:
        parent, child = SPAWN.Pipe()
        proc = _run(_read_all, base, 0, "ordered", 14, child, True)
        assert parent.poll(30) and parent.recv() == "attached"
    else:
        r = RingReader(base, 0, "ordered")
    for seq in range(1, 15):
        w.write(_bag(seq, big))
        if seq == 2:
            assert read_counters(base)["slot_count"] == 4
    assert read_counters(base)["slot_count"] == 16
    if other_process:
        parent.send("go")
        assert parent.poll(30), "the reader process did not finish"
        seen, sizes, read, dropped, _generation = parent.recv()
        proc.join(10)
    else:
        seen = []
        while (bag := r.read()) is not None:
            seen.append(_check(bag[0]))
        read, dropped = r.read_count, r.dropped
        r.close()
    assert seen == list(range(1, 15)) and (read, dropped) == (14, 0)
    w.close()


def test_a_lagging_newest_reader_leaves_a_grown_ring_at_four_slots(base):
    """Only an ordered reader is kept from being lapped: a newest one takes the latest bag anyway."""
    create_ring(base, slot_size=1024, slot_count=16)
    w = RingWriter(base)
    newest = RingReader(base, 0, "newest")
    for seq in range(1, 15):
        w.write(_bag(seq, 300_000))
    assert read_counters(base)["slot_count"] == 4
    assert _check(newest.read()[0]) == 14
    newest.close()
    w.close()


def test_big_bags_into_a_grown_ring_count_toward_its_shrink_whichever_path_writes_them(base):
    """Once grown, big bags that fit take the writer's fast path (C), loans too; the ring still goes back to
    its normal size only _SHRINK_AFTER small bags after the last big one, and a reader gets every bag."""
    create_ring(base, slot_size=1024, slot_count=16)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    got: list[int] = []

    def take() -> None:
        while (bag := r.read()) is not None:
            got.append(len(bag[0]))

    w.write(b"x" * 300_000)  # grows the ring
    take()
    for i in range(10):
        if i % 2:
            with w.loan(200_000) as buf:
                buf[:] = b"y" * 200_000
        else:
            w.write(b"z" * 250_000)
        take()
    for _ in range(ring.writer._SHRINK_AFTER):
        w.write(b"small")
        take()
    assert w.grown, "shrunk before _SHRINK_AFTER small bags had followed the last big one"
    w.write(b"small")
    take()
    assert not w.grown
    assert got == [300_000] + [250_000, 200_000] * 5 + [5] * (ring.writer._SHRINK_AFTER + 1)
    assert (r.read_count, r.dropped) == (len(got), 0)
    r.close()
    w.close()


def test_a_newest_viewer_holds_the_latest_big_bag_and_counts_the_ones_it_skipped(base):
    create_ring(base, slot_size=1024, slot_count=16)
    w = RingWriter(base)
    r = RingReader(base, 0, "newest")
    for seq in range(1, 4):
        w.write(_bag(seq, 300_000))
    view = r.read_view()
    assert view is not None and _check(bytes(view.data)) == 3 and (r.read_count, r.dropped) == (1, 2)
    for seq in range(4, 12):  # laps the 4 slots twice: the held slot is left alone (the ring moves on)
        w.write(_bag(seq, 300_000))
    assert _check(bytes(view.data)) == 3
    view.release()
    latest = r.read_view()
    assert latest is not None and _check(bytes(latest.data)) == 11 and (r.read_count, r.dropped) == (2, 9)
    latest.release()
    assert r.read_view() is None
    r.close()
    w.close()


def test_bags_of_megabytes_arrive_byte_for_byte_whatever_their_length(base):
    """Bags of 2 MiB and more are copied into their slot with streaming stores (ring_protocol.h); a length
    that is no multiple of the 64 bytes a step copies, and one just under the threshold, arrive exact."""
    create_ring(base, slot_size=1024, slot_count=16)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    pattern = bytes(range(251)) * ((6 << 20) // 251)
    for n in ((2 << 20) - 1, 2 << 20, (5 << 20) + 37, 3 << 20):
        payload = pattern[7:7 + n]
        w.write(payload)
        got = r.read()
        assert got is not None and len(got[0]) == n and got[0] == payload
    w.write(pattern[:(4 << 20) + 5])
    view = r.read_view()
    assert view is not None and bytes(view.data) == pattern[:(4 << 20) + 5]
    view.release()
    r.close()
    w.close()
