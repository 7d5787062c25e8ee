"""What a node sees while it runs: ``ctx.inputs``, ``ctx.outputs``, ``ctx.time``, ``ctx.log`` and
``ctx.stopping``. The ports behind ``ctx.inputs`` and ``ctx.outputs`` (the per-bag engine: rings,
links, delivery) are the node host's (tatolab/_host/ports.py); this is the node's face of them."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Callable, ContextManager, Protocol, TypeVar, overload

import msgspec

from tatolab import _bags
from tatolab._errors import BagError, GraphError
from tatolab._links.ring.views import BagView
from tatolab._sdk.audio import AudioBlock, AudioShape

T = TypeVar("T")
_encode = _bags.encode
_fits, _pack = _bags.fits, _bags.pack  # (encode, without its frame: write's per-bag path)
_decode = _bags.decode_bytes  # _bags.decode without its Python frame (read's hot path)
_take_ordered: Callable[[Any, Any, Callable[[bytes], Any]], Any] | None
try:  # take and decode of a port's one ordered link in C (_native.c, _ordered.h); None: read's Python path
    from tatolab._links._native import take_ordered as _take_ordered
except ImportError:
    _take_ordered = None
_clock_of: Callable[[Any], int] | None
try:
    from tatolab._links._native import clock_of as _clock_of
except ImportError:
    _clock_of = None
_raw_decoder = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])  # Inputs.view: the fields undecoded, no copy
_BIN_HEADS = {0xC4: 2, 0xC5: 3, 0xC6: 5}  # msgpack's bin 8/16/32: the bytes before the data
LEVELS = ("debug", "info", "warning", "error")


class InputSource(Protocol):
    """What ``ctx.inputs`` needs of an input port (tatolab/_host/ports.py: InputPort, ShapedInputPort)."""

    @property
    def shaped(self) -> bool: ...  # an audio input: read hands over its shaped windows

    last_link: str | None  # the key of the link the last bag taken came by
    _one: Any  # the port's one ordered link, when one feeds it (read takes its bag in C), else None
    origin: Any  # the node's origin cell (a list [origin_ns, origin_id]), or None

    @property
    def links(self) -> Mapping[str, Any]: ...

    def take(self, inherit: bool = True) -> tuple[Any, Any] | None: ...

    def take_block(self) -> AudioBlock | None: ...

    def bad(self, link: Any, exc: BaseException) -> None: ...

    def gone(self, link: Any) -> None: ...

    def drop(self) -> bool: ...

    def reshape(self, shape: AudioShape) -> None: ...


class OutputSink(Protocol):
    """What ``ctx.outputs`` needs of an output port (tatolab/_host/ports.py: OutputPort)."""

    @property
    def write(self) -> Callable[[bytes], Any]: ...

    def loan(self, nbytes: int) -> ContextManager[memoryview]: ...


def _decode_view(payload: Any) -> Any:
    """A big bag a node's reader gave as a view of its ring slot (RingReader.views): decoded
    (its bytes copied out, as any bag's are), then the slot given back."""
    if type(payload) is not BagView:
        raise TypeError(f"a bag is bytes or a BagView, not {type(payload).__name__}")
    try:
        return _decode(payload.data)
    finally:
        payload.release()


def _view_bag(buf: memoryview) -> tuple[dict[str, Any], memoryview | None]:
    """The bag in `buf` with its ``data``, when bytes, as a read-only view into `buf` (no copy)."""
    bag: dict[str, Any] = {}
    data = None
    for key, value in _raw_decoder.decode(buf).items():
        with memoryview(value) as encoded:
            skip = _BIN_HEADS.get(encoded[0]) if key == "data" and len(encoded) else None
            if skip is not None:
                data = bag[key] = encoded[skip:].toreadonly()
            else:
                bag[key] = msgspec.msgpack.decode(encoded)
    return bag, data


class Inputs:
    """``ctx.inputs``: the bags delivered to the node's input ports."""

    def __init__(self, node: str, ports: Mapping[str, InputSource]) -> None:
        self._node = node
        self._ports = ports

    def _port(self, port: str) -> InputSource:
        source = self._ports.get(port)
        if source is None:
            known = ", ".join(sorted(self._ports)) or "none"
            raise GraphError(
                f"node {self._node} has no input port {port!r}; its inputs are: {known}"
            )
        return source

    def link(self, port: str) -> str | None:
        """Which link the bag last read from ``port`` came by, as ``tatolab graph`` names it
        (``<node>/<port>-><this node>/<port>``), or ``None`` before the first bag. A fan-in
        input (many links into one port) tells its sources apart by this, as Mp4Sink keeps
        one track per link."""
        return self._port(port).last_link

    def links(self, port: str) -> list[str]:
        """The links wired into ``port`` now, by the same names as ``link``."""
        return list(self._port(port).links)

    @overload
    def read(self, port: str, into: None = None) -> dict[str, Any] | None: ...

    @overload
    def read(self, port: str, into: type[T]) -> T | None: ...

    def read(self, port: str, into: type[T] | None = None) -> Any:
        """The next bag on ``port`` as its profile defines it, or ``None`` when there is none.

        With ``into``, the bag is built into that dataclass, TypedDict or pydantic model (or an
        ``AudioBlock``, a ``VideoFrame``), and typed so: ``ctx.inputs.read("rows", into=Row)`` is a
        ``Row | None``; without, a ``dict[str, Any] | None``.
        """
        try:
            source = self._ports[port]  # (a subscript, not a call: read is the per-bag path)
        except KeyError:
            source = self._port(port)
        if source.shaped:
            block = source.take_block()
            if block is None or into is AudioBlock:
                return block
            bag = block.bag()
            return bag if into is None else _bags.convert(bag, into, node=self._node, port=port)
        if into is None:  # the hot path: one bag, decoded
            one = source._one
            if one is not None and _take_ordered is not None:
                bag = _take_ordered(one, source.origin, _decode)  # the lines below, for one ordered link's bag
                if bag is not None:  # (None: not that case, and the lines below do it)
                    source.last_link = one.key
                    return bag
            while True:
                got = source.take()
                if got is None:
                    return None
                try:
                    return _decode(got[0])
                except (ValueError, RecursionError) as exc:  # garbage, not a dict, nested too deep
                    source.bad(got[1], exc)  # skipped and counted; the node goes on with the next bag
                except TypeError:  # (not in the common path: a big bag, as a view of its slot)
                    try:
                        return _decode_view(got[0])
                    except (ValueError, RecursionError) as exc:
                        source.bad(got[1], exc)
        from_bag = getattr(into, "_tatolab_from_bag", None)
        while True:
            got = source.take()
            if got is None:
                return None
            payload: Any = got[0]
            link = got[1]
            try:
                bag = _decode(payload) if type(payload) is not BagView else _decode_view(payload)
            except (ValueError, RecursionError) as exc:  # garbage, not a dict, nested too deep
                source.bad(link, exc)
                continue  # skipped and counted; the node goes on with the next bag
            if from_bag is None:
                return _bags.convert(bag, into, node=self._node, port=port)
            try:
                return from_bag(bag)
            except ValueError as exc:  # a frame reused before this reader got to it: skip it, counted
                if not isinstance(bag, dict) or "surface_id" not in bag:
                    raise BagError(f"node {self._node} port {port}: {exc}") from None
                source.gone(link)

    def view(self, port: str) -> ContextManager[dict[str, Any] | None]:
        """The next bag on ``port`` without copying its bytes: ``with ctx.inputs.view("frames") as
        bag:`` gives the bag (``None`` when there is none) with its ``data`` (the bytes a writer's
        ``ctx.outputs.loan`` filled) as a read-only memoryview of the link's ring slot; the slot is
        the node's until the block ends (the writer never waits for it: it goes on elsewhere).
        Use the view inside the block only. A bag whose ``data`` is not bytes reads as ``read`` gives it."""
        source = self._ports.get(port) or self._port(port)
        if source.shaped:
            raise GraphError(f"node {self._node}: input {port!r} is an audio input; read it with ctx.inputs.read")
        return self._viewed(source)

    @contextlib.contextmanager
    def _viewed(self, source: InputSource) -> Iterator[dict[str, Any] | None]:
        while True:
            got = source.take()
            if got is None:
                yield None
                return
            payload: Any = got[0]
            link = got[1]
            held = payload if type(payload) is BagView else None
            buf = memoryview(payload.data if held is not None else payload)
            try:
                bag, data = _view_bag(buf)
            except (ValueError, RecursionError, TypeError) as exc:  # not a bag (garbage, not a dict)
                buf.release()
                if held is not None:
                    held.release()
                source.bad(link, exc)
                continue
            break
        try:
            yield bag
        finally:
            bag.clear()
            try:
                if data is not None:
                    data.release()  # (BufferError if something made from it outlives the block)
                buf.release()
            finally:
                if held is not None:
                    held.release()

    def drop(self, port: str) -> bool:
        """Take the next bag on ``port`` without using it, counted as dropped on its link (the
        node's ``inputs`` in `tatolab graph`), not read: for a node that cannot use bags now,
        such as a window with no display. False when there was none."""
        return self._port(port).drop()


    def shape_audio(self, port: str, audio: dict[str, Any]) -> None:
        """Change what an audio input (declared with ``audio={...}``) receives from now on, e.g. a
        sink that learns its device's rate only once it opens it."""
        source = self._ports.get(port)
        if source is None or not source.shaped:
            raise GraphError(
                f"node {self._node}: input {port!r} is not an audio input; declare it with "
                '@node.input(delivery_profile="ordered", audio={...}) to have its audio shaped'
            )
        try:
            source.reshape(AudioShape.parse(audio, f"node {self._node}, input {port!r}"))
        except ValueError as exc:
            raise GraphError(str(exc)) from None


_MAX_LOAN = (1 << 32) - 1  # a bin 32's length (a link carries at most 1 GiB: the ring says so)


class Outputs:
    """``ctx.outputs``: what the node writes on its output ports."""

    def __init__(self, node: str, ports: Mapping[str, OutputSink]) -> None:
        self._node = node
        self._ports = ports
        self._writes = {name: port.write for name, port in ports.items()}

    def write(self, port: str, bag: Any) -> None:
        """Send ``bag`` on ``port``. Never waits for readers."""
        write = self._writes.get(port)
        if write is None:
            known = ", ".join(sorted(self._ports)) or "none"
            raise GraphError(
                f"node {self._node} has no output port {port!r}; its outputs are: {known}"
            )
        if type(bag) is not dict:
            as_bag = getattr(bag, "_tatolab_bag", None)  # a VideoFrame sends the bag that names it
            if as_bag is not None:
                bag = as_bag()
        try:
            write(_pack(bag) if _fits(bag) else _encode(bag, self._node, port))
        except ValueError as exc:  # the ring refuses what it cannot carry (BagError is no ValueError)
            raise BagError(f"node {self._node} port {port}: {exc}") from None

    def loan(self, port: str, nbytes: int, **fields: Any) -> ContextManager[memoryview]:
        """A bag of ``nbytes`` bytes written in place, for large payloads: ``with
        ctx.outputs.loan("frames", n, width=1920) as buf:`` gives a writable memoryview of the
        link's ring slot itself (fill it: ``buf[:] = ...``, or a ``numpy.frombuffer(buf, ...)``
        used inside the block); the bag is sent when the block ends, nothing if it raises.
        Readers get ``{"data": <those bytes>, **fields}``. Never waits for readers."""
        if port not in self._ports:
            self.write(port, None)  # (raises the GraphError naming the ports there are)
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 <= nbytes <= _MAX_LOAN:
            raise BagError(
                f"node {self._node} port {port}: loan takes the bag's size in bytes, 0 to {_MAX_LOAN:,}; got {nbytes!r}"
            )
        if "data" in fields or len(fields) > 14:
            raise BagError(
                f"node {self._node} port {port}: loan's fields go beside the loaned bytes, which are the bag's "
                f'"data": at most 14 fields, none named "data"; got {sorted(fields)}'
            )
        head = _encode(fields, self._node, port)  # (checked as any bag is) a fixmap: its first byte says how many
        head = bytes([0x80 | (len(fields) + 1)]) + head[1:] + b"\xa4data\xc6" + nbytes.to_bytes(4, "big")
        return self._loaned(port, head, nbytes)

    @contextlib.contextmanager
    def _loaned(self, port: str, head: bytes, nbytes: int) -> Iterator[memoryview]:
        try:
            loan = self._ports[port].loan(len(head) + nbytes)
            buf = loan.__enter__()
        except ValueError as exc:  # too big for a link
            raise BagError(f"node {self._node} port {port}: {exc}") from None
        buf[:len(head)] = head  # the msgpack map up to the bytes: the bag decodes as {**fields, "data": bytes}
        body = buf[len(head):]
        try:
            yield body
        except BaseException as exc:
            body.release()
            if not loan.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            body.release()
            loan.__exit__(None, None, None)


class NodeLogger:
    """``ctx.log.info("message", key=value)``: records in the stream's log, naming the node."""

    def __init__(self, emit: Callable[[str, str, dict[str, Any]], None]) -> None:
        self._emit = emit
        self._counts: dict[tuple[str, int], int] = {}  # every(): calls so far, by the line that calls it
        self._counting = threading.Lock()  # every() is called from the node's own threads too

    def debug(self, message: str, **fields: Any) -> None:
        self._emit("debug", message, fields)

    def info(self, message: str, **fields: Any) -> None:
        self._emit("info", message, fields)

    def warning(self, message: str, **fields: Any) -> None:
        self._emit("warning", message, fields)

    def error(self, message: str, **fields: Any) -> None:
        self._emit("error", message, fields)

    def every(self, n: int, level: str, message: str, /, **fields: Any) -> int:
        """Count something that can happen per bag (a frame dropped, a bag skipped) and log it the
        first time and every ``n``-th time after, with the count as the record's ``count`` field:
        ``ctx.log.every(100, "warning", f"frame dropped: {exc}")``. The calls from each line of the
        node's code are counted apart, so a message whose text varies (naming the exception) still
        counts as one. Returns the count."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise TypeError(f"ctx.log.every takes how often to log, a whole number above 0 (every 100th: 100), not {n!r}")
        if level not in LEVELS:
            raise TypeError(f"ctx.log.every takes the level first, one of {', '.join(LEVELS)}, not {level!r}")
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with self._counting:
            count = self._counts[key] = self._counts.get(key, 0) + 1
        if count == 1 or count % n == 0:
            self._emit(level, message, {**fields, "count": count})
        return count


class RuntimeContextLimitedAccess:
    """The context passed to ``setup``, ``process``, ``run``, ``idle`` and ``teardown``."""

    def __init__(self, *, stream: str, node: str, inputs: Inputs, outputs: Outputs, log: NodeLogger,
                 report: Callable[[dict[str, Any]], None] | None = None,
                 stopping: threading.Event | None = None) -> None:
        self.stream = stream
        self.node = node
        self.inputs = inputs
        self.outputs = outputs
        self.log = log
        self._report = report
        # Set once the node is asked to stop: a source's run() loop ends when it is
        # (``while not ctx.stopping.is_set()``, and ``ctx.stopping.wait(seconds)`` to sleep).
        self.stopping = stopping if stopping is not None else threading.Event()

    def report(self, **values: Any) -> None:
        """Say something about this node that ``tatolab graph`` shows under its ``metrics``
        (which encoder it opened, frames it dropped...): merged into what it said before, until
        the node restarts. Values must be JSON (numbers, strings, lists, dicts); call it when a
        value changes or at most a few times a second, not per bag."""
        if self._report is not None:
            self._report(values)

    def loading(self, what: str) -> None:
        """Say, in ``setup``, what the node is loading before it can take its first bag (a model,
        an index): until ``setup`` returns, ``tatolab graph`` shows the node ``loading``, with
        ``what`` as its reason, rather than ``running``. Call it again to say what comes next."""
        if not isinstance(what, str) or not what:
            raise TypeError(f"node {self.node}: ctx.loading takes what is loading, in words, got {what!r}")
        self.report(loading=what)

    def _time(self) -> int:
        return time.monotonic_ns()

    # Now, on the machine's monotonic clock, in nanoseconds: where the C module was built, its
    # getter is C's (a node reads it per bag: a Python frame cost as much as the clock itself)
    time = property(_clock_of or _time, doc="Now, on the machine's monotonic clock, in nanoseconds.")
