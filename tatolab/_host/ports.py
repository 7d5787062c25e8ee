"""The per-bag engine behind ``ctx.inputs`` and ``ctx.outputs``: each input port's links, what
``fill`` delivers and ``take`` hands over (ordered or newest, fan-in), the origin a call's writes
inherit, and each output port's writer. The node host builds these (runner.py); the testing kit
(testing.py) builds the same ports over bags in memory."""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Generic, Protocol, TypeVar

from tatolab import _bags
from tatolab._links.ring.views import BagView
from tatolab._links.shm import RingError
from tatolab._sdk.audio import AudioBlock, AudioShape

_fill_ordered: Callable[[Any, Any, list[int]], bool | None] | None
try:  # the one ordered link's fill in C (_native.c, _ordered.h); the Python path below is its definition
    from tatolab._links._native import fill_ordered as _fill_ordered
except ImportError:
    _fill_ordered = None


class _PyLinkCore:
    """_native.LinkCore's members, where the C module was not built."""

    __slots__ = ("pending", "backlog", "taken")


if TYPE_CHECKING:
    _LinkCore = _PyLinkCore
else:
    try:  # a link's pending bag, backlog and time taken, as members the C fill reaches without a lookup
        from tatolab._links._native import LinkCore as _LinkCore
    except ImportError:
        _LinkCore = _PyLinkCore


def inherit_origin(cell: list[int], bag: tuple) -> None:
    """The origin rule (tatolab/_links/latency.py): a bag handed to the node makes the node's origin
    cell ``[origin_ns, origin_id]`` the older of the two; a bag with no origin (0, or none given)
    changes nothing. So what a call writes inherits the oldest origin it read. (InputPort.take, the
    per-bag path, has the same rule written out in its one tail, for every kind of port.)"""
    if len(bag) > 3 and bag[2] and (not cell[0] or bag[2] < cell[0]):
        cell[0] = bag[2]
        cell[1] = bag[3]


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


R = TypeVar("R", bound=_Reader)  # the links' reader: the host's RingReader, the testing kit's in-memory one


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


class _Link(_LinkCore, Generic[R]):
    """One link into an input port: the bag delivered to the node and not yet taken, and
    (ordered) the ones already taken off the ring behind it, since one ``read_many`` is
    cheaper than many reads."""

    __slots__ = ("key", "reader", "pending_bag")  # and _LinkCore's: pending, backlog, taken

    def __init__(self, key: str, reader: R) -> None:
        self.key = key
        self.reader = reader
        # (payload, publish_ns), or from the node host's readers (payload, publish_ns, origin_ns, origin_id)
        self.pending: tuple | None = None
        self.pending_bag: tuple | None = None  # a shaped audio input's bag being cut into windows
        self.backlog: deque[tuple[bytes, int]] = deque()
        self.taken = 0  # monotonic ns when the bags in the backlog left the ring (one run, one time)


class InputPort(Generic[R]):
    """An input port: its delivery profile and the links that feed it (fan-in).

    The rings are read once per delivery (``fill``); reading the port hands over what was
    delivered, and looks at the rings again only once that is taken. So ``read`` counts
    exactly the bags the node got: a ``newest`` bag replaced before the node read it counts
    as dropped."""

    shaped = False  # ShapedInputPort: True (Inputs.read asks this rather than isinstance, per bag)
    # fill's one ordered link in C: True, False, or None where it is not the common case (the Python
    # path then does it). None: the Python path always (no C module; tests set it to compare the two)
    _fill_c: Callable[[Any, Any, list[int]], bool | None] | None = _fill_ordered

    def __init__(self, name: str, profile: str, on_broken: LinkTrouble = _ignore, on_bad: LinkTrouble = _ignore) -> None:
        self.name = name
        self.profile = profile
        self._newest = profile == "newest"
        self.links: dict[str, _Link[R]] = {}
        self._each: tuple[_Link[R], ...] = ()  # the links, as fill and take walk them (per bag: no list made)
        self._one: _Link[R] | None = None  # the link, when it is one and ordered (most inputs: fill's short way)
        self.stale = 0  # video bags whose surface was already reused when read
        self.last_link: str | None = None  # the key of the link the last bag taken came by
        # ordered fan-in: a bag was taken while others stayed delivered (a node reading one bag a
        # call): the next fill offers them again, else they wait for a new bag on another link
        self._again = False
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

    def add_link(self, key: str, reader: R) -> None:
        if hasattr(reader, "views"):
            reader.views = True  # big bags as views of their slots, released once read (Inputs.read, Inputs.view)
        self.links[key] = _Link(key, reader)
        self._relink()

    def remove_link(self, key: str) -> R | None:
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
            fast = self._fill_c
            if fast is not None:
                done = fast(one, one.reader, cell)  # the lines below, in one call
                if done is not None:
                    return done
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
        if self._again:
            self._again = False
            arrived = any(link.pending is not None for link in self._each)
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

    def _broken(self, link: _Link[R], exc: RingError) -> None:
        self.links.pop(link.key, None)
        self._relink()
        self._on_broken(self.name, link.key, exc)

    def waiting_readers(self) -> list[R]:
        """The readers whose next bag would be news to the node: every ``newest`` link, and
        an ``ordered`` link once the node has taken the bag it was given (the next one on
        that link cannot be delivered before)."""
        if self._newest:
            return [link.reader for link in self._each]
        return [link.reader for link in self._each if link.pending is None and not link.backlog]

    def take(self, inherit: bool = True) -> tuple[bytes, _Link[R]] | None:
        """The bag to hand to the node and the link it came by, or None. ``inherit``: its origin
        counts for what the node writes next (not for a bag dropped unused)."""
        chosen = self._one
        if chosen is None or chosen.pending is None:
            chosen = self._choose()
            if chosen is None:
                return None
        got: Any = chosen.pending
        cell = self.origin
        # inherit_origin's rule, written out: this is the per-bag path, where a call costs ~3 % of a
        # bag's read (tests/test_testing_kit.py holds the two to the same answers)
        if inherit and cell is not None and len(got) > 3 and got[2] and (not cell[0] or got[2] < cell[0]):
            cell[0] = got[2]
            cell[1] = got[3]
        chosen.pending = None
        self.last_link = chosen.key
        return got[0], chosen

    def _choose(self) -> _Link[R] | None:
        """The link whose delivered bag goes next (looking at the rings now if none was delivered):
        the one link; else, newest, the latest bag across links (the others discarded, never seen),
        ordered, the earliest published (the arrival order)."""
        candidates = [link for link in self._each if link.pending is not None]
        if not candidates:
            self._fill_now()  # nothing delivered and waiting: look at the rings now
            candidates = [link for link in self._each if link.pending is not None]
            if not candidates:
                return None
        if len(candidates) == 1:
            return candidates[0]
        if not self._newest:
            self._again = True  # the others stay delivered: offered again at the next fill
            return min(candidates, key=lambda link: link.pending[1])  # type: ignore[index]
        chosen = max(candidates, key=lambda link: link.pending[1])  # type: ignore[index]
        for link in candidates:
            if link is not chosen:
                link.pending = None
                link.reader.discard(1)  # an older bag on another link: the node never sees it
        return chosen

    def take_block(self) -> AudioBlock | None:
        raise TypeError(f"input {self.name} is not an audio input")  # (Inputs asks .shaped first)

    def reshape(self, shape: AudioShape) -> None:
        raise TypeError(f"input {self.name} is not an audio input")  # (Inputs asks .shaped first)

    def drop(self) -> bool:
        """Take the next bag without handing it to the node: it counts as dropped, not read."""
        got = self.take(inherit=False)
        if got is None:
            return False
        _release(got)
        got[1].reader.discard(1)
        return True

    def gone(self, link: _Link[R]) -> None:
        """The bag last taken from ``link`` named a frame whose surface was reused before this
        reader got to it: the reader fell behind, so it counts as dropped, like a lapped bag."""
        self.stale += 1
        count = getattr(link.reader, "count_dropped", None)
        if count is not None:
            count()

    def bad(self, link: _Link[R], exc: BaseException) -> None:
        """The bag last taken from ``link`` did not decode: count it on the link, tell the host."""
        link.reader.count_bad()
        self._on_bad(self.name, link.key, exc)


# What the node host is told when a shaped audio input starts its windows again, or gets a bag
# that is not audio: (port, link key, what happened).
AudioTrouble = Callable[[str, str, str], None]


class ShapedInputPort(InputPort[R]):
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

    def add_link(self, key: str, reader: R) -> None:
        super().add_link(key, reader)
        if hasattr(reader, "views"):
            reader.views = False  # audio bags are decoded here, as bytes
        self.shapers[key] = self._shaper(key)

    def remove_link(self, key: str) -> R | None:
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

    def waiting_readers(self) -> list[R]:
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
        if bag is not None and self.origin is not None:
            inherit_origin(self.origin, bag)  # a window's origin: that of the bag that completed it
        return block




class OutputPort:
    def __init__(self, name: str, writer: _Writer) -> None:
        self.name = name
        self.writer = writer
        self.write = writer.write  # the hot path's one lookup; the ring writer takes its own lock
        self.loan = writer.loan


