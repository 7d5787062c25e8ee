"""Node modules the integration tests put into their projects."""

import textwrap

COUNTER = """
import os
from dataclasses import dataclass
from tatolab.stream import node


@dataclass
class CounterConfig:
    interval_ms: int = 10
    limit: int = -1
    stop_file: str = ""  # once this file exists, the counter writes no more


@node(execution="continuous", interval_ms=5)
class Counter:
    @node.output()
    def counts(self) -> dict: ...

    def __init__(self, config: CounterConfig) -> None:
        self.limit = config.limit
        self.stop_file = config.stop_file
        self.n = 0

    def process(self, ctx) -> None:
        if self.limit >= 0 and self.n >= self.limit:
            return
        if self.stop_file and os.path.exists(self.stop_file):
            return
        ctx.outputs.write("counts", {"n": self.n, "pid": __import__("os").getpid(), "sent_ns": ctx.time})
        self.n += 1
"""

PASS_THROUGH = """
from tatolab.stream import node


@node
class Doubler:
    @node.input(delivery_profile="ordered")
    def numbers(self) -> dict: ...

    @node.output()
    def doubled(self) -> dict: ...

    def process(self, ctx) -> None:
        bag = ctx.inputs.read("numbers")
        if bag is not None:
            bag["doubled"] = bag["n"] * 2
            ctx.outputs.write("doubled", bag)
"""

SINK = """
import json, os, time
from dataclasses import dataclass
from tatolab.stream import node


@dataclass
class SinkConfig:
    path: str
    delay_ms: int = 0


@node
class OrderedSink:
    @node.input(delivery_profile="ordered")
    def rows(self) -> dict: ...

    def __init__(self, config: SinkConfig) -> None:
        self.file = open(config.path, "a", buffering=1)
        self.delay = config.delay_ms / 1000

    def process(self, ctx) -> None:
        bag = ctx.inputs.read("rows")
        if bag is not None:
            bag["reader_pid"] = os.getpid()
            self.file.write(json.dumps(bag) + "\\n")
            if self.delay:
                time.sleep(self.delay)


@node
class NewestSink:
    @node.input(delivery_profile="newest")
    def rows(self) -> dict: ...

    def __init__(self, config: SinkConfig) -> None:
        self.file = open(config.path, "a", buffering=1)
        self.delay = config.delay_ms / 1000

    def process(self, ctx) -> None:
        bag = ctx.inputs.read("rows")
        if bag is not None:
            bag["read_ns"] = ctx.time
            self.file.write(json.dumps(bag) + "\\n")
            time.sleep(self.delay)
"""

PIPELINE = """
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.doubler import Doubler
from nodes.sinks import OrderedSink


@stream
def pipeline(stream_builder: StreamBuilder) -> None:
    counter = stream_builder.add(Counter, config={"limit": LIMIT})
    doubler = stream_builder.add(Doubler)
    sink = stream_builder.add(OrderedSink, config={"path": "out.jsonl"})
    stream_builder.connect(counter.output("counts"), doubler.input("numbers"))
    stream_builder.connect(doubler.output("doubled"), sink.input("rows"))
"""


def pipeline_files(limit: int = -1) -> dict[str, str]:
    return {
        "stream.py": PIPELINE.replace("LIMIT", str(limit)),
        "nodes/__init__.py": "",
        "nodes/counter.py": COUNTER,
        "nodes/doubler.py": PASS_THROUGH,
        "nodes/sinks.py": SINK,
    }

# A pass-through that tags each bag with VERSION: `tatolab dev` tests and bench/reload.py edit it.
TAGGER = """
from tatolab.stream import node

VERSION = {version}


@node
class Tagger:
    @node.input(delivery_profile="ordered")
    def numbers(self) -> dict: ...

    @node.output()
    def tagged(self) -> dict: ...

    def process(self, ctx) -> None:
        bag = ctx.inputs.read("numbers")
        if bag is not None:
            bag["v"] = VERSION
            ctx.outputs.write("tagged", bag)
"""

# A three-node stream (source, pass-through, sink) as light as a stream gets: nodes/tiny.py of the
# many-loads test and bench/loads.py, with tiny_stream's stream.py.
TINY_NODES = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=1000)
class Src:
    @node.output()
    def out(self) -> dict: ...

    def process(self, ctx) -> None:
        ctx.outputs.write("out", {"n": 1})


@node
class Mid:
    @node.input(delivery_profile="newest")
    def inp(self) -> dict: ...

    @node.output()
    def out(self) -> dict: ...

    def process(self, ctx) -> None:
        bag = ctx.inputs.read("inp")
        if bag is not None:
            ctx.outputs.write("out", bag)


@node
class Sink:
    @node.input(delivery_profile="newest")
    def inp(self) -> dict: ...

    def process(self, ctx) -> None:
        ctx.inputs.read("inp")
"""


def tiny_stream(name: str) -> str:
    return (
        "from tatolab.stream import StreamBuilder, stream\n"
        "from nodes.tiny import Mid, Sink, Src\n\n\n"
        f"@stream\ndef {name}(b: StreamBuilder) -> None:\n"
        "    src, mid, sink = b.add(Src), b.add(Mid), b.add(Sink)\n"
        "    b.connect(src.output('out'), mid.input('inp'))\n"
        "    b.connect(mid.output('out'), sink.input('inp'))\n"
    )


# A source that writes from a thread of its own (execution="manual"): setup starts the thread, teardown
# sets ``self.stopping`` and joins it; threaded_source fills in the module's head and run()'s body.
THREADED_SOURCE = '''
import threading
{head}


@node(execution="manual")
class {cls}:
    """{doc}"""

    @node.output()
    def {output}(self) -> dict: ...

    def setup(self, ctx) -> None:
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(ctx,), daemon=True)
        self.thread.start()

    def teardown(self, ctx) -> None:
        self.stopping.set()
        self.thread.join(2)

    def run(self, ctx) -> None:
{run}
'''


def threaded_source(cls: str, output: str, doc: str, head: str, run: str) -> str:
    """nodes/<x>.py of a source node ``cls`` writing ``output`` from its thread: ``head`` holds the module's
    imports (``node`` among them) and constants, ``run`` the loop (it ends once ``self.stopping`` is set)."""
    body = textwrap.indent(textwrap.dedent(run).strip("\n"), " " * 8)
    return THREADED_SOURCE.format(cls=cls, output=output, doc=doc, head=textwrap.dedent(head).strip("\n"), run=body)
