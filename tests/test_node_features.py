"""What nodes can do, end to end in a real runtime: manual execution, fan-in, big bags,
typed reads, and bags that cannot be encoded."""

from __future__ import annotations

import signal

import pytest

from harness import make_project, read_jsonl, wait_for

NODES = """
import fcntl, hashlib, json, os, threading, time
from dataclasses import dataclass
from datetime import datetime
from tatolab.stream import node


@dataclass
class TickerConfig:
    label: str
    every_ms: int = 5


@node(execution="manual")
class Ticker:
    \"\"\"Drives itself from a thread it owns.\"\"\"

    @node.output()
    def ticks(self) -> dict: ...

    def __init__(self, config: TickerConfig) -> None:
        self.label = config.label
        self.every = config.every_ms / 1000
        self.running = True

    def setup(self, ctx) -> None:
        def loop():
            n = 0
            # Both tickers publish under one file lock and number their bags from one shared
            # counter, so the counter is the exact order in which bags reached their rings.
            with open("ticks.seq", "a+") as seq_file:
                while self.running:
                    fcntl.flock(seq_file, fcntl.LOCK_EX)
                    seq_file.seek(0)
                    seq = int(seq_file.read() or 0)
                    ctx.outputs.write("ticks", {"label": self.label, "n": n, "sent_ns": seq})
                    seq_file.seek(0)
                    seq_file.truncate()
                    seq_file.write(str(seq + 1))
                    seq_file.flush()
                    fcntl.flock(seq_file, fcntl.LOCK_UN)
                    n += 1
                    time.sleep(self.every)
        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def teardown(self, ctx) -> None:
        self.running = False
        self.thread.join()


@dataclass
class Tick:
    label: str
    n: int
    sent_ns: int


@node
class Merger:
    @node.input(delivery_profile="ordered")
    def ticks(self) -> dict: ...

    def __init__(self) -> None:
        self.file = open("merged.jsonl", "a", buffering=1)

    def process(self, ctx) -> None:
        tick = ctx.inputs.read("ticks", into=Tick)
        if tick is not None:
            self.file.write(json.dumps({"label": tick.label, "n": tick.n, "sent_ns": tick.sent_ns}) + "\\n")


@node(execution="continuous", interval_ms=50)
class BigBags:
    @node.output()
    def blobs(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        blob = os.urandom(1_000_000 + self.n)
        ctx.outputs.write("blobs", {"n": self.n, "blob": blob, "sha": hashlib.sha256(blob).hexdigest()})
        self.n += 1


@node
class BlobCheck:
    @node.input(delivery_profile="ordered")
    def blobs(self) -> dict: ...

    def __init__(self) -> None:
        self.file = open("blobs.jsonl", "a", buffering=1)

    def process(self, ctx) -> None:
        bag = ctx.inputs.read("blobs")
        if bag is not None:
            ok = hashlib.sha256(bag["blob"]).hexdigest() == bag["sha"]
            self.file.write(json.dumps({"n": bag["n"], "size": len(bag["blob"]), "intact": ok}) + "\\n")


@node(execution="continuous", interval_ms=200)
class BadWriter:
    @node.output()
    def events(self) -> dict: ...

    def process(self, ctx) -> None:
        ctx.outputs.write("events", {"meta": {"when": datetime(2026, 1, 1)}})
"""

STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.features import BadWriter, BigBags, BlobCheck, Merger, Ticker


@stream
def features(stream_builder: StreamBuilder) -> None:
    left = stream_builder.add(Ticker, config={"label": "left"}, name="left")
    right = stream_builder.add(Ticker, config={"label": "right", "every_ms": 7}, name="right")
    merger = stream_builder.add(Merger)
    stream_builder.connect(left.output("ticks"), merger.input("ticks"))
    stream_builder.connect(right.output("ticks"), merger.input("ticks"))
    big = stream_builder.add(BigBags)
    check = stream_builder.add(BlobCheck)
    stream_builder.connect(big.output("blobs"), check.input("blobs"))
    stream_builder.add(BadWriter)
"""


@pytest.mark.slow
def test_manual_nodes_fan_in_big_bags_and_unencodable_bags(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "features", project_venv, {
        "stream.py": STREAM, "nodes/__init__.py": "", "nodes/features.py": NODES,
    })
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(lambda: len(read_jsonl(project / "merged.jsonl")) >= 200, timeout=30, what="merged ticks")
        wait_for(lambda: len(read_jsonl(project / "blobs.jsonl")) >= 5, timeout=30, what="big bags")
    finally:
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=20)

    merged = read_jsonl(project / "merged.jsonl")
    # fan-in: both links arrive, each in its own order, merged by arrival time
    for label in ("left", "right"):
        ns = [row["n"] for row in merged if row["label"] == label]
        assert ns and ns == list(range(len(ns))), label
    # ...and the input reads them in arrival order: the two interleave, and the shared
    # publish counter (in sent_ns) only ever goes up, however busy the machine is
    assert {row["label"] for row in merged[:40]} == {"left", "right"}
    published = [row["sent_ns"] for row in merged]
    assert published == sorted(published) and len(set(published)) == len(published)

    # bags far larger than a slot arrive whole
    blobs = read_jsonl(project / "blobs.jsonl")
    assert all(row["intact"] for row in blobs)
    assert blobs[0]["size"] == 1_000_000

    # a bag that cannot be encoded is refused at the writer, naming node, port and key
    assert "badwriter" in out and "events" in out and 'bag["meta"]["when"]' in out and "datetime" in out


@pytest.mark.slow
def test_what_a_node_says_while_stopping_reaches_the_log(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "bye", project_venv, {
        "stream.py": """
            from tatolab.stream import StreamBuilder, stream
            from nodes.bye import Bye


            @stream
            def bye(stream_builder: StreamBuilder) -> None:
                stream_builder.add(Bye)
        """,
        "nodes/__init__.py": "",
        "nodes/bye.py": """
            from tatolab.stream import node


            @node(execution="continuous", interval_ms=20)
            class Bye:
                @node.output()
                def out(self) -> dict: ...

                def process(self, ctx) -> None:
                    ctx.outputs.write("out", {"ok": True})

                def teardown(self, ctx) -> None:
                    ctx.log.info("teardown ran", flushed=True)
                    print("goodbye from teardown", flush=True)
        """,
    })
    run = runtime.popen_cli("run", cwd=project)
    log = project / ".streamlib" / "logs" / "bye.jsonl"
    wait_for(lambda: runtime.stream_names() == ["bye"] and runtime.node_pids(), what="the node to run")
    run.send_signal(signal.SIGINT)
    run.communicate(timeout=20)
    wait_for(lambda: runtime.stream_names() == [], what="the stream to unload")
    messages = [record["message"] for record in read_jsonl(log)]
    assert "teardown ran" in messages
    assert "goodbye from teardown" in messages
