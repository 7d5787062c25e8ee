"""The recorder's loop: rings in, one MCAP file out (run by ``python -m tatolab._recorder``)."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tatolab import _bags
from tatolab._links.ring import RingError, RingReader, wait_any
from tatolab._recorder import compressed, formats
from tatolab._recorder.file import COMPRESSIONS, DiskFull, McapFile
from tatolab._recorder.video import FrameEncoder, Unencodable
from tatolab._recorder.when import compile_when
from tatolab._recorder.window import Item, Windows, numbered
from tatolab._surfaces import pool as surfaces
from tatolab._surfaces.frame import VideoFrame

READ_RUN = 256
REPORT_S = 0.5
QUEUE_BYTES = 64 << 20  # frames read but not yet written, at most (then frames are missed, counted): 8 at 1080p
SCHEMA_WAIT_S = 0.5  # a JSON channel's schema is inferred from its first bags, or those of its first half second
RAW_MAX_PIXELS = 640 * 360  # --video auto: frames up to this are recorded raw, larger ones as H.264
ENCODE_QUEUE = 12  # frames waiting for a channel's encoder, at most (then frames are missed, counted): 0.4 s
# at 30 fps, 37 MB at 1080p (YUV 4:2:0), to ride out a keyframe's longer encode
VIDEO_CHOICES = ("auto", "h264", "raw")


@dataclass
class Source:
    address: str
    base: str  # the output's ring
    reader: int  # the reader record the runtime claimed for this recording


@dataclass
class Spec:
    path: Path
    sources: list[Source]
    pool: str | None = None
    seconds: float | None = None
    bags: int | None = None
    compression: str = "zstd"
    profile: str = "ordered"
    start: str = "now"  # or "beginning": the bags still in the rings, written before the recording began
    video: str = "auto"  # frames: h264 (encoded here), raw (RawImage), auto (h264 above RAW_MAX_PIXELS)
    trigger: Source | None = None  # --on: each of its bags (that --when passes) opens or extends a window
    when: str | None = None
    before: float = 30.0  # seconds kept before a trigger, and written after it
    after: float = 10.0
    max_mb: float = 512.0  # the ring's bound in memory
    split_mb: float | None = None  # a new numbered file past this size...
    split_seconds: float | None = None  # ... or this long

    before_after: bool = False  # windows without a trigger output: triggered by `record --trigger` alone

    @property
    def windowed(self) -> bool:
        return self.trigger is not None or self.before_after

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Spec:
        spec = cls(path=Path(data["path"]), sources=[Source(**s) for s in data["sources"]], pool=data.get("pool"),
                   seconds=data.get("seconds"), bags=data.get("bags"),
                   compression=data.get("compression", "zstd"), profile=data.get("profile", "ordered"),
                   start=data.get("start", "now"), video=data.get("video") or "auto",
                   trigger=Source(**data["trigger"]) if data.get("trigger") else None, when=data.get("when"),
                   before=float(data.get("before") or 30.0), after=float(data.get("after") or 10.0),
                   max_mb=float(data.get("max_mb") or 512.0), split_mb=data.get("split_mb"),
                   split_seconds=data.get("split_seconds"))
        spec.before_after = bool(data.get("windowed"))
        if spec.video not in VIDEO_CHOICES:
            raise ValueError(f"video must be one of {', '.join(VIDEO_CHOICES)}")
        if spec.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}")
        return spec


@dataclass
class _Channel:
    address: str
    reader: RingReader
    kind: str | None = None
    id: int | None = None
    pending: list[tuple[Any, tuple[int, int], int]] = field(default_factory=list)
    first_ns: int = 0
    bags: int = 0
    bytes: int = 0
    error: str | None = None
    encoder: FrameEncoder | None = None  # frames recorded as H.264: encoded here
    keyed: bool = False  # a packets channel reached its first keyframe (the ones before cannot be decoded)
    first_bags: list[Any] = field(default_factory=list)  # a JSON channel's schema sample
    wait_for_key: bool = False  # a split opened a new file: its H.264 starts at the next keyframe
    restart_encoder: bool = False  # ... and the encoder starts again (its thread), so that comes at once
    frames: queue.Queue[Any] | None = None  # frames taken, waiting for its encoder thread
    encoding: threading.Thread | None = None


class Recorder:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        if spec.pool:
            surfaces.configure(spec.pool)
        self.to_wall = time.time_ns() - time.monotonic_ns()  # log times on the Unix clock; rings use the monotonic one
        self.windows: Windows | None = None
        self.file: McapFile | None = None
        self.when = compile_when(spec.when) if spec.when else None  # BadExpression: refused before anything
        self.splitting = spec.split_mb is not None or spec.split_seconds is not None
        self.files: list[dict[str, Any]] = []  # split: each file written
        if spec.windowed:
            self.windows = Windows(spec.path, spec.compression, spec.before, spec.after, int(spec.max_mb * 1e6),
                                   self.to_wall)
        else:
            self.file = self._next_file()
        self.trigger = None if spec.trigger is None else RingReader(spec.trigger.base, spec.trigger.reader,
                                                                    "ordered", start="now", origins=True)
        self.triggers: queue.Queue[int] = queue.Queue()  # trigger times (monotonic ns), from any thread
        self.channels = [_Channel(s.address, RingReader(s.base, s.reader, spec.profile, start=spec.start, origins=True))
                         for s in spec.sources]
        self.started = time.monotonic()
        self.total = 0
        self.error: str | None = None
        self._queued = 0  # bytes read but not yet written
        self._queued_lock = threading.Lock()

    def run(self, stopping: threading.Event, report: Callable[[dict[str, Any]], None]) -> str:
        """Record until asked to stop, the seconds or bags are reached, or the disk is full.

        A thread of its own reads the rings (and copies frames out of the pool) into a queue; this
        one writes the file. So a slow write (a big frame through the library, a busy disk) never
        keeps the rings from being read: a 1 kHz output is not lapped while a frame is written.
        What the queue cannot hold (QUEUE_BYTES) counts as dropped."""
        spec = self.spec
        deadline = None if spec.seconds is None else self.started + spec.seconds
        taken: queue.Queue[tuple[_Channel, Any, tuple[int, int]]] = queue.Queue()
        done = threading.Event()
        reading = threading.Thread(target=self._read, args=(done, taken), name="rings", daemon=True)
        reading.start()
        last_report = time.monotonic()
        reason = None
        try:
            while reason is None:
                if stopping.is_set():
                    reason = "stopped"
                    break
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    reason = "seconds"
                    break
                if now - last_report >= REPORT_S:
                    last_report = now
                    report(self.summary())
                try:
                    channel, item, stamp = taken.get(timeout=0.05)
                except queue.Empty:
                    item = None
                if item is not None:
                    self._dequeued(item)
                    self._add(channel, item, stamp)
                    if spec.bags is not None and self.total >= spec.bags:
                        reason = "bags"
                for waiting in self.channels:
                    if waiting.pending and time.monotonic_ns() - waiting.first_ns > SCHEMA_WAIT_S * 1e9:
                        self._open(waiting)
                if self.windows is not None:
                    while not self.triggers.empty():
                        self.windows.trigger(self.triggers.get())
                    self.windows.tick(time.monotonic_ns())
            done.set()
            reading.join()
            self._stop_encoders()  # the frames they hold are encoded first
            while reason in ("stopped", "seconds") and not taken.empty():  # what was read before the end
                channel, item, stamp = taken.get()
                self._add(channel, item, stamp)
        except DiskFull as exc:
            done.set()
            reading.join()
            self._stop_encoders()
            self.error = f"the disk took no more ({exc.strerror}): the recording stopped"
            return "disk full"
        return reason

    def _read(self, done: threading.Event, taken: queue.Queue[tuple[_Channel, Any, tuple[int, int]]]) -> None:
        readers = [c.reader for c in self.channels] + ([self.trigger] if self.trigger is not None else [])
        while not done.is_set():
            wait_any(readers, 0.05)
            for channel in self.channels:
                self._drain(channel, taken)
            if self.trigger is not None:
                self._triggered()

    def _triggered(self) -> None:
        """The trigger output's new bags: each that --when passes is a trigger at its ring time."""
        assert self.trigger is not None
        try:
            run = self.trigger.read_many(READ_RUN)
        except RingError:
            return
        for payload, publish_ns, _origin_ns, _origin in run:
            try:
                bag = _bags.decode(payload)
            except ValueError:
                continue
            if self.when is None or self.when(bag):
                self.triggers.put(publish_ns)

    def _dequeued(self, item: Any) -> None:
        with self._queued_lock:
            self._queued -= len(item) if isinstance(item, bytes) else 0

    def _drain(self, channel: _Channel, taken: queue.Queue[tuple[_Channel, Any, tuple[int, int]]]) -> None:
        try:
            run = channel.reader.read_many(READ_RUN)
        except RingError as exc:
            channel.error = str(exc)
            return
        for payload, publish_ns, origin_ns, _origin in run:
            try:
                bag = _bags.decode(payload)
            except ValueError:
                channel.reader.count_bad()
                continue
            if channel.kind is None:
                channel.kind = self._kind(channel, bag)
            item: Any = bag  # a JSON channel's bag, or a video or audio channel's encoded message
            if channel.kind == "compressed":
                stamp = (publish_ns, origin_ns)
                for message in self._compressed(channel, bag, stamp, taken):
                    with self._queued_lock:
                        self._queued += len(message)
                    taken.put((channel, message, stamp))
                continue
            if channel.kind == "video":
                if self._queued >= QUEUE_BYTES:  # the file is that far behind: this frame is missed
                    channel.reader.count_dropped()
                    continue
                item = self._frame(channel, bag)
                if item is None:
                    continue
            elif channel.kind == "audio":
                item = formats.encode_audio(bag)
            if isinstance(item, bytes):
                with self._queued_lock:
                    self._queued += len(item)
            taken.put((channel, item, (publish_ns, origin_ns)))

    def _kind(self, channel: _Channel, bag: Any) -> str:
        """Its channel's kind, from its first bag: an encoder's packets and (by --video) frames are
        ``compressed`` (foxglove.CompressedVideo)."""
        kind = formats.kind_of(bag)
        if kind == "json" and compressed.is_packet(bag):
            return "compressed"
        if kind == "video":
            pixels = int(bag["width"]) * int(bag["height"])
            if self.spec.video == "h264" or (self.spec.video == "auto" and pixels > RAW_MAX_PIXELS):
                channel.encoder = FrameEncoder()
                return "compressed"
        return kind

    def _compressed(self, channel: _Channel, bag: Any, stamp: tuple[int, int], taken: queue.Queue[Any]) -> list[bytes]:
        """A packet's bag as its CompressedVideo message; or a frame taken for the channel's encoder
        thread, which puts its packets' messages in ``taken`` (so an encode never holds up the rings)."""
        if channel.encoder is None:
            if not compressed.is_packet(bag):
                channel.reader.count_bad()  # not a packet on a packets channel
                return []
            if not channel.keyed and not bag.get("keyframe"):
                return []  # the file starts at a keyframe: a player can decode it from its first message
            channel.keyed = True
            return [compressed.encode(bag, channel.address)]
        if channel.frames is None:
            channel.frames = queue.Queue(ENCODE_QUEUE)
            channel.encoding = threading.Thread(target=self._encode, args=(channel, taken), daemon=True,
                                                name=f"encode {channel.address}")
            channel.encoding.start()
        if self._queued >= QUEUE_BYTES or channel.frames.full():  # the encoder is that far behind: missed
            channel.reader.count_dropped()
            return []
        picture = FrameEncoder.take(bag)
        if picture is None:  # its surface was reused before this reader got to it
            channel.reader.count_dropped()
            return []
        channel.frames.put((bag, picture, stamp))
        return []

    def _encode(self, channel: _Channel, taken: queue.Queue[Any]) -> None:
        """A frame channel's encoder thread: frames taken in, CompressedVideo messages into ``taken``."""
        assert channel.frames is not None
        while (item := channel.frames.get()) is not None:
            bag, picture, stamp = item
            if channel.restart_encoder:
                channel.restart_encoder = False
                channel.encoder = FrameEncoder()
            assert channel.encoder is not None
            try:
                packets = channel.encoder.encode(bag, picture)
            except Unencodable as exc:
                channel.error = str(exc)
                channel.reader.count_dropped()
                continue
            except Exception as exc:  # noqa: BLE001 - FFmpeg fails in many ways: said, and the frame missed
                channel.error = f"encoding a frame failed: {exc}"
                channel.reader.count_dropped()
                continue
            for packet in packets:
                message = compressed.encode(packet, channel.address)
                with self._queued_lock:
                    self._queued += len(message)
                taken.put((channel, message, stamp))

    def _stop_encoders(self) -> None:
        for channel in self.channels:
            if channel.frames is not None and channel.encoding is not None:
                channel.frames.put(None)
                channel.encoding.join()

    def _frame(self, channel: _Channel, bag: dict[str, Any]) -> bytes | None:
        try:
            frame = VideoFrame.open(bag)
        except surfaces.SurfaceError:  # reused before this reader got to it: missed, like a lapped bag
            channel.reader.count_dropped()
            return None
        try:
            return formats.encode_video(bag, frame._memory(), channel.address)
        finally:
            frame.release()

    def _add(self, channel: _Channel, item: Any, stamp: tuple[int, int]) -> None:
        """A bag (JSON channels) or an encoded message (video, audio) into the file."""
        self.total += 1
        channel.bags += 1
        if channel.id is None:
            if not channel.pending:
                channel.first_ns = time.monotonic_ns()
            channel.pending.append((item, stamp, channel.bags))
            if channel.kind != "json" or len(channel.pending) >= formats.SCHEMA_SAMPLE:
                self._open(channel)
            return
        self._write(channel, item, stamp, channel.bags)

    def _next_file(self) -> McapFile:
        """The file to write (split: the next numbered one, ``out-1.mcap``..., never one that exists)."""
        if not self.splitting:
            return McapFile(self.spec.path, compression=self.spec.compression)
        file = numbered(self.spec.path, len(self.files) + 1, self.spec.compression)
        self.files.append({"path": str(file.path), "state": "writing", "bags": 0, "opened": time.monotonic()})
        return file

    def _split(self) -> None:
        """Finish this file (indexed) and go on in the next, each channel registered there anew; an
        H.264 channel starts it at a keyframe (its encoder starts again; packets wait for the next)."""
        assert self.file is not None
        self.file.finish()
        self.files[-1].update(state="done", bytes=self.file.size)
        self.file = self._next_file()
        for channel in self.channels:
            if channel.id is not None:
                channel.id = self.file.channel(channel.address, channel.kind or "json", channel.first_bags)
                channel.wait_for_key = channel.kind == "compressed"
                channel.restart_encoder = channel.encoder is not None

    def _due_split(self) -> bool:
        assert self.file is not None
        spec, opened = self.spec, self.files[-1]["opened"]
        return (spec.split_mb is not None and self.file.size >= spec.split_mb * 1e6) or \
            (spec.split_seconds is not None and time.monotonic() - opened >= spec.split_seconds)

    def _open(self, channel: _Channel) -> None:
        first = [bag for bag, _, _ in channel.pending] if channel.kind == "json" else []
        channel.first_bags = first
        # windows register the channel in each file they open (window.py)
        channel.id = 0 if self.file is None else self.file.channel(channel.address, channel.kind or "json", first)
        pending, channel.pending = channel.pending, []
        for item, stamp, sequence in pending:
            self._write(channel, item, stamp, sequence)

    def _write(self, channel: _Channel, item: Any, stamp: tuple[int, int], sequence: int) -> None:
        data = formats.encode_json(item) if channel.kind == "json" else item
        publish_ns, origin_ns = stamp
        # log time: when the bag was written to its ring; publish time: its origin (../_links/latency.py),
        # when its path began (a source's bag: the same); both on the Unix clock
        if self.windows is not None:
            self.windows.add(Item(channel.address, channel.kind or "json", channel.first_bags, data,
                                  publish_ns + self.to_wall, (origin_ns or publish_ns) + self.to_wall, sequence,
                                  publish_ns))
        else:
            assert self.file is not None
            if channel.wait_for_key:
                if not compressed.keyframe_of(data):
                    return  # a split file's video starts at a keyframe
                channel.wait_for_key = False
            self.file.add(channel.id or 0, publish_ns + self.to_wall, (origin_ns or publish_ns) + self.to_wall, data,
                          sequence)
            if self.splitting:
                self.files[-1]["bags"] += 1
                if self._due_split():
                    self._split()
        channel.bytes += len(data)

    @property
    def path(self) -> Path:
        """The file it writes (the next free name when ``--out`` was taken); split and before/after
        recordings: ``--out`` itself, which names their numbered files."""
        if self.file is not None and not self.splitting:
            return self.file.path
        return self.spec.path

    def summary(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "bytes": self.file.size if self.file is not None else self.windows.size if self.windows else 0,
            "seconds": round(time.monotonic() - self.started, 3),
            "channels": {c.address: {"kind": c.kind, "bags": c.bags, "dropped": c.reader.dropped + c.reader.bad,
                                     "bytes": c.bytes, **({"error": c.error} if c.error else {})}
                         for c in self.channels},
            **(self.windows.state() if self.windows is not None else {}),
            **({"files": [{k: v for k, v in f.items() if k != "opened"} for f in self.files]}
               if self.windows is None and self.splitting else {}),
        }

    def close(self, reason: str) -> dict[str, Any]:
        """Finish the file (unless the disk is full: then it ends at its last whole chunk)."""
        if reason != "disk full":
            try:
                for channel in self.channels:
                    if channel.pending:
                        self._open(channel)
                if self.file is not None:
                    self.file.finish()
                    if self.splitting:
                        self.files[-1].update(state="done", bytes=self.file.size)
                if self.windows is not None:
                    self.windows.close()  # a window still open ends here, finished and indexed
            except DiskFull as exc:
                reason, self.error = "disk full", f"the disk took no more ({exc.strerror}): the recording stopped"
        for channel in self.channels:
            channel.reader.close()
        if self.trigger is not None:
            self.trigger.close()
        # else only the file's header is there
        readable = reason != "disk full" or self.file is None or self.file.chunks_on_disk > 0
        return {**self.summary(), "reason": reason, "indexed": reason != "disk full", "readable": readable,
                **({"error": self.error} if self.error else {})}
