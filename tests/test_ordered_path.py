"""The node host's per-bag path for an input fed by one ordered link: InputPort.fill and Inputs.read's
take-and-decode in C (_native.fill_ordered, take_ordered: tatolab/_links/_ordered.h) and their Python
definition (tatolab/_host/ports.py, tatolab/_sdk/context.py, ring/reader.py's read_many) over real rings.
Every test runs both ways; one runs both over the same ring and holds them to the same answers."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from tatolab import _bags
from tatolab._host.ports import InputPort, inherit_origin
from tatolab._links import ring, shm
from tatolab._links.ring import RingReader, RingWriter, create_ring, read_counters, reap
from tatolab._sdk import context
from tatolab._sdk.context import Inputs

COMPILED = context._take_ordered is not None
PATHS = ["c", "python"] if COMPILED else ["python"]


@pytest.fixture
def base():
    b = f"{shm.private_folder()}/test-ordered-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield b
    reap(b)


class Node:
    """One ordered input port over reader `index` of the ring, read as the node host reads it: fill,
    then (the call) ctx.inputs.read with the origin and wait cells zeroed before, as begin() does."""

    def __init__(self, base: str, index: int, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = path
        self._monkeypatch = monkeypatch
        with monkeypatch.context() as m:
            if path == "python":
                m.setattr(ring.reader, "_RunReader", None)  # the reader's run in Python too
            self.reader = RingReader(base, index, "ordered", origins=True)
        assert self.reader._compiled is (path == "c")
        self.port: InputPort[Any] = InputPort("bags", "ordered")
        self.in_c = {"fill": 0, "take": 0}  # the calls the C path did itself (not left to Python)
        fill_c = self.port._fill_c
        if path == "python" or fill_c is None:
            self.port._fill_c = None
        else:
            def fill(*args: Any) -> bool | None:
                done = fill_c(*args)
                self.in_c["fill"] += done is True
                return done

            self.port._fill_c = fill
        self.port.origin = self.origin = [0, 0]
        self.port.add_link("src/out->node/bags", self.reader)
        self.inputs = Inputs("node", {"bags": self.port})

    def read(self) -> tuple[Any, ...] | None:
        """One call's worth: fill, then one read; what it gave, the cells and where the reader is."""
        self.origin[0] = self.origin[1] = 0
        self.port.taken[0] = 0
        filled = self.port.fill()
        waited = self.port.taken[0] != 0
        with self._monkeypatch.context() as m:
            take_c = context._take_ordered
            if self.path == "python" or take_c is None:
                m.setattr(context, "_take_ordered", None)
            else:
                def take(*args: Any) -> Any:
                    bag = take_c(*args)
                    self.in_c["take"] += bag is not None
                    return bag

                m.setattr(context, "_take_ordered", take)
            bag = self.inputs.read("bags")
        if not filled and bag is None:
            return None
        r = self.reader
        return (bag, filled, waited, list(self.origin), self.port.last_link, r._next, r.read_count, r.dropped,
                r.bad, r._last_seq)

    def read_all(self) -> list[tuple[Any, ...]]:
        out = []
        while (got := self.read()) is not None:
            out.append(got)
        return out

    def close(self) -> None:
        self.port.remove_link("src/out->node/bags")
        self.reader.close()


def _bag(n: int) -> bytes:
    return _bags.encode({"seq": n, "pad": "x" * 68}, "src", "out")


@pytest.mark.parametrize("path", PATHS)
def test_every_bag_of_an_ordered_link_is_read_in_order(base, path, monkeypatch):
    create_ring(base, slot_size=256, slot_count=128)
    writer = RingWriter(base)
    node = Node(base, 0, path, monkeypatch)
    try:
        seen: list[int] = []
        n = 0
        for batch in (1, 1, 3, 1, 64, 65, 70, 2, 1):  # one a call, a backlog, more than one run takes
            for _ in range(batch):
                writer.write(_bag(n))
                n += 1
            seen += [got[0]["seq"] for got in node.read_all()]
        assert seen == list(range(n))
        assert (node.reader.read_count, node.reader.dropped, node.reader.bad) == (n, 0, 0)
        record = read_counters(base)["readers"][0]
        assert (record["read"], record["dropped"], record["behind"]) == (n, 0, 0)
        assert node.port.last_link == "src/out->node/bags"
        if path == "c":  # (the C path did the common case itself)
            assert node.in_c["fill"] > 0 and node.in_c["take"] > 0
    finally:
        node.close()
        writer.close()


@pytest.mark.parametrize("path", PATHS)
def test_bags_lost_when_the_writer_laps_are_counted_dropped_at_the_reader(base, path, monkeypatch):
    create_ring(base, slot_size=256, slot_count=8)
    writer = RingWriter(base)
    node = Node(base, 0, path, monkeypatch)
    try:
        writer.write(_bag(0))
        assert [got[0]["seq"] for got in node.read_all()] == [0]
        for n in range(1, 41):  # 40 bags into 8 slots while the node reads none
            writer.write(_bag(n))
        seen = [got[0]["seq"] for got in node.read_all()]
        assert seen == sorted(seen) and seen[-1] == 40 and len(seen) <= 8
        lost = 40 - len(seen)
        assert seen[0] == 1 + lost  # the oldest still in the ring, nothing skipped after it
        assert (node.reader.read_count, node.reader.dropped) == (1 + len(seen), lost)
        record = read_counters(base)["readers"][0]
        assert (record["read"], record["dropped"], record["behind"]) == (1 + len(seen), lost, 0)
        writer.write(_bag(41))  # and on as before
        assert [got[0]["seq"] for got in node.read_all()] == [41]
    finally:
        node.close()
        writer.close()


@pytest.mark.skipif(not COMPILED, reason="the C module was not built: there is one path")
def test_the_c_path_and_the_python_path_give_the_same_results_on_the_same_ring(base, monkeypatch):
    """Two readers of one ring, one node port read each way, the same writes: every bag, origin cell,
    wait cell, link, position and counter the same after every call, and in the ring's record."""
    create_ring(base, slot_size=256, slot_count=16)
    writer = RingWriter(base)
    cell = [0, 0]
    writer.set_origin(cell)
    nodes = [Node(base, 0, "c", monkeypatch), Node(base, 1, "python", monkeypatch)]
    traces: list[list[Any]] = [[], []]
    n = 0

    def write(count: int, origin: tuple[int, int] | None = None, payload: bytes | None = None) -> None:
        nonlocal n
        cell[:] = origin or (0, 0)  # (0: the bag originates at its writer, when written)
        for _ in range(count):
            writer.write(payload if payload is not None else _bag(n))
            n += 1

    def read(calls: int | None = None) -> None:
        for node, trace in zip(nodes, traces):
            if calls is None:
                trace += node.read_all()
            else:
                trace += [node.read() for _ in range(calls)]
        assert traces[0] == traces[1]

    try:
        for step in range(3):
            write(1, (1000 + step, 7))
            read()
        write(5, (500, 3))  # a backlog
        read(2)
        write(1, (400, 4))
        read()
        write(1)  # no origin given
        read()
        write(40, (300, 5))  # the writer laps both readers
        read()
        write(1, payload=b"\xc1")  # a bag that does not decode: skipped, counted bad
        write(2, (200, 6))
        read()
        read(2)  # nothing new
        assert len(traces[0]) > 10
        seqs = [t[0]["seq"] for t in traces[0] if t is not None and t[0] is not None]
        assert seqs == sorted(seqs) and traces[0][-2:] == [None, None]
        records = {r["index"]: r for r in read_counters(base)["readers"]}
        assert {k: v for k, v in records[0].items() if k in ("read", "dropped", "bad", "behind")} == \
               {k: v for k, v in records[1].items() if k in ("read", "dropped", "bad", "behind")}
        assert records[0]["dropped"] > 0 and records[0]["bad"] == 1
        assert nodes[0].in_c["fill"] > 5 and nodes[0].in_c["take"] > 10 and nodes[1].in_c == {"fill": 0, "take": 0}
    finally:
        for node in nodes:
            node.close()
        writer.close()


@pytest.mark.skipif(not COMPILED, reason="the C module was not built")
@pytest.mark.parametrize("cell, origin", [
    ([0, 0], (500, 7)), ([0, 0], (0, 0)), ([400, 3], (500, 7)), ([600, 3], (500, 7)), ([600, 3], (0, 0)),
    ([600, 3], None),
])
def test_take_ordered_inherits_origins_by_the_one_rule(cell, origin):
    """take_ordered writes inherit_origin's rule out in C: the two give the same cell."""
    from tatolab._host.ports import _Link
    from tatolab._links._native import take_ordered

    payload = _bags.encode({"n": 1}, "n", "p")
    bag = (payload, 1) if origin is None else (payload, 1, *origin)
    link: _Link[Any] = _Link("a", None)
    link.pending = bag
    taken = list(cell)
    assert take_ordered(link, taken, _bags.decode_bytes) == {"n": 1}
    expected = list(cell)
    inherit_origin(expected, bag)
    assert taken == expected and link.pending is None
    assert take_ordered(link, taken, _bags.decode_bytes) is None  # nothing delivered now
    link.pending = (b"\xc1", 2, 5, 5)
    assert take_ordered(link, taken, _bags.decode_bytes) is None  # does not decode: left to the Python path
    assert link.pending == (b"\xc1", 2, 5, 5) and taken == expected


NO_C_MODULE = """
import sys
sys.modules["tatolab._links._native"] = None  # as where it was not built: every import of it fails
from tatolab import _bags
from tatolab._host.ports import InputPort, _Link
from tatolab._links.ring import RingReader, RingWriter, create_ring
from tatolab._sdk import context
from tatolab._sdk.context import Inputs

assert context._take_ordered is None and InputPort._fill_c is None and _Link.__bases__[0].__name__ == "_PyLinkCore"
base = sys.argv[1]
create_ring(base, slot_size=256, slot_count=8)
writer = RingWriter(base)
reader = RingReader(base, 0, "ordered", origins=True)
port = InputPort("bags", "ordered")
port.origin = [0, 0]
port.add_link("a", reader)
inputs = Inputs("node", {"bags": port})
seen = []
for batch in (1, 3, 20):
    for _ in range(batch):
        writer.write(_bags.encode({"seq": len(seen) + reader.dropped + len(port._one.backlog)}, "n", "p"))
    while port.fill():
        seen.append(inputs.read("bags")["seq"])
print(seen, reader.read_count, reader.dropped)
port.remove_link("a")
reader.close()
writer.close()
"""


def test_without_the_c_module_the_python_path_reads_in_order_and_counts_drops(base):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", NO_C_MODULE, base], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen, read, dropped = proc.stdout.strip().rsplit(" ", 2)
    assert eval(seen) == sorted(eval(seen)) and int(read) == len(eval(seen)) and int(dropped) == 24 - int(read)


@pytest.mark.skipif(not COMPILED, reason="the C module was not built")
def test_fill_ordered_leaves_a_delivered_bag_and_a_backlog_to_the_python_path(base):
    """fill_ordered takes nothing while the link still holds a bag delivered or taken off the ring."""
    from collections import deque

    from tatolab._host.ports import _Link
    from tatolab._links._native import fill_ordered

    create_ring(base, slot_size=256, slot_count=8)
    writer = RingWriter(base)
    reader = RingReader(base, 0, "ordered", origins=True)
    try:
        link: _Link[Any] = _Link("a", reader)
        writer.write(_bag(0))
        cell = [0]
        link.pending = (b"held", 1)
        assert fill_ordered(link, reader, cell) is None
        link.pending, link.backlog = None, deque([(b"behind", 2)])
        assert fill_ordered(link, reader, cell) is None
        assert (reader._next, reader.read_count, cell) == (1, 0, [0])  # nothing taken
        link.backlog = deque()
        assert fill_ordered(link, reader, cell) is True
        assert link.pending is not None and _bags.decode(link.pending[0])["seq"] == 0
        assert (reader._next, reader.read_count) == (2, 1) and cell[0] == link.taken > 0
        link.pending = None
        assert fill_ordered(link, reader, cell) is False  # nothing new
    finally:
        reader.close()
        writer.close()


@pytest.mark.parametrize("path", PATHS)
def test_bags_across_a_ring_grown_for_a_big_bag_and_back_are_read_in_order(base, path, monkeypatch):
    """A big bag moves the ring to a grown generation (its bags given as views of their slots), and
    small ones later to a normal one again: the C path leaves each move to the Python path."""
    monkeypatch.setattr(ring.writer, "_SHRINK_AFTER_S", 0)  # relax() shrinks at once
    create_ring(base, slot_size=256, slot_count=8)
    writer = RingWriter(base)
    node = Node(base, 0, path, monkeypatch)
    try:
        sizes = [10, 10, 50_000, 10, 60_000, 10, 10]
        seen = []
        grown = []
        for n, size in enumerate(sizes):
            writer.write(_bags.encode({"seq": n, "pad": "x" * size}, "src", "out"))
            seen += [(got[0]["seq"], len(got[0]["pad"])) for got in node.read_all()]
            grown.append(node.reader._big)
        for _ in range(40):  # enough small bags for the writer to go back to its normal size
            writer.write(_bag(len(seen)))
            writer.relax()
            seen += [(got[0]["seq"], len(got[0]["pad"])) for got in node.read_all()]
        assert seen[:len(sizes)] == list(enumerate(sizes))
        assert [s for s, _ in seen] == list(range(len(seen))) and node.reader.dropped == 0
        assert grown[2] and not node.reader._big and node.reader.generation >= 2  # grown, then back
    finally:
        node.close()
        writer.close()
