"""Fast inputs and large bags: a reader's spin window, a writer's loan, a reader's held view.

Correctness only (every bag, in order, whole; a held view unchanged however far the writer
goes; the writer never waits; drops counted exactly); timing is bench/peers.py's."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import struct
import threading
import uuid

import msgspec
import pytest

from harness import graph_node, make_project, read_jsonl, wait_for
from tatolab._errors import BagError, GraphError, NodeDefinitionError
from tatolab._links import futex, shm
from tatolab._links import ring
from tatolab._links.ring import RingReader, RingWriter, create_ring, reap
from tatolab._host.ports import InputPort, OutputPort
from tatolab._sdk.context import Inputs, Outputs
from tatolab._sdk.nodes import describe_node, node

SPAWN = multiprocessing.get_context("spawn")
BIG = 3 << 20  # bigger than the rings' normal slot below: a grown generation, where views are the slot


@pytest.fixture(autouse=True, params=["c", "python"] if ring.writer._Publisher is not None else ["python"])
def publish(request, monkeypatch):
    """With the C publisher and claim (_native.c), and with the Python fallback."""
    monkeypatch.setattr(ring.writer, "COMPILED_PUBLISH", request.param == "c")
    if request.param == "python":
        monkeypatch.setattr(ring.wake, "_compare_exchange", None)
        monkeypatch.setattr(ring.views, "VIEWS", False)
        monkeypatch.setattr(ring.reader, "_RunReader", None)
        monkeypatch.setattr(ring.wake, "futex_wait", futex._futex_wait)
        monkeypatch.setattr(ring.wake, "futex_wake", futex._futex_wake)
        monkeypatch.setattr(ring.writer, "futex_wake", futex._futex_wake)
    return request.param


@pytest.fixture
def base():
    b = f"{shm.private_folder()}/test-loans-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield b
    reap(b)


def _fill(buf: memoryview, seq: int) -> None:
    struct.pack_into("<Q", buf, 0, seq)
    buf[8:] = bytes([seq % 251]) * (len(buf) - 8)


def _check(data: memoryview | bytes, seq: int, size: int) -> None:
    assert len(data) == size
    assert struct.unpack_from("<Q", data)[0] == seq
    assert data[8:] == bytes([seq % 251]) * (size - 8), f"bag {seq} is not what was written"


# --- the spin window ---------------------------------------------------------------------

def test_a_spinning_reader_takes_a_bag_without_sleeping(base):
    create_ring(base, slot_size=256, slot_count=8)
    w, r = RingWriter(base), RingReader(base, 0, "ordered")
    r.spin_ns = 60 * 10**9  # longer than the test: it never sleeps
    polling = threading.Event()
    seen_asleep = []

    def write_once_polled() -> None:
        polling.wait()
        seen_asleep.append(bytes(r._g.sleepers))  # the reader polls: no sleepers byte is set
        w.write(b"one")

    thread = threading.Thread(target=write_once_polled)
    thread.start()
    real_spin = ring.wake._spin_for

    def spin(*args):
        polling.set()
        return real_spin(*args)

    ring.wake._spin_for = spin
    try:
        assert r.wait(30.0) is True
    finally:
        ring.wake._spin_for = real_spin
    thread.join()
    assert r.read() is not None and seen_asleep == [bytes(64)]
    assert w.wakes == 0  # taken within the window: the writer never paid for a wake
    r.close()
    w.close()


def test_a_spin_window_ends_in_a_sleep_that_times_out(base):
    create_ring(base, slot_size=256, slot_count=8)
    r = RingReader(base, 0, "ordered")
    r.spin_ns = 1_000_000
    assert r.wait(0.02) is False
    assert r._g.sleepers[0] == 0
    r.close()


def _spin_read(base: str, n: int, spin_ns: int, out) -> None:
    r = RingReader(base, 0, "ordered")
    r.spin_ns = spin_ns
    out.send("attached")
    seqs, timeouts = [], 0
    while not seqs or seqs[-1] < n:
        got = r.read_many()
        if not got:
            if not r.wait(10.0):
                timeouts += 1
            continue
        seqs += [struct.unpack_from("<Q", g[0])[0] for g in got]
    out.send((seqs, timeouts, r.dropped))
    r.close()


@pytest.mark.parametrize("spin_ns", [20_000, 2_000_000])
def test_a_spinning_reader_gets_every_bag_in_order(base, spin_ns):
    """Bags that come inside the window and after it (the reader then sleeps and is woken)."""
    n = 400
    create_ring(base, slot_size=256, slot_count=1024)
    parent, child = SPAWN.Pipe()
    proc = SPAWN.Process(target=_spin_read, args=(base, n, spin_ns, child), daemon=True)
    proc.start()
    assert parent.poll(30) and parent.recv() == "attached"
    w = RingWriter(base)
    for seq in range(1, n + 1):
        w.write(struct.pack("<Q", seq))
        if seq % 7 == 0:
            threading.Event().wait(0.001)  # past a short window: the reader sleeps, and is woken
    assert parent.poll(60), "the reader did not finish"
    seqs, timeouts, dropped = parent.recv()
    proc.join(10)
    assert (seqs, timeouts, dropped) == (list(range(1, n + 1)), 0, 0)
    w.close()


def test_spin_us_is_declared_checked_and_described():
    @node
    class Fast:
        @node.input(delivery_profile="ordered", spin_us=50)
        def bags(self) -> dict: ...

        def process(self, ctx) -> None: ...

    assert describe_node(Fast)["inputs"] == [{"port": "bags", "delivery_profile": "ordered", "spin_us": 50}]
    for bad in (-1, "50", True, 10**7):
        with pytest.raises(NodeDefinitionError, match=r"input 'bags' has spin_us=.*give the microseconds"):
            @node
            class Wrong:
                @node.input(delivery_profile="ordered", spin_us=bad)
                def bags(self) -> dict: ...

                def process(self, ctx) -> None: ...


# --- the writer's loan and the reader's view ----------------------------------------------

@pytest.mark.parametrize("size", [100, BIG])
def test_loaned_bags_arrive_whole_and_in_order(base, size):
    create_ring(base, slot_size=4096, slot_count=8)
    w, r = RingWriter(base), RingReader(base, 0, "ordered")
    for seq in range(1, 31):
        with w.loan(size) as buf:
            _fill(buf, seq)
        if seq % 3 == 0:
            w.write(struct.pack("<Q", 1000 + seq))  # mixed with plain writes
        got = r.read_many()
        assert got, seq
        _check(got[0][0], seq, size)
        if seq % 3 == 0:
            assert struct.unpack_from("<Q", got[1][0])[0] == 1000 + seq
    assert (r.read_count, r.dropped, w.seq) == (40, 0, 40)
    r.close()
    w.close()


def test_a_loan_that_raises_publishes_nothing(base):
    create_ring(base, slot_size=4096, slot_count=8)
    w, r = RingWriter(base), RingReader(base, 0, "ordered")
    with pytest.raises(RuntimeError):
        with w.loan(50) as buf:
            buf[:4] = b"half"
            raise RuntimeError("the producer failed")
    assert w.seq == 0 and r.read() is None
    with w.loan(4) as buf:
        buf[:] = b"next"
    assert r.read()[0] == b"next" and w.seq == 1
    r.close()
    w.close()


def test_a_held_view_stays_whole_while_the_writer_laps_the_ring(base, publish):
    """The writer goes round the ring many times while views are held (in this very thread: a
    writer that waited for a reader would never return), and never writes into a held slot."""
    create_ring(base, slot_size=4096, slot_count=8)
    w, r = RingWriter(base), RingReader(base, 0, "ordered")
    held = []
    for seq in range(1, 41):
        with w.loan(BIG) as buf:
            _fill(buf, seq)
        view = r.read_view()
        assert view is not None
        _check(view.data, seq, BIG)
        held.append((seq, view))
        if len(held) > 12:  # more than the grown ring's slots: the writer comes round to held ones
            old_seq, old = held.pop(0)
            _check(old.data, old_seq, BIG)
            old.release()
    if publish == "c":
        assert view.data.readonly and w.generation > 1  # the slot itself, and the writer moved on from held ones
    for seq, view in held:
        _check(view.data, seq, BIG)
        view.release()
    assert (r.read_count, r.dropped) == (40, 0)
    r.close()
    w.close()


def test_a_lagging_viewer_counts_its_drops_exactly(base):
    create_ring(base, slot_size=4096, slot_count=8)
    w, r = RingWriter(base), RingReader(base, 0, "ordered")
    with w.loan(BIG) as buf:
        _fill(buf, 1)
    first = r.read_view()
    for seq in range(2, 41):  # far past the ring's slots while a view is held
        with w.loan(BIG) as buf:
            _fill(buf, seq)
    _check(first.data, 1, BIG)
    first.release()
    seqs = []
    while (view := r.read_view()) is not None:
        with view as data:
            seqs.append(struct.unpack_from("<Q", data)[0])
            _check(data, seqs[-1], BIG)
    # in order, to the last one; what the writer overwrote meanwhile is counted, exactly
    assert seqs == sorted(set(seqs)) and seqs[-1] == 40 and len(seqs) < 39
    assert r.read_count == 1 + len(seqs) and r.dropped == 40 - r.read_count
    r.close()
    w.close()


def test_a_view_held_across_close_is_still_good(base):
    create_ring(base, slot_size=4096, slot_count=8)
    w, r = RingWriter(base), RingReader(base, 0, "ordered")
    with w.loan(BIG) as buf:
        _fill(buf, 7)
    view = r.read_view()
    r.close()
    w.close()
    _check(view.data, 7, BIG)
    view.release()


def test_outputs_loan_sends_a_bag_of_its_bytes_and_fields(base):
    create_ring(base, slot_size=4096, slot_count=8)
    w, r = RingWriter(base), RingReader(base, 0, "ordered")
    outputs = Outputs("maker", {"frames": OutputPort("frames", w)})
    port = InputPort("frames", "ordered")
    port.add_link("maker/frames->user/frames", r)
    inputs = Inputs("user", {"frames": port})
    for size in (0, 10, BIG):
        payload = os.urandom(size)
        with outputs.loan("frames", size, width=640, name="cam") as buf:
            buf[:] = payload
        got = inputs.read("frames")
        assert sorted(got) == ["data", "name", "width"] and (got["width"], got["name"]) == (640, "cam")
        assert hashlib.sha256(got["data"]).digest() == hashlib.sha256(payload).digest()
    with outputs.loan("frames", 3) as buf:
        buf[:] = b"abc"
    assert inputs.read("frames") == {"data": b"abc"}
    with pytest.raises(GraphError, match="no output port 'nope'.*frames"):
        outputs.loan("nope", 10)
    with pytest.raises(BagError, match=r"node maker port frames: loan takes the bag's size in bytes.*-1"):
        outputs.loan("frames", -1)
    with pytest.raises(BagError, match='none named "data"'):
        outputs.loan("frames", 1, data=2)
    r.close()
    w.close()


def test_inputs_view_gives_a_big_bag_as_its_slot_held_until_the_block_ends(base, publish):
    create_ring(base, slot_size=4096, slot_count=8)
    w, r = RingWriter(base), RingReader(base, 0, "ordered")
    outputs = Outputs("maker", {"frames": OutputPort("frames", w)})
    port = InputPort("frames", "ordered")
    port.add_link("maker/frames->user/frames", r)
    inputs = Inputs("user", {"frames": port})
    for seq in (1, 2, 3):
        with outputs.loan("frames", BIG, seq=seq) as buf:
            _fill(buf, seq)
    with inputs.view("frames") as bag:
        assert bag["seq"] == 1 and bag["data"].readonly
        _check(bag["data"], 1, BIG)
        if publish == "c":
            assert sum(r._holds.values()) == 1  # the slot itself, held
        kept = bag["data"]
    with pytest.raises(ValueError):
        kept[0]  # released with the block
    assert not r._holds
    got = inputs.read("frames")  # read copies the bytes out and gives the slot back
    assert got["seq"] == 2 and type(got["data"]) is bytes and not r._holds
    _check(got["data"], 2, BIG)
    port.fill()  # bag 3 delivered (held, with views), then the link goes: its slot is given back
    port.remove_link("maker/frames->user/frames")
    assert not r._holds
    with inputs.view("frames") as nothing:
        assert nothing is None
    w.write(msgspec.msgpack.encode({"n": 1}))  # a small bag views as it reads
    port.add_link("maker/frames->user/frames", r)
    with inputs.view("frames") as bag:
        assert bag["seq"] == 3  # given back to the ring when its link went, so read again
        _check(bag["data"], 3, BIG)
    with inputs.view("frames") as bag:
        assert bag == {"n": 1}
    assert not r._holds
    r.close()
    w.close()


NODES = """
import hashlib, os
from tatolab.stream import node


@node(execution="continuous", interval_ms=5)
class Frames:
    @node.output()
    def frames(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        size = 1_000_000 + self.n if self.n % 2 else 64
        with ctx.outputs.loan("frames", size) as buf:
            buf[:8] = self.n.to_bytes(8, "little")
            buf[8:] = bytes([self.n % 251]) * (size - 8)
        self.n += 1


@node
class Check:
    @node.input(delivery_profile="ordered", spin_us=300)
    def frames(self) -> dict: ...

    def __init__(self) -> None:
        self.file = open("frames.jsonl", "a", buffering=1)

    def process(self, ctx) -> None:
        with ctx.inputs.view("frames") as bag:  # (the bag's bytes in its ring slot)
            if bag is not None:
                data = bag["data"]
                n = int.from_bytes(data[:8], "little")
                ok = data[8:] == bytes([n % 251]) * (len(data) - 8)
                self.file.write('{"n": %d, "size": %d, "intact": %s}\\n' % (n, len(data), "true" if ok else "false"))
"""

STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.loans import Check, Frames


@stream
def loans(stream_builder: StreamBuilder) -> None:
    stream_builder.connect(stream_builder.add(Frames).output("frames"), stream_builder.add(Check).input("frames"))
"""


@pytest.mark.slow
def test_loaned_frames_reach_a_spinning_input_whole_and_in_order(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "loans", project_venv, {
        "stream.py": STREAM, "nodes/__init__.py": "", "nodes/loans.py": NODES,
    })
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(lambda: len(read_jsonl(project / "frames.jsonl")) >= 40, timeout=60, what="frames checked")
        check = graph_node(runtime, "loans", "check")
        assert check["inputs"][0]["spin_us"] == 300 and "cpu_percent" in check
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=30)
    rows = read_jsonl(project / "frames.jsonl")
    assert [row["n"] for row in rows] == list(range(rows[0]["n"], rows[0]["n"] + len(rows)))
    assert all(row["intact"] for row in rows)
    assert {row["size"] > 1_000_000 for row in rows} == {True, False}
