"""The per-output feed: an exposed output's ring read into its broadcasts' tracks, only while
some track has a subscriber.

Two parts, two threads. ``feed`` is a task on the relay thread's loop: it waits for demand,
claims a ring reader record (on the runtime's loop, through the bridge), starts ``pump`` on a
thread of its own and gives the record back when the pump ends. ``pump`` reads the ring and
writes each bag as one frame (and, for a video output, the H.264 encode of it) to the tracks that
have subscribers; writing to a moq track is thread-safe.

Bags in groups of up to 100 ms (TATOLAB_MOQ_GROUP_MS), not one a group: moq-lite sends each group
on a QUIC stream of its own, the newest first, and a reader's ``next_group`` skips any group that
comes after a newer one it already took. A group per bag at 1 kHz lost 2-166 of 5,000 bags per
reader that kept up, silently. A group's frames travel in order on one stream as they are written
(no added latency), and a group that comes late now has 100 ms of newer bags to be late behind,
not one. A group is numbered by its first bag's number (``Groups``), so a reader that takes each
group's frames knows what it missed: the next group's number less the bags it got (dial.py counts
these for a URL link and ``graph`` shows them). A reader subscribing mid-group gets that group
from its start (at most 100 ms of bags it did not wait for).

Fresh broadcasts after each reading: a moq track keeps the groups (bags) of its last few seconds
however long ago they were written (they expire only as newer groups come), and so does every
relay that forwarded them. A reader subscribing after an earlier one left was handed those stale
bags first, in order; as soon as the feed wrote again they expired under it and moq reset each
with ``old``, which a reader's ``read_frame`` raises (MoqError.Protocol): what several readers of a
1 kHz output through a relay met. So once nobody reads an output that was fed, ``feed`` makes its
broadcasts anew (``Output.renew``): a new reader starts at the next bag. Their groups number on
from the old ones (``bags_sent``, ``video_frames``): a relay that still holds the old broadcast's
groups takes the new ones as newer, not as repeats of ones it has.

Ownership: an ``Output`` is made, changed and dropped by the relay's thread (``serve.py``); its
track maps are only swapped there. Its counters (``bags_sent``, ``dropped``, ``encoding``, ``frames_*``,
``encoder``, ``fed``, ``video_frames``) are written by its pump thread alone and read, unlocked, by
``graph`` and ``feed`` (a count one bag behind is fine; ``feed`` reads ``fed`` only once the pump
ended). ``reader_index`` is written by ``feed`` and read by ``graph``.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from tatolab import _settings as settings
from tatolab._control import paths
from tatolab._links.ring import RingError, RingReader
from tatolab._runtime.lifecycle.nodes import claim_reader, release_reader
from tatolab._runtime.relay.bridge import Bridge
from tatolab._runtime.relay.encoding import EncoderProcess
from tatolab._runtime.relay.wanted import TRACK, VIDEO_TRACK, Serve

WAIT_S = 0.25  # a pump looks at its tracks' subscribers at least this often


@dataclass
class Output:
    serve: Serve
    broadcasts: dict[str, Any] = field(default_factory=dict)  # origin ("loopback"/"public") -> moq.BroadcastProducer
    tracks: dict[str, Any] = field(default_factory=dict)  # same keys -> moq.TrackProducer
    videos: dict[str, Any] = field(default_factory=dict)  # same keys -> moq.MediaProducer (video outputs)
    task: asyncio.Task | None = None
    stopping: asyncio.Task | None = None  # a feeder told to stop: the next one starts after it ended
    bags_sent: int = 0
    dropped: int = 0  # bags its ring's writer lapped the relay's reader on (the relay fell behind), ever
    reader_index: int | None = None  # the ring's reader record it holds while someone subscribes
    encoding: bool = False  # its H.264 encoder is open (someone reads its video track)
    encodes: int = 0  # how many times an encoder was started for it
    frames_encoded: int = 0
    frames_skipped: int = 0  # frames the encoder was too slow for (video readers only)
    encoder: str = ""  # the FFmpeg encoder that opened
    encoder_process: EncoderProcess | None = None  # its encoder's process, kept across readers (its restarts)
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # a track was added: its feeder looks again
    made: dict[str, tuple[Any, bytes | None]] = field(default_factory=dict)  # key -> (origin, init) published with
    fed: bool = False  # something was written to its tracks since its broadcasts were made
    video_frames: int = 0  # frames written to its video tracks, ever: a new video track numbers its groups past them

    def publish(self, key: str, origin: Any, init: bytes | None) -> None:
        """Make its broadcast in ``origin`` (its track of bags, and its video track when ``init``,
        the H.264 parameter sets, is given), under ``key`` (relay thread)."""
        broadcast = origin.create_broadcast(self.serve.path)
        self.tracks[key] = broadcast.publish_track(TRACK)
        if init is not None:
            self.videos[key] = publish_video(broadcast, init)
            if self.video_frames:
                self.videos[key].seek(self.video_frames)
        broadcast.announce()
        self.broadcasts[key] = broadcast
        self.made[key] = (origin, init)
        self.changed.set()

    def unpublish(self, key: str) -> None:
        """End its broadcast under ``key`` (relay thread); its subscribers see it end."""
        broadcast = self.broadcasts.pop(key, None)
        self.tracks.pop(key, None)
        self.videos.pop(key, None)
        self.made.pop(key, None)
        if broadcast is not None:
            broadcast.close()

    def renew(self) -> None:
        """Make each of its broadcasts anew, empty (relay thread, while nobody reads it): a reader
        coming next starts at the next bag, not at the bags moq still holds from the last reading
        (module docstring)."""
        for key, (origin, init) in list(self.made.items()):
            self.unpublish(key)
            self.publish(key, origin, init)
        self.fed = False

    def producers(self) -> list[Any]:
        """Every track of it that can have subscribers."""
        return [*self.tracks.values(), *self.videos.values()]

    def start_feeding(self, bridge: Bridge) -> None:
        """Start its feeder unless one runs (relay thread)."""
        if self.task is None or self.task.done():
            self.task = bridge.loop.create_task(feed(self, bridge))

    def stop_feeding(self) -> None:
        """Stop its feeder; the next one starts only after this one ended (relay thread)."""
        if self.task is not None:
            self.task.cancel()
            self.stopping, self.task = self.task, None


async def feed(output: Output, bridge: Bridge) -> None:
    """Read the output's ring only while some track of it has a subscriber."""
    loop = bridge.loop
    if output.stopping is not None:  # never two feeders writing the same bags
        await asyncio.gather(output.stopping, return_exceptions=True)
        output.stopping = None
    while True:
        output.changed.clear()
        demands = [track.demand() for track in output.producers()]
        if not demands:
            return
        if not any(d.is_used() for d in demands):
            if output.fed:  # read before, by readers now gone: what its tracks hold is stale
                output.renew()
                continue
            waits = [loop.create_task(d.used()) for d in demands] + [loop.create_task(output.changed.wait())]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
            continue
        out = output.serve.out
        try:
            index = await bridge.on_main(claim_reader, out)
        except RingError as exc:
            bridge.say("warning", f"MoQ relay cannot read {output.serve.path}: {exc}")
            await asyncio.Event().wait()  # until the next sync replaces or drops this output
        output.reader_index = index
        stop = threading.Event()
        pumped: asyncio.Future = loop.create_future()

        def run() -> None:
            try:
                pump(output, out.base, index, stop, bridge.say)
                outcome: BaseException | None = None
            except BaseException as exc:  # told to the relay's loop below
                outcome = exc
            loop.call_soon_threadsafe(lambda: None if pumped.done() else pumped.set_result(outcome))

        threading.Thread(target=run, name=f"tatolab-moq-feed {output.serve.path}", daemon=True).start()
        try:
            failed = await asyncio.shield(pumped)
            if isinstance(failed, RingError):  # the stream stopped under us; the next sync drops it
                bridge.say("info", f"MoQ relay stopped reading {output.serve.path}: {failed}")
                await asyncio.Event().wait()
            elif failed is not None:
                bridge.say("error", f"MoQ relay stopped reading {output.serve.path}: {failed!r}")
                await asyncio.Event().wait()
        finally:
            stop.set()
            await asyncio.shield(pumped)  # the reader is closed before its record is given back
            if output.reader_index == index:
                output.reader_index = None
            await asyncio.shield(bridge.on_main(release_reader, out, index))


def publish_video(broadcast: Any, init: bytes) -> Any:
    """A video output's H.264 track in the moq-dev media format (it also writes the catalog)."""
    import moq

    return broadcast.publish_video(moq.VideoFormat.AVC3, init, track=VIDEO_TRACK,
                                   hint=moq.VideoHint(optimize_for_latency=True))


def pump(output: Output, base: str, index: int, stop: threading.Event, say: Any) -> None:
    """On a thread of its own: ring -> the tracks that have subscribers, each bag one frame,
    until none has (or ``stop``). A video output's bags are also encoded to H.264 for its
    video tracks while any of them has a subscriber: one encode, shared by every reader, in a
    process of its own (encoding.py), so FFmpeg never runs in the runtime's process."""
    reader = RingReader(base, index, "ordered", start="now")
    demands: dict[int, tuple[Any, Any]] = {}
    groups = Groups(group_ns())
    dropped_seen = reader.dropped
    encoder: EncoderProcess | None = None
    try:
        while not stop.is_set():
            tracks = output.producers()
            if len(demands) != len(tracks) or any(id(t) not in demands for t in tracks):
                demands = {id(t): (t, t.demand()) for t in tracks}
            used = [t for t, d in demands.values() if d.is_used()]
            if not used:
                return
            videos = [t for t in used if any(t is v for v in output.videos.values())]
            bags = [t for t in used if not any(t is v for v in output.videos.values())]
            if videos and encoder is None:
                if output.encoder_process is None:
                    output.encoder_process = EncoderProcess(paths.surface_pool(), output.serve.path, say)
                encoder = output.encoder_process
                output.encoding = True
                output.encodes += 1
            elif not videos and encoder is not None:
                encoder.dispose()  # the last video reader left: the encoder stops
                encoder = None
                output.encoding = False
            if bags:  # every bag already written, in one pass (a thread woken once per bag falls behind sooner)
                batch = reader.read_many()
                if reader.dropped != dropped_seen:  # the ring lapped us: said in graph's network (relay.py)
                    output.dropped += reader.dropped - dropped_seen
            else:  # video only: the newest frame; an encoder behind its source skips, never lags
                backlog = reader.read_many()
                batch = backlog[-1:]
                if len(backlog) > 1:
                    reader.discard(len(backlog) - 1)
                    output.frames_skipped += len(backlog) - 1
            dropped_seen = reader.dropped
            if not batch:
                reader.wait(WAIT_S)
                continue
            groups.close_except(bags)  # a track no longer read (or renewed): its open group ends
            for payload, publish_ns in batch:
                for track in bags:
                    groups.write(track, output.bags_sent, payload, publish_ns)
                if bags:
                    output.bags_sent += 1
                    output.fed = True
                if encoder is not None:
                    encode(output, encoder, videos, payload)
    finally:
        groups.close_except([])
        if encoder is not None:
            encoder.dispose()
            output.encoding = False
        reader.close()


def encode(output: Output, encoder: EncoderProcess, videos: list[Any], payload: bytes) -> None:
    """One video bag through the output's encoder, to its video tracks."""
    for data, stamp_us, _keyframe in encoder.encode(payload):
        for video in videos:
            video.write_frame(data, stamp_us)  # groups start at its keyframes
        output.video_frames += 1
        output.fed = True
    output.frames_encoded, output.encoder = encoder.frames, encoder.name


def group_ns() -> int:
    """How long one group of bags spans (TATOLAB_MOQ_GROUP_MS), in ns."""
    return settings.value("TATOLAB_MOQ_GROUP_MS") * 1_000_000


class Groups:
    """The open group of each bag track (pump thread only). A group holds the bags of up to
    ``span_ns`` (by their publish time), in order on one QUIC stream, and is numbered by its first
    bag's number since the output was first read (``bags_sent``): a reader that sees group n+k
    after group n's k bags missed none; any more is the count it missed (module docstring)."""

    def __init__(self, span_ns: int) -> None:
        self.span_ns = span_ns
        self.open: dict[int, tuple[Any, Any, int]] = {}  # id(track) -> (track, its group, first bag's publish_ns)

    def write(self, track: Any, number: int, payload: bytes, publish_ns: int) -> None:
        """Bag ``number`` to ``track``: into its open group while that spans less than ``span_ns``,
        else into a new group numbered ``number`` (a new track's first group numbers on too)."""
        held = self.open.get(id(track))
        if held is not None and held[0] is track and publish_ns - held[2] < self.span_ns:
            held[1].write_frame(payload, publish_ns // 1000)
            return
        if held is not None:
            self.close(id(track))
        group = track.create_group(number)
        group.write_frame(payload, publish_ns // 1000)
        self.open[id(track)] = (track, group, publish_ns)

    def close_except(self, tracks: list[Any]) -> None:
        """Finish the open group of every track not in ``tracks``."""
        keep = {id(t) for t in tracks}
        for key in [k for k in self.open if k not in keep]:
            self.close(key)

    def close(self, key: int) -> None:
        _track, group, _started = self.open.pop(key)
        try:
            group.finish()
        except Exception:  # its track was closed under it (unpublished): nothing to end
            pass
