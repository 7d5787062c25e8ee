"""Where time goes, in one process: bag ages recorded at read (C and Python), origins in the slot
header, the oldest-origin rule of a node that reads two inputs, a writer restart, bad files."""

from __future__ import annotations

import os
import time
import uuid
from array import array

import pytest

from tatolab._links import latency, ring, shm
from tatolab._links.ring import RingReader, RingWriter, create_ring, reap, release_reader
from tatolab._sdk.context import InputPort, Inputs, OutputPort, Outputs
from tatolab._runtime.timing import Topology


@pytest.fixture(autouse=True, params=["c", "python"] if ring._Publisher is not None else ["python"])
def path(request, monkeypatch):
    """Every test both ways: the C publish, run copy and recording, and the Python ones."""
    monkeypatch.setattr(ring, "COMPILED_PUBLISH", request.param == "c")
    if request.param == "python":
        monkeypatch.setattr(ring, "_read_run", None)
    return request.param


@pytest.fixture
def prefix():
    p = f"{shm.private_folder()}/tatolab-test-{os.getpid()}-{uuid.uuid4().hex[:8]}-"
    yield p
    reap(p)


def _bag(n: int) -> bytes:
    return b"\x81\xa1n" + bytes([n])  # msgpack {"n": n} (n < 128)


def test_buckets_are_log_spaced_and_a_percentile_is_never_below_the_truth():
    assert latency.bucket(0) == 0 and latency.bucket(1023) == 0 and latency.bucket(1024) == 1
    for ns in (1024, 1500, 10_000, 123_456, 10_000_000, 2_000_000_000):
        b = latency.bucket(ns)
        assert latency.upper_ns(b - 1) <= ns < latency.upper_ns(b)
        assert latency.upper_ns(b) <= ns * 1.25 + 1  # buckets at most 25 % wide
    assert latency.bucket(10**15) == latency.BUCKETS - 1
    counts = [0] * latency.BUCKETS
    counts[latency.bucket(10_000_000)] = 90
    counts[latency.bucket(50_000_000)] = 10
    s = latency.summary((counts, 100, 50_000_000))
    assert 10_000 <= s["p50_us"] <= 12_500 and 10_000 <= s["p90_us"] <= 12_500
    assert s["p99_us"] == s["max_us"] == 50_000.0 and s["bags"] == 100
    assert latency.summary(([0] * latency.BUCKETS, 0, 0)) == {
        "p50_us": None, "p90_us": None, "p99_us": None, "max_us": None, "bags": 0}


@pytest.mark.parametrize("how", ["read", "read_many"])
def test_a_reader_records_each_bags_age_and_its_origin(prefix, how):
    base = prefix + "src+out"
    create_ring(base, slot_size=256, slot_count=16)
    w = RingWriter(base)
    r = RingReader(base, 3, "ordered", origins=True)
    for n in range(5):
        w.write(_bag(n))
    time.sleep(0.002)  # (the age being measured, not a synchronisation)
    got = [r.read() for _ in range(5)] if how == "read" else r.read_many()
    assert len(got) == 5 and all(len(bag) == 4 for bag in got)
    for payload, publish_ns, origin_ns, origin in got:
        assert origin_ns == publish_ns and origin == latency.origin_id(base)  # a source's bag originates when written
    record = latency.read(base, [3])[3]
    link = latency.summary(record["window"])
    assert link["bags"] == 5 and link["p50_us"] >= 2000 and link["max_us"] < 2_000_000
    assert latency.summary(record["total"])["bags"] == 5
    assert list(record["paths"]) == [latency.origin_id(base)]
    assert latency.summary(record["paths"][latency.origin_id(base)][0])["bags"] == 5
    assert latency.read(base, [4])[4]["window"][1] == 0  # another record: nothing
    # a plain reader (a tap) gets (payload, publish_ns) as before, and records too
    tap = RingReader(base, 5, "ordered")
    assert [len(bag) for bag in tap.read_many()] == [2] * 5
    assert latency.read(base, [5])[5]["total"][1] == 5
    release_reader(base, 5)
    assert latency.read(base, [5])[5]["total"][1] == 0  # a released record starts afresh
    for closing in (r, tap, w):
        closing.close()


def test_a_node_reading_two_inputs_writes_with_the_older_origin(prefix):
    bases = {name: prefix + name for name in ("a+out", "b+out", "mix+out")}
    for base in bases.values():
        create_ring(base, slot_size=256, slot_count=16)
    wa, wb = RingWriter(bases["a+out"]), RingWriter(bases["b+out"])
    wa.write(_bag(1))  # the older
    time.sleep(0.001)
    wb.write(_bag(2))
    cell = array("Q", [0, 0])  # as the node host wires it (runner.py)
    ports = {}
    for name in ("a", "b"):
        ports[name] = InputPort(name, "ordered")
        ports[name].origin = cell
        ports[name].add_link(f"{name}/out->mix/{name}", RingReader(bases[f"{name}+out"], 0, "ordered", origins=True))
    mixer_out = RingWriter(bases["mix+out"])
    mixer_out.set_origin(cell)
    inputs, outputs = Inputs("mix", ports), Outputs("mix", {"out": OutputPort("out", mixer_out)})
    for port in ports.values():
        port.fill()
    # process(): reads b first, then a; writes one bag
    assert inputs.read("b") == {"n": 2} and inputs.read("a") == {"n": 1}
    outputs.write("out", {"mixed": True})
    cell[0] = 0  # the next call starts afresh: a call that reads nothing originates its bags
    outputs.write("out", {"alone": True})
    sink = RingReader(bases["mix+out"], 0, "ordered", origins=True)
    (_, mixed_ns, mixed_origin_ns, mixed_origin), (_, alone_ns, alone_origin_ns, alone_origin) = sink.read_many()
    a_bag = RingReader(bases["a+out"], 1, "ordered", origins=True).read()
    assert (mixed_origin_ns, mixed_origin) == (a_bag[1], latency.origin_id(bases["a+out"]))
    assert mixed_origin_ns < mixed_ns
    assert (alone_origin_ns, alone_origin) == (alone_ns, latency.origin_id(bases["mix+out"]))
    path = latency.read(bases["mix+out"], [0])[0]["paths"]
    assert set(path) == {latency.origin_id(bases["a+out"]), latency.origin_id(bases["mix+out"])}


def test_a_writer_restart_starts_the_window_again_and_is_counted(prefix):
    base = prefix + "src+out"
    create_ring(base, slot_size=256, slot_count=16)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered")
    w.write(_bag(1))
    r.read()
    w.close()
    w = RingWriter(base)  # the node restarted
    w.write(_bag(2))
    r.read()
    record = latency.read(base, [0])[0]
    assert record["resets"] == 1
    assert record["window"][1] == 1 and record["total"][1] == 2  # the window lost the first, since-start kept it
    r.close()
    w.close()


def test_a_missing_or_foreign_latency_file_is_a_reason_never_a_crash(prefix):
    base = prefix + "src+out"
    create_ring(base, slot_size=256, slot_count=16)
    latency.remove(base)  # as a ring an older runtime made
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered", origins=True)
    w.write(_bag(1))
    assert r.read()[0] == _bag(1)  # the link works on, unrecorded
    got = Topology({}).histograms(base, [0])
    assert isinstance(got, str) and "no latency file" in got
    with open(latency.path_of(base), "wb") as f:
        f.write(b"\0" * latency.FILE_BYTES)
    got = Topology({}).histograms(base, [0])
    assert isinstance(got, str) and "not a tatolab latency file" in got
    r.close()
    w.close()
