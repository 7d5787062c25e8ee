"""The testing kit: a node run in the test's own process, no runtime, through the node host's own
per-bag engine (ports.py): ``run_node`` and ``FakeContext`` (public from ``tatolab.stream`` and
``tatolab.testing``; README: "Testing a node").

The bags given for an input port are its link's ring, in memory: an ``ordered`` port delivers every
one in order, a ``newest`` port the latest (the ones before it count as dropped, as bags replaced
on a ring before the node read them). What the node writes is encoded as on a link and decoded
back, per output port, in order; its log records and reports are kept as the runtime would log them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

from tatolab import _bags, _records
from tatolab._errors import GraphError
from tatolab._host.ports import InputPort, OutputPort, ShapedInputPort
from tatolab._sdk.context import Inputs, NodeLogger, Outputs, RuntimeContextLimitedAccess
from tatolab._sdk.nodes import create, node_spec, plain_config

MEMORY_LINK = "test->{node}/{port}"  # the one link each input port is given, as ctx.inputs.link names it


class _MemoryReader:
    """A link's reader over bags in memory, as a ring reader reads its ring."""

    def __init__(self) -> None:
        self.bags: deque[tuple[bytes, int]] = deque()
        self.dropped = 0
        self.bad = 0

    def add(self, payload: bytes, published: int) -> None:
        self.bags.append((payload, published))

    def read(self) -> tuple[bytes, int] | None:  # newest: the latest, the ones before it never seen
        if not self.bags:
            return None
        self.dropped += len(self.bags) - 1
        latest = self.bags.pop()
        self.bags.clear()
        return latest

    def read_many(self) -> list[tuple[bytes, int]]:  # ordered: every bag not read yet
        run = list(self.bags)
        self.bags.clear()
        return run

    def discard(self, n: int = 1) -> None:
        self.dropped += n

    def count_bad(self) -> None:
        self.bad += 1


class _MemoryWriter:
    """An output port's link, in memory: each bag as the node wrote it, encoded."""

    grown = False

    def __init__(self, written: Callable[[bytes], None]) -> None:
        self._written = written

    def write(self, payload: bytes) -> int:
        self._written(bytes(payload))
        return len(payload)

    def relax(self) -> bool:
        return False

    @contextlib.contextmanager
    def loan(self, nbytes: int) -> Iterator[memoryview]:
        buf = bytearray(nbytes)
        with memoryview(buf) as view:
            yield view
        self._written(bytes(buf))


@dataclass
class NodeRun:
    """What a node did in ``run_node``: the bags it wrote (per output port, in order, as a reader
    gets them), its log records (as ``tatolab logs --json`` shows them: ``level``, ``message``,
    ``fields``...), each ``ctx.report(...)`` it made, and those merged as ``tatolab graph`` shows
    them under its ``metrics``."""

    outputs: dict[str, list[dict[str, Any]]]
    logs: list[dict[str, Any]] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)

    def messages(self, level: str | None = None) -> list[str]:
        """The log's messages, of one level or all."""
        return [r["message"] for r in self.logs if level is None or r["level"] == level]


class FakeContext(RuntimeContextLimitedAccess):
    """The context a node gets from the runtime, for calling its methods directly in a test:
    ``ctx = FakeContext(MyNode, inputs={"rows": [{"n": 1}]})``, then ``node.process(ctx)``, and
    ``ctx.run`` holds what it wrote, logged and reported (a ``NodeRun``). ``ctx.feed(port, bag)``
    gives an input port another bag; ``ctx.stopping.set()`` stops an ``execution="thread"`` node's
    ``run``. ``on_write(port, bag)`` is called with each bag as it is written (before the next).
    ``links={"tracks": ["a/packets->sink/tracks", ...]}`` wires several links into a port (fan-in:
    ``feed(port, bag, link=...)`` says which one a bag comes by; ``add_link`` wires one more later);
    each port has one link otherwise, ``test-><node>/<port>``."""

    def __init__(self, node_class: type, *, inputs: Mapping[str, list[Any]] | None = None, node: str | None = None,
                 stream: str = "test", on_write: Callable[[str, dict[str, Any]], None] | None = None,
                 links: Mapping[str, list[str]] | None = None) -> None:
        spec = node_spec(node_class)
        name = node or spec.class_name
        self.run = run = NodeRun(outputs={port.name: [] for port in spec.outputs})
        self._changed = threading.Condition()
        self._readers: dict[str, dict[str, _MemoryReader]] = {}  # port -> link key -> its reader
        self._published = 0  # the publish time each bag gets, across links: the order bags are fed in
        ports: dict[str, InputPort[_MemoryReader]] = {
            port.name: InputPort[_MemoryReader](port.name, port.delivery_profile or "ordered") if port.audio is None
            else ShapedInputPort[_MemoryReader](port.name, port.delivery_profile or "ordered", port.audio)  # windows cut as the host does
            for port in spec.inputs
        }
        self._ports = ports
        self.origin = [0, 0]  # as the node host's: what a call writes inherits the oldest origin it read
        for port_name, in_port in ports.items():
            in_port.origin = self.origin
            self._readers[port_name] = {}
        self.node = name  # (before add_link names it; the base class sets it again)
        for port_name in ports:
            for key in (links or {}).get(port_name) or [MEMORY_LINK.format(node=name, port=port_name)]:
                self.add_link(port_name, key)

        def emit(level: str, message: str, fields: dict[str, Any]) -> None:
            with self._changed:
                run.logs.append(_records.make_record(message, level=level, stream=stream, node=name, fields=fields))
                self._changed.notify_all()

        def report(values: dict[str, Any]) -> None:
            with self._changed:
                run.reports.append(dict(values))
                run.metrics.update(values)
                self._changed.notify_all()

        def writer(port: str) -> _MemoryWriter:
            def written(payload: bytes) -> None:
                bag = _bags.decode(payload)
                with self._changed:
                    run.outputs[port].append(bag)
                    self._changed.notify_all()
                if on_write is not None:
                    on_write(port, bag)
            return _MemoryWriter(written)

        outputs = {port.name: OutputPort(port.name, writer(port.name)) for port in spec.outputs}
        super().__init__(stream=stream, node=name, inputs=Inputs(name, ports), outputs=Outputs(name, outputs),
                         log=NodeLogger(emit), report=report)
        unknown = [port for port in (links or {}) if port not in ports]
        if unknown:
            self.inputs._port(unknown[0])  # raises the runtime's own error, naming the node and its inputs
        for given, bags in (inputs or {}).items():
            for bag in bags:
                self.feed(given, bag)

    def add_link(self, port: str, key: str) -> None:
        """Wire one more link into input ``port`` (fan-in), named ``key`` as `tatolab graph` names links."""
        if port not in self._readers:
            self.inputs._port(port)  # raises the runtime's own error, naming the node and its inputs
        reader = self._readers[port][key] = _MemoryReader()
        self._ports[port].add_link(key, reader)

    def feed(self, port: str, bag: Any, link: str | None = None) -> None:
        """Give input ``port`` one more bag (a dict, or a VideoFrame or an AudioBlock, as ctx.outputs.write takes),
        by ``link`` (the port's first link when not given)."""
        if port not in self._readers:
            self.inputs._port(port)  # raises the runtime's own error, naming the node and its inputs
        readers = self._readers[port]
        if link is not None and link not in readers:
            raise GraphError(f"node {self.node}: input {port!r} has no link {link!r}; its links are: "
                             f"{', '.join(readers) or 'none'} (FakeContext(links=...) or add_link wires one)")
        if type(bag) is not dict:
            as_bag = getattr(bag, "_tatolab_bag", None)
            if as_bag is not None:
                bag = as_bag()
        payload = _bags.encode(bag, self.node, port)
        self._published += 1
        readers[link if link is not None else next(iter(readers))].add(payload, self._published)

    def fill(self) -> bool:
        """Deliver what waits on the input ports, as the node host does before a call: True when
        a bag arrived that the node has not been offered."""
        arrived = False
        for port in self._ports.values():
            if port.fill():
                arrived = True
        return arrived

    def wait_until(self, done: Callable[[NodeRun], bool], timeout: float, still: Callable[[], bool]) -> None:
        """Until ``done(run)``, ``still()`` is False, or ``timeout`` seconds: woken by each write,
        log record and report (and every 10 ms, for what happens elsewhere)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while still() and not done(self.run) and time.monotonic() < deadline:
                self._changed.wait(0.01)


def run_node(node_class: type, config: Any = None, inputs: Mapping[str, list[Any]] | None = None, *,
             node: str | None = None, stream: str = "test", ticks: int = 1,
             until: Callable[[NodeRun], bool] | None = None, timeout: float = 60.0,
             on_write: Callable[[str, dict[str, Any]], None] | None = None) -> NodeRun:
    """Run a node in this process, no runtime, as the node host runs it, and say what it did.

    The node is made from ``config`` (checked as ``add(...)`` checks it), ``setup`` is called, then:
    a reactive node's ``process`` once per delivery of the bags given in ``inputs`` (``{port: [bag,
    ...]}``: an ``ordered`` port delivers every bag in order, a ``newest`` port the last), until
    none is left; a continuous node's ``process`` ``ticks`` times; an ``execution="thread"``
    node's ``run`` on a thread until it returns (or, with ``until``, until ``until(result)`` holds:
    then ``ctx.stopping`` is set and ``run`` has to return); a manual node runs until ``until``
    holds. ``timeout`` bounds that wait (seconds). Then ``teardown``. An exception the node raises
    is raised here, after its teardown."""
    spec = node_spec(node_class)
    name = node or spec.class_name
    instance = create(node_class, plain_config(node_class, config, node=name), node=name)
    ctx = FakeContext(node_class, inputs=inputs, node=name, stream=stream, on_write=on_write)
    setup = getattr(instance, "setup", None)
    if setup is not None:
        setup(ctx)
    try:
        if spec.execution == "reactive":
            while ctx.fill():
                ctx.origin[0] = 0  # what this call writes inherits only what it reads
                instance.process(ctx)
        elif spec.execution == "continuous":
            for _ in range(ticks):
                ctx.origin[0] = 0
                instance.process(ctx)
        elif spec.execution == "thread":
            _run_thread(instance, ctx, until, timeout)
        elif until is not None:
            ctx.wait_until(until, timeout, lambda: True)
    finally:
        teardown = getattr(instance, "teardown", None)
        if teardown is not None:
            teardown(ctx)
    return ctx.run


def _run_thread(instance: Any, ctx: FakeContext, until: Callable[[NodeRun], bool] | None, timeout: float) -> None:
    failed: list[BaseException] = []

    def body() -> None:
        try:
            instance.run(ctx)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=body, name=f"tatolab-{ctx.node}", daemon=True)
    thread.start()
    ctx.wait_until(until or (lambda run: False), timeout, thread.is_alive)
    ctx.stopping.set()
    thread.join(timeout)
    if failed:
        raise failed[0]
    if thread.is_alive():
        raise TimeoutError(f"node {ctx.node}: run() did not return within {timeout:g} s of ctx.stopping being set; "
                           "end its loop once ctx.stopping is set, and wait with ctx.stopping.wait(seconds)")
