"""What a node sees while it runs: ``ctx.inputs``, ``ctx.outputs``, ``ctx.time`` and ``ctx.log``."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Callable, ContextManager, Protocol, TypeVar

import msgspec

from tatolab import _bags
from tatolab._errors import BagError, GraphError
from tatolab._links.ring.views import BagView
from tatolab._links.shm import RingError
from tatolab._sdk.audio import AudioBlock, AudioShape

T = TypeVar("T")
_encode = _bags.encode
_decode = _bags.decode_bytes  # _bags.decode without its Python frame (read's hot path)
_raw_decoder = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])  # Inputs.view: the fields undecoded, no copy
_BIN_HEADS = {0xC4: 2, 0xC5: 3, 0xC6: 5}  # msgpack's bin 8/16/32: the bytes before the data


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


def _release(bag: Any) -> None:
    """A bag never handed to the node (or handed over decoded): give its ring slot back, if it holds one."""
    if bag is not None and type(bag[0]) is BagView:
        bag[0].release()
_clock = time.monotonic_ns


class _Reader(Protocol):
    def read(self) -> tuple[bytes, int] | None: ...

    def read_many(self) -> list[tuple[bytes, int]]: ...

    def discard(self, n: int = 1) -> None: ...

    def count_bad(self) -> None: ...


class _Writer(Protocol):
    def write(self, payload: bytes) -> int: ...

    @property
    def grown(self) -> bool: ...

    def relax(self) -> bool: ...

    def loan(self, nbytes: int) -> ContextManager[memoryview]: ...


# What the node host is told when a link breaks (its ring makes no sense) or a bag does not
# decode: (port, link key, the exception).
LinkTrouble = Callable[[str, str, BaseException], None]


def _ignore(port: str, key: str, exc: BaseException) -> None:
    pass


class _Link:
    """One link into an input port: the bag delivered to the node and not yet taken, and
    (ordered) the ones already taken off the ring behind it, since one ``read_many`` is
    cheaper than many reads."""

    __slots__ = ("key", "reader", "pending", "backlog", "pending_bag", "taken")

    def __init__(self, key: str, reader: _Reader) -> None:
        self.key = key
        self.reader = reader
        # (payload, publish_ns), or from the node host's readers (payload, publish_ns, origin_ns, origin_id)
        self.pending: tuple | None = None
        self.pending_bag: tuple | None = None  # a shaped audio input's bag being cut into windows
        self.backlog: deque[tuple[bytes, int]] = deque()
        self.taken = 0  # monotonic ns when the bags in the backlog left the ring (one run, one time)


class InputPort:
    """An input port: its delivery profile and the links that feed it (fan-in).

    The rings are read once per delivery (``fill``); reading the port hands over what was
    delivered, and looks at the rings again only once that is taken. So ``read`` counts
    exactly the bags the node got: a ``newest`` bag replaced before the node read it counts
    as dropped."""

    shaped = False  # ShapedInputPort: True (Inputs.read asks this rather than isinstance, per bag)

    def __init__(self, name: str, profile: str, on_broken: LinkTrouble = _ignore, on_bad: LinkTrouble = _ignore) -> None:
        self.name = name
        self.profile = profile
        self._newest = profile == "newest"
        self.links: dict[str, _Link] = {}
        self._each: tuple[_Link, ...] = ()  # the links, as fill and take walk them (per bag: no list made)
        self._one: _Link | None = None  # the link, when it is one and ordered (most inputs: fill's short way)
        self.stale = 0  # video bags whose surface was already reused when read
        self.last_link: str | None = None  # the key of the link the last bag taken came by
        # The node's origin cell ([origin_ns, origin_id], shared with its outputs' writers): each bag handed over makes it the older of the two; the host zeroes it before
        # every process() call, so what process() writes inherits the oldest origin it read
        # (tatolab/_links/latency.py). None: origins are not followed (a manual node).
        self.origin: Any = None
        # The node's cell [taken_ns] (tatolab/_host/status.py): each bag delivered makes it the
        # older of the two, the time that bag left its ring; the host's timer reads it as the call
        # begins (the bag's wait inside the node) and zeroes it.
        self.taken: list[int] = [0]
        self._on_broken = on_broken
        self._on_bad = on_bad

    def _relink(self) -> None:
        self._each = each = tuple(self.links.values())
        self._one = each[0] if len(each) == 1 and not self._newest else None

    def add_link(self, key: str, reader: _Reader) -> None:
        if hasattr(reader, "views"):
            reader.views = True  # big bags as views of their slots, released once read (Inputs.read, Inputs.view)
        self.links[key] = _Link(key, reader)
        self._relink()

    def remove_link(self, key: str) -> _Reader | None:
        link = self.links.pop(key, None)
        if link is None:
            return None
        self._relink()
        _release(link.pending)
        for bag in link.backlog:
            _release(bag)
        unseen = len(link.backlog) + (link.pending is not None)
        unread = getattr(link.reader, "unread", None)
        if unseen and unread is not None:
            unread(unseen)  # never handed to the node: a restarted reader gets them again
        return link.reader

    def fill(self) -> bool:
        """Pull from the rings; True when a bag arrived that the node has not been offered."""
        one = self._one
        if one is not None:  # (the per-bag path: one ordered link, as the loop below does it)
            if one.pending is not None:
                return False
            backlog = one.backlog
            cell = self.taken
            if backlog:
                one.pending = backlog.popleft()
                if not cell[0] or one.taken < cell[0]:
                    cell[0] = one.taken
                return True
            try:
                run = one.reader.read_many()
            except RingError as exc:
                self._broken(one, exc)
                return False
            if not run:
                return False
            one.taken = now = _clock()
            if len(run) > 1:
                backlog.extend(run)
                one.pending = backlog.popleft()
            else:
                one.pending = run[0]
            if not cell[0]:
                cell[0] = now
            return True
        arrived = False
        newest = self._newest
        cell = self.taken
        for link in self._each:  # (a tuple: _broken may change the links meanwhile)
            try:
                if newest:
                    got = link.reader.read()
                    if got is None:
                        continue
                    if link.pending is not None:
                        link.reader.discard(1)  # replaced before the node read it
                    link.pending = got
                    link.taken = _clock()
                elif link.pending is None:
                    if not link.backlog:
                        link.backlog.extend(link.reader.read_many())
                        if not link.backlog:
                            continue
                        link.taken = _clock()
                    link.pending = link.backlog.popleft()
                else:
                    continue
                arrived = True
                if not cell[0] or link.taken < cell[0]:
                    cell[0] = link.taken
            except RingError as exc:
                self._broken(link, exc)
        return arrived

    def _fill_now(self) -> None:
        """fill() from inside process(): what it takes is read at once, so it waited for no call
        (the node's wait cell stays as it was)."""
        cell = self.taken
        mark = cell[0]
        self.fill()
        cell[0] = mark

    def _broken(self, link: _Link, exc: RingError) -> None:
        self.links.pop(link.key, None)
        self._relink()
        self._on_broken(self.name, link.key, exc)

    def waiting_readers(self) -> list[_Reader]:
        """The readers whose next bag would be news to the node: every ``newest`` link, and
        an ``ordered`` link once the node has taken the bag it was given (the next one on
        that link cannot be delivered before)."""
        if self._newest:
            return [link.reader for link in self._each]
        return [link.reader for link in self._each if link.pending is None and not link.backlog]

    def _inherit(self, bag: tuple | None) -> None:
        cell = self.origin
        if cell is not None and bag is not None and len(bag) > 3 and bag[2] and (not cell[0] or bag[2] < cell[0]):
            cell[0] = bag[2]
            cell[1] = bag[3]

    def take(self, inherit: bool = True) -> tuple[bytes, _Link] | None:
        """The bag to hand to the node and the link it came by, or None. ``inherit``: its origin
        counts for what the node writes next (not for a bag dropped unused)."""
        chosen = self._one
        if chosen is None and len(self._each) == 1:
            chosen = self._each[0]
        if chosen is not None:  # one link (most inputs): no choosing, nothing to discard
            got: Any = chosen.pending
            if got is None:
                self._fill_now()  # nothing delivered and waiting: look at the ring now
                got = chosen.pending
                if got is None:
                    return None
            cell = self.origin
            # (inline: the per-bag path) its origin counts for what the node writes next, if older
            if inherit and cell is not None and len(got) > 3 and got[2] and (not cell[0] or got[2] < cell[0]):
                cell[0] = got[2]
                cell[1] = got[3]
            chosen.pending = None
            self.last_link = chosen.key
            return got[0], chosen
        each = self._each
        candidates = [link for link in each if link.pending is not None]
        if not candidates:
            self._fill_now()  # nothing delivered and waiting: look at the rings now
            candidates = [link for link in self._each if link.pending is not None]
            if not candidates:
                return None
        if self._newest:
            chosen = max(candidates, key=lambda link: link.pending[1])  # type: ignore[index]
            payload = chosen.pending[0]  # type: ignore[index]
            if inherit:
                self._inherit(chosen.pending)
            for link in candidates:
                link.pending = None
                if link is not chosen:
                    link.reader.discard(1)  # an older bag on another link: the node never sees it
            self.last_link = chosen.key
            return payload, chosen
        # ordered: the earliest publish time across links is the arrival order
        chosen = min(candidates, key=lambda link: link.pending[1])  # type: ignore[index]
        bag: Any = chosen.pending
        payload = bag[0]
        cell = self.origin
        # (inline: the per-bag path) its origin counts for what the node writes next, if older
        if inherit and cell is not None and len(bag) > 3 and (not cell[0] or bag[2] < cell[0]):
            cell[0] = bag[2]
            cell[1] = bag[3]
        chosen.pending = None
        self.last_link = chosen.key
        return payload, chosen

    def drop(self) -> bool:
        """Take the next bag without handing it to the node: it counts as dropped, not read."""
        got = self.take(inherit=False)
        if got is None:
            return False
        _release(got)
        got[1].reader.discard(1)
        return True

    def gone(self, link: _Link) -> None:
        """The bag last taken from ``link`` named a frame whose surface was reused before this
        reader got to it: the reader fell behind, so it counts as dropped, like a lapped bag."""
        self.stale += 1
        count = getattr(link.reader, "count_dropped", None)
        if count is not None:
            count()

    def bad(self, link: _Link, exc: BaseException) -> None:
        """The bag last taken from ``link`` did not decode: count it on the link, tell the host."""
        link.reader.count_bad()
        self._on_bad(self.name, link.key, exc)


# What the node host is told when a shaped audio input starts its windows again, or gets a bag
# that is not audio: (port, link key, what happened).
AudioTrouble = Callable[[str, str, str], None]


class ShapedInputPort(InputPort):
    """An ``ordered`` input declared with ``audio={...}``: each link's audio bags go through an
    ``AudioShaper``, and the node is handed the shaped windows one at a time, in order."""

    shaped = True

    def __init__(self, name: str, profile: str, shape: AudioShape, on_broken: LinkTrouble = _ignore,
                 on_bad: LinkTrouble = _ignore, on_audio: AudioTrouble = lambda port, key, what: None) -> None:
        super().__init__(name, profile, on_broken=on_broken, on_bad=on_bad)
        self.shape = shape
        self.shapers: dict[str, Any] = {}
        self.blocks: deque[tuple[AudioBlock, str, tuple | None]] = deque()  # with the link each came by and its bag
        self._offered = False
        self._on_audio = on_audio

    def _shaper(self, key: str) -> Any:
        from tatolab._sdk.shaping import AudioShaper  # numpy and soxr: only where audio is shaped

        return AudioShaper(self.shape, lambda what: self._on_audio(self.name, key, what))

    def add_link(self, key: str, reader: _Reader) -> None:
        super().add_link(key, reader)
        if hasattr(reader, "views"):
            reader.views = False  # audio bags are decoded here, as bytes
        self.shapers[key] = self._shaper(key)

    def remove_link(self, key: str) -> _Reader | None:
        self.shapers.pop(key, None)
        return super().remove_link(key)

    def reshape(self, shape: AudioShape) -> None:
        """Ask for another shape from now on (the windows start again)."""
        self.shape = shape
        self.shapers = {key: self._shaper(key) for key in self.links}
        self.blocks.clear()
        self._offered = False

    def _shape_arrived(self) -> None:
        while not self.blocks:
            super().fill()
            arrived = [link for link in self.links.values() if link.pending is not None]
            if not arrived:
                return
            for link in sorted(arrived, key=lambda link: link.pending[1]):  # type: ignore[index]
                payload = link.pending[0]  # type: ignore[index]
                link.pending_bag, link.pending = link.pending, None
                try:
                    bag = _bags.decode(payload)
                except (ValueError, RecursionError) as exc:
                    self.bad(link, exc)
                    continue
                try:
                    block = AudioBlock.from_bag(bag)
                except ValueError as exc:  # counted bad, and said in audio's words
                    link.reader.count_bad()
                    self._on_audio(self.name, link.key, f"skipped a bag that is not audio ({exc}); counted as bad")
                    continue
                got = link.pending_bag
                self.blocks.extend((shaped, link.key, got) for shaped in self.shapers[link.key].push(block))

    def fill(self) -> bool:
        self._shape_arrived()
        if self.blocks and not self._offered:
            self._offered = True
            return True
        return False

    def waiting_readers(self) -> list[_Reader]:
        return [] if self.blocks else [link.reader for link in self.links.values()]

    def take_block(self) -> AudioBlock | None:
        if not self.blocks:
            mark = self.taken[0]
            self._shape_arrived()  # from inside process(): what it takes waited for no call
            self.taken[0] = mark
            if not self.blocks:
                return None
        self._offered = False
        block, self.last_link, bag = self.blocks.popleft()
        self._inherit(bag)  # a window's origin: that of the bag that completed it
        return block


class Inputs:
    def __init__(self, node: str, ports: dict[str, InputPort]) -> None:
        self._node = node
        self._ports = ports

    def _port(self, port: str) -> InputPort:
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

    def read(self, port: str, into: type[T] | None = None) -> Any:
        """The next bag on ``port`` as its profile defines it, or ``None`` when there is none.

        With ``into``, the bag is built into that dataclass, TypedDict or pydantic model.
        """
        source = self._ports.get(port) or self._port(port)
        if source.shaped:
            block = source.take_block()  # type: ignore[attr-defined]
            if block is None or into is AudioBlock:
                return block
            bag = block.bag()
            return bag if into is None else _bags.convert(bag, into, node=self._node, port=port)
        if into is None:  # the hot path: one bag, decoded
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
    def _viewed(self, source: InputPort) -> Iterator[dict[str, Any] | None]:
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
        if not isinstance(source, ShapedInputPort):
            raise GraphError(
                f"node {self._node}: input {port!r} is not an audio input; declare it with "
                '@node.input(delivery_profile="ordered", audio={...}) to have its audio shaped'
            )
        try:
            source.reshape(AudioShape.parse(audio, f"node {self._node}, input {port!r}"))
        except ValueError as exc:
            raise GraphError(str(exc)) from None


class OutputPort:
    def __init__(self, name: str, writer: _Writer) -> None:
        self.name = name
        self.writer = writer
        self.write = writer.write  # the hot path's one lookup; the ring writer takes its own lock


_MAX_LOAN = (1 << 32) - 1  # a bin 32's length (a link carries at most 1 GiB: the ring says so)


class Outputs:
    def __init__(self, node: str, ports: dict[str, OutputPort]) -> None:
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
            write(_encode(bag, self._node, port))
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
            loan = self._ports[port].writer.loan(len(head) + nbytes)
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

    def debug(self, message: str, **fields: Any) -> None:
        self._emit("debug", message, fields)

    def info(self, message: str, **fields: Any) -> None:
        self._emit("info", message, fields)

    def warning(self, message: str, **fields: Any) -> None:
        self._emit("warning", message, fields)

    def error(self, message: str, **fields: Any) -> None:
        self._emit("error", message, fields)


class RuntimeContextLimitedAccess:
    """The context passed to ``setup``, ``process`` and ``teardown``."""

    def __init__(self, *, stream: str, node: str, inputs: Inputs, outputs: Outputs, log: NodeLogger,
                 report: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.stream = stream
        self.node = node
        self.inputs = inputs
        self.outputs = outputs
        self.log = log
        self._report = report

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

    @property
    def time(self) -> int:
        """Now, on the machine's monotonic clock, in nanoseconds."""
        return time.monotonic_ns()
