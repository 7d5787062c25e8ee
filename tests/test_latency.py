"""Where time goes, in one process: bag ages recorded at read (C and Python), origins in the slot
header, the oldest-origin rule of a node that reads two inputs, a writer restart, bad files."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from tatolab._links import latency, ring, shm
from tatolab._links.ring import RingReader, RingWriter, create_ring, reap, release_reader
from tatolab._host.ports import InputPort, OutputPort
from tatolab._sdk.context import Inputs, Outputs
from tatolab._runtime.views.timing import Topology


BUILT = "c" if ring.writer._Publisher is not None else "python"  # the way the installed module works


@pytest.fixture(autouse=True, params=["c", "python"] if BUILT == "c" else ["python"])
def path(request, monkeypatch):
    """Every test both ways: the C publish, run copy and recording, and the Python ones (a test
    of the runtime's nodes runs once: they read with the installed module, whatever this process
    patches)."""
    monkeypatch.setattr(ring.writer, "COMPILED_PUBLISH", request.param == "c")
    if request.param == "python":
        monkeypatch.setattr(ring.reader, "_RunReader", None)
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
    for _payload, publish_ns, origin_ns, origin in got:
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
    cell = [0, 0]  # as the node host wires it (runner.py)
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


def test_bags_given_back_unread_are_counted_again_when_read_again(prefix):
    base = prefix + "src+out"
    create_ring(base, slot_size=256, slot_count=16)
    w = RingWriter(base)
    r = RingReader(base, 0, "ordered", origins=True)
    for n in range(4):
        w.write(_bag(n))
    assert len(r.read_many()) == 4
    r.unread(2)  # the node stopped with two still queued
    again = r.read_many()
    assert [payload for payload, *_ in again] == [_bag(2), _bag(3)]
    record = latency.read(base, [0])[0]
    assert record["total"][1] == 6 and latency.summary(record["window"])["bags"] == 6
    r.close()
    w.close()


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


# --- against a real runtime ---------------------------------------------------------------------

CAMERA_NODES = """
import time
from tatolab.stream import node


@node(execution="continuous", interval_ms=40)
class Source:
    @node.output()
    def frames(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        ctx.outputs.write("frames", {"n": self.n})
        self.n += 1


@node
class Slow:
    @node.input(delivery_profile="ordered")
    def frames(self) -> dict: ...

    @node.output()
    def out(self) -> dict: ...

    def process(self, ctx) -> None:
        bag = ctx.inputs.read("frames")
        if bag is not None:
            time.sleep(0.010)
            ctx.outputs.write("out", bag)


@node
class Sink:
    @node.input(delivery_profile="ordered")
    def rows(self) -> dict: ...

    def process(self, ctx) -> None:
        ctx.inputs.read("rows")
"""

CAMERA_STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.camera import Sink, Slow, Source


@stream
def camera(stream_builder: StreamBuilder) -> None:
    source = stream_builder.add(Source, name="source")
    slow = stream_builder.add(Slow, name="slow")
    sink = stream_builder.add(Sink, name="sink")
    stream_builder.connect(source.output("frames"), slow.input("frames"))
    stream_builder.connect(slow.output("out"), sink.input("rows"))
    stream_builder.expose(slow.output("out"))
"""

RECORDER_STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.camera import Sink


@stream
def recorder(stream_builder: StreamBuilder) -> None:
    sink = stream_builder.add(Sink, name="recorder")
    stream_builder.connect(stream_builder.remote_output("camera/slow/out"), sink.input("rows"))
"""


def _graph(runtime, stream: str) -> dict:
    import json

    return json.loads(runtime.cli("graph", "--stream", stream, check=True).stdout)["streams"][0]


def _path(entry: dict, to: str) -> dict | None:
    return next((p for p in entry["paths"] if p["to"] == to and p["bags"] >= 20), None)


@pytest.mark.slow
@pytest.mark.parametrize("path", [BUILT], indirect=True)
def test_a_slow_node_shows_on_its_path_not_on_its_links_across_two_streams_and_in_top(
        path, runtime, project_venv, tmp_path, monkeypatch):
    import json

    from harness import make_project, wait_for

    nodes = {"nodes/__init__.py": "", "nodes/camera.py": CAMERA_NODES}
    camera = make_project(tmp_path / "camera", project_venv, {"stream.py": CAMERA_STREAM, **nodes})
    recorder = make_project(tmp_path / "recorder", project_venv, {"stream.py": RECORDER_STREAM, **nodes})
    runtime.cli("run", "-d", cwd=camera, check=True)
    runtime.cli("run", "-d", cwd=recorder, check=True)
    here = wait_for(lambda: (g := _graph(runtime, "camera")) and _path(g, "sink/rows") and g, timeout=60,
                    what="20 bags along camera's path")
    there = wait_for(lambda: (g := _graph(runtime, "recorder")) and _path(g, "recorder/rows") and g, timeout=60,
                     what="20 bags along the path into the recorder stream")

    # the node that sleeps 10 ms per bag makes the path through it >= 10 ms ...
    local = _path(here, "sink/rows")
    assert local["from"] == "source/frames" and local["through"] == ["slow"]
    assert local["p50_us"] >= 10_000 and local["p99_us"] >= local["p50_us"] and local["max_us"] >= local["p99_us"]
    assert local["since_start"]["bags"] >= local["bags"]
    # ... while the links around it stay fast: bags wait little before they are read (the node's 10 ms is
    # counted in the path, never in a link: each link's p50 is under half the path's, in this same run)
    for link in here["links"]:
        assert link["latency"]["bags"] >= 20, link
        assert link["latency"]["p50_us"] < local["p50_us"] / 2, (link, local)
        assert link["latency_since_start"]["bags"] >= link["latency"]["bags"]
    # a path across streams (remote_output) keeps the origin
    remote = _path(there, "recorder/rows")
    assert remote["from"] == "camera/source/frames" and remote["through"] == ["camera/slow"]
    assert remote["p50_us"] >= 10_000
    (link,) = there["links"]
    assert link["latency"]["p50_us"] < remote["p50_us"] / 2, (link, remote)

    # tatolab top --json and --once: a row per node, the slowest paths below
    top = json.loads(runtime.cli("top", "--json", check=True).stdout)
    rows = {(r["stream"], r["node"]): r for r in top["nodes"]}
    assert set(rows) == {("camera", "source"), ("camera", "slow"), ("camera", "sink"), ("recorder", "recorder")}
    assert rows[("camera", "source")]["out_per_s"] > 5 and rows[("camera", "source")]["input"] is None
    assert rows[("camera", "slow")]["in_per_s"] > 5 and rows[("camera", "slow")]["age_p50_us"] < local["p50_us"] / 2
    assert rows[("camera", "slow")]["input"] == "source/frames->slow/frames"
    assert rows[("camera", "sink")]["cpu_percent"] is not None and rows[("camera", "sink")]["memory_bytes"] > 0
    # each node's own process() time: the 10 ms is the slow node's, not the sink's
    assert rows[("camera", "slow")]["proc_p50_us"] >= 10_000 and rows[("camera", "slow")]["proc_p99_us"] >= 10_000
    assert rows[("camera", "sink")]["proc_p50_us"] < 10_000 and rows[("camera", "slow")]["wait_p50_us"] is not None
    slow_node = next(n for n in here["nodes"] if n["name"] == "slow")
    assert slow_node["process"]["p50_us"] >= 10_000 and slow_node["wait"]["bags"] >= 20
    assert {(p["stream"], p["to"]) for p in top["paths"]} == {("camera", "sink/rows"), ("recorder", "recorder/rows")}
    assert all(p["p50_us"] >= 10_000 for p in top["paths"])
    once = runtime.cli("top", "--once", "--stream", "camera", check=True).stdout
    assert "slowest paths" in once and "source/frames" in once and "sink/rows" in once, once
    assert "PROC p50 ms" in once and "PROC p99 ms" in once and "WAIT p50 ms" in once, once
    shown = [line.split() for line in once.splitlines() if line.split()[:1] == ["camera"]]
    assert {row[1] for row in shown} >= {"source", "slow", "sink"}, once
    slowest = json.loads(runtime.cli("top", "--json", "--sort", "name", "--paths", "1", check=True).stdout)
    assert [r["node"] for r in slowest["nodes"]] == ["recorder", "sink", "slow", "source"]
    assert len(slowest["paths"]) == 1
    bad = runtime.cli("top", "--once", "--stream", "nope")
    assert bad.returncode == 1 and "no stream named nope" in bad.stderr
    # the operation behind the MCP tool slowest_paths: what is late, and where
    from tatolab._control.client import Client

    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime.env["XDG_RUNTIME_DIR"])
    late = Client().request("slowest_paths", limit=5)["paths"]
    assert {(p["stream"], p["to"]) for p in late} == {("camera", "sink/rows"), ("recorder", "recorder/rows")}
    camera_path = next(p for p in late if p["stream"] == "camera")
    assert camera_path["slowest_link"]["key"] in {link["key"] for link in here["links"]}
    assert camera_path["slowest_node"]["node"] == "slow" and camera_path["slowest_node"]["process_p50_us"] >= 10_000


def test_slowest_paths_names_the_slowest_link_along_each_path():
    from tatolab._runtime.views.timing import slowest

    def lat(p50, p99, bags=100):
        return {"p50_us": p50, "p90_us": p99, "p99_us": p99, "max_us": p99, "bags": bags}

    def link(src, dst, p50, p99):
        s, d = src.split("/"), dst.split("/")
        return {"key": f"{src}->{dst}", "from": {"node": s[0], "port": s[1]}, "to": {"node": d[0], "port": d[1]},
                "latency": lat(p50, p99)}

    graph = {"streams": [
        {"name": "cam", "links": [link("camera/video", "detector/video", 40, 90),
                                  link("detector/boxes", "recorder/boxes", 900, 30_000),
                                  link("other/x", "recorder/extra", 5_000_000, 9_000_000)],
         "paths": [{"from": "camera/video", "to": "recorder/boxes", "through": ["detector"], **lat(12_000, 45_000)},
                   {"from": "other/x", "to": "recorder/extra", "through": [], **lat(1, 2, bags=0)}]},
        {"name": "quiet", "links": [], "paths": [
            {"from": "a/b", "to": "c/d", "through": [], **lat(100, 200)}]},
    ]}
    graph["streams"][0]["nodes"] = [{"name": "detector", "process": lat(11_000, 40_000), "wait": lat(3, 9)},
                                    {"name": "recorder", "process": lat(20, 90), "wait": lat(2, 4)},
                                    {"name": "camera", "process": lat(90_000, 90_000), "wait": None}]
    got = slowest(graph)
    assert [(p["stream"], p["to"]) for p in got] == [("cam", "recorder/boxes"), ("quiet", "c/d")]  # no bags: left out
    assert got[0]["slowest_link"] == {"key": "detector/boxes->recorder/boxes", "p50_us": 900, "p99_us": 30_000}
    # the node along the path whose calls took longest (the source, not on the path, is not counted)
    assert got[0]["slowest_node"] == {"node": "detector", "process_p50_us": 11_000, "process_p99_us": 40_000,
                                      "wait_p50_us": 3}
    assert got[1]["slowest_link"] is None and got[1]["slowest_node"] is None
    assert slowest(graph, limit=1) == got[:1]
