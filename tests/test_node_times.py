"""A node's own times (tatolab/_host/status.py): each process() call's duration, and how long the
bags handed to it waited inside the node after leaving their ring, recorded in C and in Python."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from tatolab._host import status
from tatolab._links import shm
from tatolab._links.ring import RingReader, RingWriter, create_ring, reap
from tatolab._host.ports import InputPort

BUILT = "c" if status._NodeTimer is not None else "python"


@pytest.fixture(params=["c", "python"] if BUILT == "c" else ["python"])
def timer_way(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(status, "_NodeTimer", None)
    return request.param


@pytest.fixture
def prefix():
    p = f"{shm.private_folder()}/tatolab-test-{os.getpid()}-{uuid.uuid4().hex[:8]}-"
    yield p
    reap(p)


def test_bags_taken_in_one_run_wait_behind_a_slow_call_and_each_call_is_timed(prefix, timer_way):
    base = prefix + "src+out"
    create_ring(base, slot_size=256, slot_count=16)
    status.create(prefix + "node#status")
    host = status.open_for_node(prefix + "node#status")
    assert type(host._timer).__name__ == ("NodeTimer" if timer_way == "c" else "_PythonTimer")
    writer = RingWriter(base)
    port = InputPort("frames", "ordered")
    port.add_link("src/out->node/frames", RingReader(base, 0, "ordered", origins=True))
    port.taken = host.taken
    for n in range(5):
        writer.write(b"\x81\xa1n" + bytes([n]))
    calls = 0
    while port.fill():  # the node host's loop: fill, then a call; the first fill takes all five off the ring
        host.begin()
        assert port.take() is not None
        time.sleep(0.004)  # the call's work (what is measured, not a synchronisation)
        host.end()
        calls += 1
    assert calls == 5
    runtime_side = status.NodeStatus(prefix + "node#status")
    times = runtime_side.timings()
    assert runtime_side.calls() == 5 and runtime_side.busy_since_ns() == 0
    assert times["process"]["bags"] == 5 and times["process"]["p50_us"] >= 4000
    assert times["process_since_start"]["bags"] == 5
    # the first bag was handed over at once; the last waited behind the four calls before it
    assert times["wait"]["bags"] == 5 and times["wait"]["max_us"] >= 4 * 4000
    assert times["wait"]["p50_us"] >= 2 * 4000
    # a call that read nothing (a continuous node) records no wait
    host.begin()
    host.end()
    assert runtime_side.timings()["wait"]["bags"] == 5 and runtime_side.timings()["process"]["bags"] == 6
    # a new node host on the same file starts its times afresh
    host.close()
    again = status.open_for_node(prefix + "node#status")
    assert runtime_side.timings()["process"]["bags"] == 0
    for closing in (again, runtime_side):
        closing.close()
    writer.close()


def test_a_status_file_from_an_older_runtime_keeps_no_times(prefix):
    path = prefix + "old#status"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, 64)
    os.close(fd)
    host = status.open_for_node(path)
    host.begin()
    host.end()
    assert host.calls() == 1 and host.timings() == {}
    host.close()
    os.unlink(path)
