"""Runs one node: builds it, wires its ports to the rings, and calls ``process``."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Protocol

from tatolab._host.status import open_for_node
from tatolab._links.ring import RingError, RingReader, RingWriter, wait_any
from tatolab._sdk.nodes import create
from tatolab._surfaces import pool as surfaces
from tatolab._host.ports import InputPort, OutputPort, ShapedInputPort
from tatolab._host.spec import HostSpec, LinkSpec, Message
from tatolab._sdk.context import Inputs, NodeLogger, Outputs, RuntimeContextLimitedAccess
from tatolab._sdk.audio import AudioShape

IDLE_WAKE_S = 0.25  # how often a waiting node looks at control messages
THREAD_STOP_S = 2.0  # how long, after the stop, an execution="thread" node's run() has to return before teardown
BAD_BAG_LOG_S = 1.0  # after its first BAD_BAGS_LOGGED, a link's bad bags are logged at most this often
BAD_BAGS_LOGGED = 10


class Control(Protocol):
    """The node host's control thread, as the runner uses it (main.py's _Control)."""

    messages: queue.SimpleQueue[Message]  # add_link / remove_link, read from stdin
    stopping: threading.Event

    def sleep(self, seconds: float) -> bool: ...  # True once stopping

    def stop(self, wake: bool = True) -> None: ...


class Sink(Protocol):
    """Where the node's log records and metrics go (main.py's _RecordSink)."""

    def emit(self, level: str, message: str, fields: dict[str, Any] | None = None) -> None: ...

    def send(self, message: dict[str, Any]) -> None: ...


class NodeRunner:
    def __init__(self, spec: HostSpec, node_class: type, sink: Sink) -> None:
        self.spec = spec
        self.name = spec["node"]
        self.execution = spec.get("execution", "reactive")
        self.interval_s = (spec.get("interval_ms") or 0) / 1000.0
        self.readers: dict[str, RingReader] = {}
        self.inputs: dict[str, InputPort[RingReader]] = {}
        self.log = NodeLogger(sink.emit)
        # The origin of what process() writes: the oldest origin of the bags it read in that call
        # (zeroed before each call; see tatolab/_links/latency.py). A manual node writes from its
        # own threads, outside any call: its bags originate when written.
        self.origin = [0, 0] if self.execution not in ("manual", "thread") else None  # [origin_ns, origin_id]
        self._bad_logged: dict[str, tuple[float, int, int]] = {}  # link key -> (when logged, unlogged, logged)
        for port, port_spec in spec.get("inputs", {}).items():
            if port_spec.get("audio"):
                self.inputs[port] = ShapedInputPort(
                    port, port_spec["delivery_profile"], AudioShape.parse(port_spec["audio"], f"input {port}"),
                    on_broken=self._link_broken, on_bad=self._bad_bag, on_audio=self._audio_news,
                )
            else:
                self.inputs[port] = InputPort(
                    port, port_spec["delivery_profile"], on_broken=self._link_broken, on_bad=self._bad_bag
                )
            self.inputs[port].origin = self.origin
            for link in port_spec.get("links", []):
                self._add_link(port, link)
        self.writers = {port: RingWriter(out["base"]) for port, out in spec.get("outputs", {}).items()}
        if self.origin is not None:
            for writer in self.writers.values():
                writer.set_origin(self.origin)
        outputs = {port: OutputPort(port, writer) for port, writer in self.writers.items()}
        self.outputs = outputs
        self.ctx = RuntimeContextLimitedAccess(
            stream=spec["stream"],
            node=self.name,
            inputs=Inputs(self.name, self.inputs),
            outputs=Outputs(self.name, outputs),
            log=self.log,
            report=lambda values: sink.send({"metrics": values}),
        )
        surfaces.configure(spec.get("surfaces"))  # where VideoFrame finds the runtime's pool
        self.instance = create(node_class, spec.get("config"), node=self.name)
        self.status = open_for_node(spec.get("status"))  # the runtime's watchdog reads it
        for in_port in self.inputs.values():
            in_port.taken = self.status.taken  # what its bags waited in the node: the status file's timer

    def _add_link(self, port: str, link: LinkSpec) -> None:
        key = link["key"]
        self._remove_link(key)
        try:
            reader = RingReader(
                link["base"], link["reader_index"], self.inputs[port].profile, start=link.get("start", "beginning"),
                origins=True,
            )
        except RingError as exc:
            # the source went away between wiring and now: the runtime rewires when it is back
            self.log.warning(f"link {key} could not be opened: {exc}")
            return
        reader.spin_ns = int(self.spec["inputs"][port].get("spin_us", 0) * 1000)  # @node.input(spin_us=...)
        self.readers[key] = reader
        self.inputs[port].add_link(key, reader)

    def _where(self, port: str, key: str) -> str:
        source = key.split("->", 1)[0]
        return f"stream {self.spec['stream']}, node {self.name}, input {port}, from {source} (link {key})"

    def _link_broken(self, port: str, key: str, exc: BaseException) -> None:
        """A ring that makes no sense: stop reading that link (the rest of the node goes on)."""
        reader = self.readers.pop(key, None)
        if reader is not None:
            reader.close()
        self.log.error(
            f"{self._where(port, key)}: stopped reading this link: {exc}. "
            "Stop and start the stream to make its rings afresh",
            link=key, port=port, broken=True,  # the runtime shows the link as broken in graph
        )

    def _bad_bag(self, port: str, key: str, exc: BaseException) -> None:
        """A bag that does not decode is skipped (and counted as bad on its link); say so,
        then, past the first few, at most once a second per link: a flood of them must not
        flood the log."""
        now = time.monotonic()
        last, since, logged = self._bad_logged.get(key, (0.0, 0, 0))
        since += 1
        if logged >= BAD_BAGS_LOGGED and now - last < BAD_BAG_LOG_S:
            self._bad_logged[key] = (last, since, logged)
            return
        self._bad_logged[key] = (now, 0, logged + 1)
        what = "a bag" if since == 1 else f"{since} bags"
        self.log.warning(
            f"{self._where(port, key)}: skipped {what} that did not decode "
            f"({type(exc).__name__}: {str(exc)[:200]}); the node goes on with the next bag. "
            "Every bag written with ctx.outputs.write decodes, so something else wrote to this link",
            link=key, port=port, bad=since,
        )

    def _audio_news(self, port: str, key: str, what: str) -> None:
        """A shaped audio input started its windows again (a gap, a change of format)."""
        now = time.monotonic()
        last, since, logged = self._bad_logged.get("audio " + key, (0.0, 0, 0))
        since += 1
        if logged >= BAD_BAGS_LOGGED and now - last < BAD_BAG_LOG_S:
            self._bad_logged["audio " + key] = (last, since, logged)
            return
        self._bad_logged["audio " + key] = (now, 0, logged + 1)
        self.log.warning(f"{self._where(port, key)}: {what}", link=key, port=port, audio_resets=since)

    def _remove_link(self, key: str) -> None:
        for port in self.inputs.values():
            reader = port.remove_link(key)
            if reader is not None:
                reader.close()
        self.readers.pop(key, None)

    def wake(self) -> None:
        """Called from the control thread on stop: end a wait on the input rings at once."""
        for reader in list(self.readers.values()):
            try:
                reader.interrupt()
            except (ValueError, AttributeError, TypeError):
                pass  # closed meanwhile by the node's own thread

    def _apply(self, message: Message) -> None:
        if message["op"] == "add_link" and message["port"] in self.inputs:
            self._add_link(message["port"], message["link"])
        elif message["op"] == "remove_link":
            self._remove_link(message["key"])

    def _relax_outputs(self) -> None:
        """Idle: a ring grown for big bags that stopped goes back to its normal size."""
        for port in self.outputs.values():
            if port.writer.grown:
                port.writer.relax()  # under the writer's own lock: manual nodes may be writing meanwhile

    def _drain_control(self, control: Control) -> None:
        while not control.messages.empty():
            self._apply(control.messages.get())

    def run(self, control: Control) -> None:
        self.ctx.stopping = control.stopping  # set by the stop: what a thread node's run() loop waits on
        setup = getattr(self.instance, "setup", None)
        if setup is not None:
            setup(self.ctx)
        self.status.set_up()
        try:
            if self.execution == "continuous":
                self._run_continuous(control)
            elif self.execution == "thread":
                self._run_thread(control)
            elif self.execution == "manual":
                self.status.ready()
                self._housekeep(control)
            else:
                self._run_reactive(control)
        finally:
            teardown = getattr(self.instance, "teardown", None)
            if teardown is not None:
                teardown(self.ctx)
            for key in list(self.readers):
                self._remove_link(key)  # bags read but never handed over go back to the ring
            for writer in self.writers.values():
                writer.close()
            self.status.close()

    def _housekeep(self, control: Control) -> None:
        """Until the stop: control messages, and rings grown for big bags back to their size."""
        while not control.sleep(IDLE_WAKE_S):
            self._drain_control(control)
            self._relax_outputs()

    def _run_thread(self, control: Control) -> None:
        """execution="thread": the node's run(ctx) on a thread of the host's, once, while this thread
        keeps house. The stop sets ctx.stopping (run returns; teardown waits up to THREAD_STOP_S for
        it); what run raises ends the node as a process() that raised does, once: re-raised here."""
        failed: list[BaseException] = []

        def body() -> None:
            try:
                self.instance.run(self.ctx)
            except BaseException as exc:  # (on its own thread, it would end only that thread)
                failed.append(exc)
                control.stop(wake=False)  # this thread's wait ends, and the failure is raised here

        thread = threading.Thread(target=body, name=f"tatolab-{self.name}", daemon=True)
        self.status.ready()
        thread.start()
        self._housekeep(control)
        thread.join(THREAD_STOP_S)
        if failed:
            raise failed[0]
        if thread.is_alive():
            self.log.warning(
                f"node {self.name}: run() did not return within {THREAD_STOP_S:g} s of the stop; teardown runs "
                "beside it. Have run() end its loop once ctx.stopping is set, and wait with ctx.stopping.wait(seconds)",
                run_still_running=True,
            )

    def _run_reactive(self, control: Control) -> None:
        process = self.instance.process
        inputs = list(self.inputs.values())
        stopping = control.stopping
        status = self.status
        # A node that must keep answering between bags (a window: its events, redraws) has
        # idle(self, ctx), called whenever no bag is waiting and at least every idle_ms (README: "Writing a node").
        idle = getattr(self.instance, "idle", None)
        if not callable(idle):
            idle = None
        idle_s = (getattr(self.instance, "idle_ms", None) or IDLE_WAKE_S * 1000) / 1000
        wait_s = min(IDLE_WAKE_S, idle_s) if idle else IDLE_WAKE_S
        origin = self.origin
        assert origin is not None  # (a reactive node follows origins: only manual and thread nodes do not)
        ctx = self.ctx
        fills = [port.fill for port in inputs]
        while not stopping.is_set():
            arrived = False
            for fill in fills:
                if fill():
                    arrived = True
            if arrived:
                origin[0] = 0  # what this call writes inherits only what it reads
                status.begin()
                try:
                    process(ctx)
                finally:
                    status.end()
                continue
            if not control.messages.empty():
                self._drain_control(control)
                inputs = list(self.inputs.values())
                fills = [port.fill for port in inputs]
            self._relax_outputs()
            if idle is not None:
                idle(self.ctx)
            # Wait only on links that can bring the node something new: an ordered link whose
            # delivered bag process() left unread has nothing to deliver until it is read
            # (waiting on it would return at once, for ever).
            readers = [reader for port in inputs for reader in port.waiting_readers()]
            if len(readers) == 1:
                readers[0].wait(wait_s)
            elif readers:
                wait_any(readers, wait_s)
            else:
                control.sleep(wait_s)

    def _run_continuous(self, control: Control) -> None:
        # The housekeeping comes before each call, not after: between the call's last write and
        # the sleep, a reader woken onto this core waits for it (see docs/architecture.md).
        process = self.instance.process
        status = self.status
        ctx = self.ctx
        interval_s = self.interval_s
        stopping, messages, sleep = control.stopping, control.messages, control.sleep
        clock = time.monotonic
        next_tick = clock()
        origin = self.origin
        assert origin is not None  # (a continuous node follows origins)
        while not stopping.is_set():
            if not messages.empty():
                self._drain_control(control)
            self._relax_outputs()
            origin[0] = 0  # a call that reads nothing writes bags that originate when written
            status.begin()
            try:
                process(ctx)
            finally:
                status.end()
            next_tick += interval_s
            now = clock()
            if next_tick < now:  # fell behind: skip the missed ticks rather than burst
                next_tick = now
            elif next_tick > now and sleep(next_tick - now):
                return
