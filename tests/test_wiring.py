"""Remote links wiring and unwiring over real rings, without node processes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tatolab._links import shm
from tatolab._links import ring
from tatolab._runtime.rules.exposure import set_level
from tatolab._runtime.lifecycle.streams import LoadedStream, OutputRing
from tatolab._runtime.lifecycle.wiring import release_remote, rewire


class FakeNode:
    def __init__(self) -> None:
        self.spec = {"inputs": {"rows": {"delivery_profile": "ordered", "links": []}}}
        self.sent: list[dict] = []

    def send(self, message: dict) -> None:
        self.sent.append(message)


@pytest.fixture
def source():
    base = f"{shm.private_folder()}/test-{uuid.uuid4().hex[:8]}"
    ring.create_ring(base)
    graph = {"nodes": [{"name": "counter", "outputs": [{"port": "counts"}], "inputs": []}], "links": [],
             "exposures": [{"node": "counter", "port": "counts", "level": "private"}]}
    stream = LoadedStream(name="source", project=Path("/src"), graph=graph, mode="kept")
    stream.rings[("counter", "counts")] = OutputRing(base)
    yield stream
    ring.reap(base)


def make_reader() -> LoadedStream:
    graph = {"nodes": [{"name": "sink", "outputs": [], "inputs": [{"port": "rows", "delivery_profile": "ordered"}]}],
             "links": [{"from": {"address": "source/counter/counts"}, "to": {"node": "sink", "port": "rows"}}]}
    reader = LoadedStream(name="reader", project=Path("/reader"), graph=graph, mode="attached")
    reader.nodes["sink"] = FakeNode()  # type: ignore[assignment]
    return reader


def test_a_reader_that_comes_and_goes_gives_its_reader_record_back(source):
    key = "source/counter/counts->sink/rows"
    for _ in range(3 * ring.MAX_READERS):  # a day of `tatolab dev` saves on the reading stream
        reader = make_reader()
        streams = {"source": source, "reader": reader}
        rewire(streams, [], "box")
        assert key in reader.wiring, reader.waiting
        streams.pop("reader")
        release_remote(streams, reader)
    assert source.rings[("counter", "counts")].next_reader == 1


def test_a_full_ring_leaves_the_link_waiting_with_the_reason(source):
    out = source.rings[("counter", "counts")]
    out.next_reader = ring.MAX_READERS
    reader = make_reader()
    rewire({"source": source, "reader": reader}, [], "box")
    assert reader.wiring == {}
    assert f"already has {ring.MAX_READERS} readers" in reader.waiting["source/counter/counts->sink/rows"].text


def test_making_the_output_internal_cuts_the_reader(source):
    reader = make_reader()
    streams = {"source": source, "reader": reader}
    rewire(streams, [], "box")
    set_level(source.graph, "counter", "counts", "internal")
    rewire(streams, [], "box")
    assert reader.wiring == {}
    assert reader.nodes["sink"].sent[-1] == {"op": "remove_link", "key": "source/counter/counts->sink/rows"}
    assert reader.nodes["sink"].spec["inputs"]["rows"]["links"] == []
    assert "is internal" in reader.waiting["source/counter/counts->sink/rows"].text
