"""Mp4Sink: encoded packets from many links into one fragmented MP4, one track per link.

PyAV (FFmpeg's mov muxer) writes the file: ``empty_moov`` puts the tracks' descriptions first
(``delay_moov`` holds them until the first fragment, so a track that starts later than another
keeps its offset as an edit list), then each fragment (moof + mdat, about ``fragment_ms``) is written and flushed when complete, so
a killed process leaves a file that plays up to its last complete fragment. Streams are added
from a template stream so that the muxer never opens an encoder: the packets' own
``extradata`` describes each track (the mov muxer turns Annex B parameters into avcC/hvcC).
"""

from __future__ import annotations

import io
import os
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from tatolab._sdk import builtins as described
from tatolab._sdk.builtins import Mp4SinkConfig, implements
from tatolab._sdk.packets import EncodedPacket
from tatolab._sdk.context import RuntimeContextLimitedAccess

START_WAIT_S = 1.0  # how long the first file waits for every wired link's first packet
REPORT_EVERY_S = 0.1
VIDEO_TIME_BASE = Fraction(1, 90_000)
TEMPLATE_CODECS = {"h264": "libx264", "hevc": "libx265", "opus": "libopus", "aac": "aac"}


class Track:
    """One link's packets: what its track in the file needs to know, and where it is."""

    def __init__(self, key: str, first: EncodedPacket) -> None:
        self.key = key
        self.codec = first.codec
        self.video = first.is_video
        self.extradata = first.extradata
        self.width, self.height = first.width, first.height
        self.sample_rate, self.channels = first.sample_rate or 48_000, first.channels or 2
        self.pending: list[EncodedPacket] = []  # before its file starts
        self.stream: Any = None
        self.waiting_keyframe = self.video
        self.last_dts: int | None = None
        self.packets = 0
        self.first_ns = 0
        self.last_end_ns = 0

    @property
    def time_base(self) -> Fraction:
        return VIDEO_TIME_BASE if self.video else Fraction(1, self.sample_rate)

    def same_format(self, packet: EncodedPacket) -> bool:
        if packet.codec != self.codec:
            return False
        if self.video:
            return (packet.width, packet.height) == (self.width, self.height) and \
                (not packet.extradata or packet.extradata == self.extradata)
        return True

    def describe(self) -> dict[str, Any]:
        return {"link": self.key, "codec": self.codec, "packets": self.packets,
                "first_ns": self.first_ns or None, "last_end_ns": self.last_end_ns or None}


def file_name(path: Path, numbered: bool) -> Path:
    """``path`` itself when free and not ``numbered``, else the first free ``<stem>-NNNN<suffix>``:
    a recording already there (a previous run, or this node before a restart) is never overwritten."""
    if not numbered and not path.exists():
        return path
    n = 1
    while True:
        candidate = path.with_name(f"{path.stem}-{n:04d}{path.suffix or '.mp4'}")
        if not candidate.exists():
            return candidate
        n += 1


@implements
class Mp4Sink(described.Mp4Sink):
    def __init__(self, config: Mp4SinkConfig) -> None:
        self.config = config
        self.rotating = (config.rotate_seconds is not None or config.rotate_mb is not None
                         or config.rotate_gap_ms is not None)
        self.tracks: dict[str, Track] = {}
        self.container: Any = None
        self.path: Path | None = None
        self.files: list[str] = []
        self.origin_ns = 0
        self.file_size = 0
        self.fragments = 0
        self.buffering_since: float | None = None
        self.bad = self.late = self.skipped = 0
        self.reported = 0.0

    # -- packets in ------------------------------------------------------------------------

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        bag = ctx.inputs.read("tracks")
        if bag is None:
            return
        key = ctx.inputs.link("tracks") or "?"
        try:
            packet = EncodedPacket.from_bag(bag)
        except (ValueError, TypeError) as exc:
            self.bad += 1
            ctx.log.every(100, "warning",
                          f"stream {ctx.stream}, node {ctx.node}, input tracks, link {key}: skipped a bag "
                          f"that is not an encoded packet ({exc}); connect an encoder's packets output",
                          link=key, bad=self.bad)
            return
        track = self.tracks.get(key)
        if track is None:
            track = self.tracks[key] = Track(key, packet)
            ctx.log.info(f"node {ctx.node}: track {len(self.tracks)} is {packet.codec} from {key}", link=key)
        elif not track.same_format(packet):
            if track.video and not packet.keyframe:
                return  # the new format starts at its keyframe
            ctx.log.info(f"node {ctx.node}: {key} changed format ({packet.codec} {packet.width}x{packet.height}); "
                         "a new file starts", link=key)
            self.tracks[key] = track = Track(key, packet)
            self._close(ctx)
        if self.container is None:
            self._buffer(ctx, track, packet)
        elif track.stream is None:  # a link that joined after the file started: a new file, with it
            if track.video and not packet.keyframe:
                return
            self._close(ctx)
            self._buffer(ctx, track, packet)
        else:
            if self._rotation_due(packet):
                self._close(ctx)
                self._buffer(ctx, track, packet)
            else:
                self._write(ctx, track, packet)
        self._report(ctx)

    def _buffer(self, ctx: RuntimeContextLimitedAccess, track: Track, packet: EncodedPacket) -> None:
        """Before a file starts: keep packets (video from a keyframe) until every wired link has one."""
        if track.video and not track.pending and not packet.keyframe:
            self.skipped += 1
            return
        track.pending.append(packet)
        if self.buffering_since is None:
            self.buffering_since = time.monotonic()
        wired = set(ctx.inputs.links("tracks"))
        ready = {key for key, t in self.tracks.items() if t.pending}
        if wired <= ready or time.monotonic() - self.buffering_since > START_WAIT_S:
            self._start(ctx)

    def _rotation_due(self, packet: EncodedPacket) -> bool:
        if not self.rotating:
            return False
        if any(t.video for t in self.tracks.values()) and not (packet.is_video and packet.keyframe):
            return False  # a new file starts at a keyframe
        seconds, mb, gap = self.config.rotate_seconds, self.config.rotate_mb, self.config.rotate_gap_ms
        last_end = max((t.last_end_ns for t in self.tracks.values()), default=0)
        return (seconds is not None and packet.timestamp_ns - self.origin_ns >= seconds * 1e9) or \
            (mb is not None and self.file_size >= mb * 1e6) or \
            (gap is not None and last_end > 0 and packet.timestamp_ns - last_end >= gap * 1e6)

    # -- the file --------------------------------------------------------------------------

    def _start(self, ctx: RuntimeContextLimitedAccess) -> None:
        import av

        pending = [t for t in self.tracks.values() if t.pending]
        # presentation time 0 is the earliest frame; a B-frame stream's first decode times fall
        # before it, which the muxer shifts (all tracks alike) and covers with an edit list
        self.origin_ns = min(p.timestamp_ns for t in pending for p in t.pending)
        self.path = file_name(Path(self.config.path), self.rotating)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.container = self._open(av, self.path)
        except (OSError, av.error.FFmpegError) as exc:
            raise RuntimeError(
                f"stream {ctx.stream}, node {ctx.node}: cannot write {self.path.resolve()}: {exc}. "
                "Give Mp4Sink a path= in a folder you can write (relative paths are in the project)"
            ) from None
        templates = av.open(io.BytesIO(), "w", format="mp4")  # streams to copy from, never written
        try:
            for track in self.tracks.values():
                track.stream = self._add_stream(templates, track)
                track.waiting_keyframe = track.video
                track.last_dts = None
        finally:
            templates.close()
        self.files.append(str(self.path))
        self.file_size = self.fragments = 0
        self.buffering_since = None
        ctx.log.info(f"node {ctx.node}: recording {len(self.tracks)} track(s) into {self.path}",
                     path=str(self.path), tracks=[t.key for t in self.tracks.values()])
        queued = [(p.timestamp_ns, t, p) for t in pending for p in t.pending]
        queued.sort(key=lambda entry: entry[0])  # stable: each track's own order holds
        for track in pending:
            track.pending = []
        for _, track, packet in queued:
            self._write(ctx, track, packet)

    def _open(self, av: Any, path: Path) -> Any:
        return av.open(str(path), "w", format="mp4", container_options={
            "movflags": "frag_keyframe+empty_moov+delay_moov+default_base_moof",
            "frag_duration": str(self.config.fragment_ms * 1000),
            "flush_packets": "1",  # each fragment reaches the file as it is finished
            # a link that goes quiet must not hold the others' packets back (FFmpeg waits 10 s)
            "max_interleave_delta": str(self.config.fragment_ms * 1000),
        })

    def _add_stream(self, templates: Any, track: Track) -> Any:
        template = templates.add_stream(TEMPLATE_CODECS[track.codec])
        stream = self.container.add_stream_from_template(template, opaque=False)
        context = stream.codec_context
        if track.video:
            context.width, context.height = track.width, track.height
        else:
            context.sample_rate = track.sample_rate
            context.layout = "mono" if track.channels == 1 else "stereo"
        if track.extradata:
            context.extradata = track.extradata
        stream.time_base = track.time_base
        return stream

    def _write(self, ctx: RuntimeContextLimitedAccess, track: Track, packet: EncodedPacket) -> None:
        import av

        if track.waiting_keyframe:
            if not packet.keyframe:
                self.skipped += 1
                return
            track.waiting_keyframe = False
        base = track.time_base
        pts = _ticks(packet.timestamp_ns - self.origin_ns, base)
        dts = _ticks(_dts_ns(packet) - self.origin_ns, base)
        if pts < 0 or (track.last_dts is not None and dts <= track.last_dts):
            self.late += 1  # before the file's start, or out of order: the muxer would refuse it
            return
        track.last_dts = dts
        raw = av.Packet(packet.data)
        raw.pts, raw.dts = max(pts, dts), dts
        raw.duration = _ticks(packet.duration_ns, base)
        raw.time_base = base
        raw.stream = track.stream
        raw.is_keyframe = packet.keyframe
        self.container.mux(raw)
        track.packets += 1
        track.first_ns = track.first_ns or packet.timestamp_ns
        track.last_end_ns = packet.timestamp_ns + packet.duration_ns
        size = os.stat(self.path).st_size if self.path is not None else 0
        if size != self.file_size:
            self.file_size = size
            self.fragments += 1

    def _close(self, ctx: RuntimeContextLimitedAccess) -> None:
        if self.container is None:
            return
        try:
            self.container.close()  # the last fragment and the index (mfra)
        except Exception as exc:  # noqa: BLE001 - the fragments already written stay playable
            ctx.log.warning(f"node {ctx.node}: finishing {self.path} failed: {exc}", path=str(self.path))
        self.container = None
        for track in self.tracks.values():
            track.stream = None
        self._report(ctx, force=True)

    def _report(self, ctx: RuntimeContextLimitedAccess, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.reported < REPORT_EVERY_S:
            return
        self.reported = now
        ends = [t.last_end_ns for t in self.tracks.values() if t.last_end_ns]
        ctx.report(
            file=str(self.path) if self.path else None, files=len(self.files), origin_ns=self.origin_ns or None,
            recorded_ms=round((max(ends) - self.origin_ns) / 1e6, 1) if ends and self.origin_ns else 0.0,
            bytes=self.file_size, fragments=self.fragments, tracks=[t.describe() for t in self.tracks.values()],
            bad=self.bad, late=self.late, skipped_before_keyframe=self.skipped,
        )

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        self._close(ctx)


def _ticks(ns: int, base: Fraction) -> int:
    return round(ns * base.denominator / (base.numerator * 1_000_000_000))


def _dts_ns(packet: EncodedPacket) -> int:
    """Decode time: the encoder's where it gave one (B-frames), the presentation time otherwise."""
    return int(packet.extra.get("decode_timestamp_ns", packet.timestamp_ns))
