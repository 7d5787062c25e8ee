"""Seeing inside: `tatolab graph` and `tatolab tap` on real streams."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from harness import Runtime, make_project, read_jsonl, wait_for
from nodes_fixture import COUNTER, SINK

from tatolab._runtime.ops.inspect import describe_bag, preview

SLOW_COUNTER = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=50)
class SlowCounter:
    @node.output()
    def counts(self) -> dict: ...

    @node.output()
    def raw(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        ctx.outputs.write("counts", {"n": self.n, "sent_ns": ctx.time})
        ctx.outputs.write("raw", {"n": self.n, "blob": b"\\x00\\x01" * 40})
        self.n += 1
"""

GRAPH_STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.slow import SlowCounter
from nodes.sinks import NewestSink, OrderedSink


@stream
def watched(stream_builder: StreamBuilder) -> None:
    fast = stream_builder.add(Counter, name="fast")
    slow = stream_builder.add(SlowCounter, name="slow")
    lagging = stream_builder.add(NewestSink, name="lagging", config={"path": "lagging.jsonl", "delay_ms": 100})
    steady = stream_builder.add(OrderedSink, name="steady", config={"path": "steady.jsonl"})
    quiet = stream_builder.add(Counter, name="quiet", config={"limit": 0})
    stream_builder.connect(fast.output("counts"), lagging.input("rows"))
    stream_builder.connect(slow.output("counts"), steady.input("rows"))
    stream_builder.expose(slow.output("counts"), "private")
"""


def watched_files() -> dict[str, str]:
    return {
        "stream.py": GRAPH_STREAM,
        "nodes/__init__.py": "",
        "nodes/counter.py": COUNTER,
        "nodes/slow.py": SLOW_COUNTER,
        "nodes/sinks.py": SINK,
    }


def graph(runtime: Runtime, stream: str | None = None) -> dict:
    args = ["graph"] + (["--stream", stream] if stream else [])
    return json.loads(runtime.cli(*args, check=True).stdout)


def link(g: dict, to_node: str) -> dict:
    return next(entry for entry in g["streams"][0]["links"] if entry["to"]["node"] == to_node)


def node(g: dict, name: str) -> dict:
    return next(entry for entry in g["streams"][0]["nodes"] if entry["name"] == name)


def start(runtime: Runtime, project) -> subprocess.Popen:
    run = runtime.popen_cli("run", cwd=project)
    wait_for(lambda: len(read_jsonl(project / "steady.jsonl")) >= 5, timeout=30, what="bags at the steady sink")
    return run


def stop(run: subprocess.Popen) -> None:
    run.send_signal(signal.SIGINT)
    run.communicate(timeout=20)


@pytest.mark.slow
def test_graph_shows_drops_at_a_slow_newest_reader_and_none_at_an_ordered_one(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "watched", project_venv, watched_files())
    run = start(runtime, project)
    try:
        wait_for(lambda: link(graph(runtime, "watched"), "lagging")["counters"]["dropped"] > 20,
                 timeout=30, what="drops at the lagging newest reader")
        g = graph(runtime, "watched")
    finally:
        stop(run)
    assert g["version"] == 1
    assert g["runtime"]["name"] and g["runtime"]["version"]
    stream = g["streams"][0]
    assert stream["name"] == "watched" and stream["state"] == "attached" and stream["project"] == str(project)

    lagging = link(g, "lagging")
    assert lagging["state"] == "wired" and lagging["delivery_profile"] == "newest"
    assert lagging["from"] == {"node": "fast", "port": "counts"}
    counters = lagging["counters"]
    assert counters["written"] > counters["read"] + counters["dropped"] - 2  # the newest reader skips
    assert counters["dropped"] > 20 and counters["last_bag_ns"] and counters["last_read_ns"]

    steady = link(g, "steady")
    assert steady["delivery_profile"] == "ordered"
    assert steady["counters"]["dropped"] == 0
    assert steady["counters"]["read"] >= steady["counters"]["written"] - 2

    fast = node(g, "fast")
    assert fast["kind"] == "nodes.counter:Counter" and fast["state"] == "running"
    assert fast["pid"] > 0 and fast["restarts"] == 0 and fast["last_error"] is None
    assert fast["memory_bytes"] > 1_000_000 and fast["cpu_percent"] is not None
    assert fast["watchdog_ms"] == 10_000 and fast["hung"] is False
    assert node(g, "slow")["outputs"][0]["exposure"] == "private"
    assert fast["outputs"][0]["exposure"] == "internal"
    # the reading node's own entry shows what its input lost (the docs: "in the reading node's metrics")
    assert node(g, "lagging")["inputs"] == [
        {"port": "rows", "delivery_profile": "newest", "read": counters["read"], "dropped": counters["dropped"],
         "bad": 0}
    ]


@pytest.mark.slow
def test_graph_counters_are_live(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "watched", project_venv, watched_files())
    run = start(runtime, project)
    try:
        first = link(graph(runtime), "steady")["counters"]
        second = wait_for(
            lambda: (c := link(graph(runtime), "steady")["counters"])["written"] > first["written"] and c,
            what="the written counter to advance",
        )
        assert second["read"] > first["read"]
        assert second["last_bag_ns"] > first["last_bag_ns"]
    finally:
        stop(run)
    unknown = runtime.cli("graph", "--stream", "nope")
    assert unknown.returncode == 1 and "no stream named nope" in unknown.stderr


@pytest.mark.slow
def test_tap_returns_5_bags_without_slowing_the_source(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "watched", project_venv, watched_files())
    run = start(runtime, project)

    def written() -> tuple[int, int]:
        g = graph(runtime)
        return link(g, "lagging")["counters"]["written"], g["now_ns"]

    rates = []  # (before, during) the tap, for each try
    try:
        # A tap that slowed the source would slow it every time; a busy machine slows it now and
        # then (the tap command itself needs a CPU to start). So up to three tries, one must show it.
        for _ in range(3):
            w0, t0 = written()
            wait_for(lambda: written()[0] > w0 + 100, timeout=30, what="the fast source to write 100 bags")
            w1, t1 = written()
            before = (w1 - w0) / ((t1 - t0) / 1e9)
            tapped = runtime.cli("tap", "watched/fast/counts", "--count", "5", "--timeout", "30", check=True)
            w2, t2 = written()
            rates.append((before, (w2 - w1) / ((t2 - t1) / 1e9)))
            if rates[-1][1] > 0.5 * before:
                break
        after = graph(runtime)
    finally:
        stop(run)
    bags = [json.loads(line) for line in tapped.stdout.splitlines()]
    assert len(bags) == 5
    assert [b["n"] for b in bags] == [1, 2, 3, 4, 5]
    counts = [b["bag"]["n"] for b in bags]
    assert counts == sorted(counts) and len(set(counts)) == 5
    assert all(b["size"] > 0 and b["ts_ns"] > 0 for b in bags)
    assert "got 5 of 5 bags from watched/fast/counts" in tapped.stderr
    # The source's own counter kept its rate while the tap read (generous: the machine is shared).
    assert any(during > 0.5 * before for before, during in rates), rates
    # The tap's reader record was released when it ended.
    assert node(after, "fast")["outputs"][0]["taps"] == []


@pytest.mark.slow
def test_tap_shows_bytes_as_length_and_hex_and_takes_the_full_address(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "watched", project_venv, watched_files())
    run = start(runtime, project)
    try:
        machine = graph(runtime)["runtime"]["name"]
        tapped = runtime.cli("tap", f"{machine}/watched/slow/raw", "--count", "2", "--profile", "ordered",
                             "--timeout", "30", check=True)
        elsewhere = runtime.cli("tap", "other-machine/watched/slow/counts", "--count", "1")
        missing = runtime.cli("tap", "watched/slow/nope", "--count", "1")
        an_input = runtime.cli("tap", "watched/steady/rows", "--count", "1")
    finally:
        stop(run)
    bags = [json.loads(line) for line in tapped.stdout.splitlines()]
    assert len(bags) == 2
    assert bags[1]["bag"]["n"] == bags[0]["bag"]["n"] + 1  # ordered: consecutive
    assert bags[0]["bag"]["blob"] == {"$bytes": 80, "hex": "0001" * 8}
    assert elsewhere.returncode == 1 and "run `tatolab tap watched/slow/counts` on other-machine" in elsewhere.stderr
    assert missing.returncode == 1 and "has no output slow/nope" in missing.stderr and "watched/slow/counts" in missing.stderr
    assert an_input.returncode == 1
    assert an_input.stderr.startswith("error: rows of node steady of stream watched is an input, not an output: an "
                                      "address names an output; its outputs: "), an_input.stderr


@pytest.mark.slow
def test_tapping_an_output_nothing_writes_says_so_after_the_timeout(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "watched", project_venv, watched_files())
    run = start(runtime, project)
    try:
        tapped = runtime.cli("tap", "watched/quiet/counts", "--count", "3", "--timeout", "1")
        after = graph(runtime)
    finally:
        stop(run)
    assert tapped.returncode == 1
    assert tapped.stdout == ""
    assert "got 0 of 3 bags from watched/quiet/counts" in tapped.stderr
    assert "nothing was written to it" in tapped.stderr
    assert node(after, "quiet")["outputs"][0]["taps"] == []


@pytest.mark.slow
def test_a_tap_cut_short_by_its_client_releases_its_reader(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "watched", project_venv, watched_files())
    run = start(runtime, project)
    try:
        tap = runtime.popen_cli("tap", "watched/fast/counts", "--timeout", "0")
        tap.stdout.readline()  # one bag arrived: the tap is reading
        assert node(graph(runtime), "fast")["outputs"][0]["taps"] != []
        tap.kill()
        tap.communicate(timeout=10)
        wait_for(lambda: node(graph(runtime), "fast")["outputs"][0]["taps"] == [], what="the tap's reader to go")
    finally:
        stop(run)


def test_bag_preview_shows_bytes_short_and_keeps_the_rest():
    assert preview({"a": b"\xff" * 100, "b": [1, 2], "c": "x"}) == {
        "a": {"$bytes": 100, "hex": "ff" * 16}, "b": [1, 2], "c": "x"}
    long = preview(list(range(100)))
    assert long[-1] == {"$more": 68} and len(long) == 33
    assert describe_bag(b"\xc1 not msgpack") == {"$bytes": 13, "hex": b"\xc1 not msgpack".hex()}
