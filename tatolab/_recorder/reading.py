"""A recording opened for replay: its channels, and one channel's messages back as bags.

Read through ``bounded.py``: the file as a stream, chunk by chunk, in memory bounded by
``BUDGET_BYTES`` whatever the file declares. A finished file's channels and times come from its
summary; one without (its recorder killed, the disk full) is scanned once from the start, up to
its last whole record. Messages are replayed in file order (a recording's channel is written in
log-time order).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tatolab._errors import CannotRun
from tatolab._recorder import compressed, formats
from tatolab._recorder.bounded import (
    BUDGET_BYTES, MAGIC, OP_CHANNEL, OP_CHUNK, OP_MESSAGE, OP_SCHEMA, OP_STATISTICS, SUMMARY_BUDGET_BYTES,
    BoundedReader, BoundError, ChannelRecord, Schema, Statistics, _Body, _MESSAGE, channel_of, mb, schema_of,
    statistics_of,
)

__all__ = ["BUDGET_BYTES", "Channel", "Recording", "RecordingError", "bag_of", "cut_point"]

_DATA = frozenset({OP_SCHEMA, OP_CHANNEL, OP_MESSAGE, OP_CHUNK})
_OP_MESSAGE_INDEX = 0x07
_INDEX_HEAD = struct.Struct("<HI")  # a MessageIndex: channel id, then its (log time, offset) pairs' byte length
_INDEX_ENTRY = struct.Struct("<QQ")


class RecordingError(CannotRun, ValueError):
    """A file McapSource cannot replay; the text names the file, what it found and the fix.
    A ``CannotRun``: the node that meets one ends once and stays failed, never restarted."""


@dataclass
class Channel:
    topic: str
    kind: str  # video, audio, json, or compressed (foxglove.CompressedVideo: decoded by McapSource)
    schema: dict[str, Any]  # a JSON channel's schema ({} for the others)
    count: int | None  # messages, when the file is indexed


def _kind(message_encoding: str, schema_name: str) -> str:
    if message_encoding == "protobuf" and schema_name == "foxglove.RawImage":
        return "video"
    if message_encoding == "protobuf" and schema_name == "foxglove.RawAudio":
        return "audio"
    if message_encoding == "protobuf" and schema_name == compressed.SCHEMA:
        return "compressed"
    if message_encoding == "json":
        return "json"
    raise RecordingError(f"{message_encoding} messages of schema {schema_name or 'none'}")


class _Known:
    """The schemas and channels met so far, within SUMMARY_BUDGET_BYTES."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.schemas: dict[int, Schema] = {}
        self.channels: dict[int, ChannelRecord] = {}
        self.kept = 0

    def add(self, opcode: int, body: _Body) -> None:
        self.kept += len(body.data)
        if self.kept > SUMMARY_BUDGET_BYTES:
            raise BoundError(f"{self.label}: its schemas and channels pass {mb(SUMMARY_BUDGET_BYTES)}, "
                             "more than McapSource keeps of a file")
        if opcode == OP_SCHEMA:
            schema = schema_of(body)
            self.schemas.setdefault(schema.id, schema)
        else:
            channel = channel_of(body)
            self.channels.setdefault(channel.id, channel)


class Recording:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file = open(path, "rb")
        except OSError as exc:
            raise RecordingError(f"cannot open {path}: {exc.strerror}") from None
        self.indexed = False
        self.channels: dict[str, Channel] = {}
        self.foreign: list[str] = []  # channels Tatolab did not write: listed, never replayed
        self._ids: dict[str, set[int]] = {}
        self.first_ns = self.last_ns = 0
        self._reader = BoundedReader(self._file, str(path))
        try:
            if self._file.read(len(MAGIC)) != MAGIC:
                raise ValueError("it does not start as one does")
            self._read_summary()
        except BoundError as exc:
            self._file.close()
            raise RecordingError(str(exc)) from None
        except (ValueError, EOFError, OSError) as exc:
            self._file.close()
            raise RecordingError(f"{path} is not an MCAP file Tatolab can read ({exc or type(exc).__name__}); "
                                 "`tatolab record ... --out FILE.mcap` writes one") from None

    def _read_summary(self) -> None:
        known = _Known(str(self.path))
        stats: Statistics | None = None
        footer = self._reader.footer()
        if footer is not None:
            wanted = frozenset({OP_SCHEMA, OP_CHANNEL, OP_STATISTICS})
            for opcode, _, body in self._reader.records(footer[0], footer[1], wanted):
                if body is None:
                    continue
                fields = _Body(body, f"{self.path}: its summary")
                if opcode == OP_STATISTICS:
                    stats = statistics_of(fields)
                else:
                    known.add(opcode, fields)
        counts: dict[int, int | None] = {}
        if stats is not None and known.channels:
            self.indexed = True
            self.first_ns, self.last_ns = stats.message_start_time, stats.message_end_time
            counts = {cid: stats.channel_message_counts.get(cid, 0) for cid in known.channels}
        else:  # not finished (its recorder was killed): scan it once, keeping no more than the counts
            known = _Known(str(self.path))
            first = last = None
            for channel_id, log_time, _ in self._walk(known, None):
                first = log_time if first is None or log_time < first else first
                last = log_time if last is None or log_time > last else last
                counts[channel_id] = (counts.get(channel_id) or 0) + 1
            self.first_ns, self.last_ns = first or 0, last or 0
        for cid, ch in known.channels.items():
            schema = known.schemas.get(ch.schema_id)
            name = schema.name if schema else ""
            try:
                kind = _kind(ch.message_encoding, name)
            except RecordingError:
                self.foreign.append(ch.topic)
                continue
            json_schema = json.loads(schema.data) if kind == "json" and schema and schema.data else {}
            self._ids.setdefault(ch.topic, set()).add(cid)
            if ch.topic not in self.channels:
                self.channels[ch.topic] = Channel(ch.topic, kind, json_schema, counts.get(cid) if self.indexed else None)

    def _walk(self, known: _Known | None, keep_chunk: Any) -> Iterator[tuple[int, int, memoryview]]:
        """(channel id, log time, data) of every message in file order, up to the last whole record;
        schemas and channels met go to ``known``. A chunk ``keep_chunk(start, end)`` refuses is skipped
        undecompressed. A record cut short by the end of the file ends the walk; one past the budget,
        or a chunk holding other than it declares, raises BoundError."""
        keep = keep_chunk or (lambda start, end: True)
        for opcode, at, body in self._reader.records(len(MAGIC), None, _DATA):
            if body is None:
                continue
            if opcode == OP_CHUNK:
                records: Iterator[tuple[int, memoryview | None]] = self._reader.chunk(body, at, keep)
            else:
                records = iter([(opcode, body)])
            for inner, data in records:
                if data is None:
                    continue
                fields = _Body(data, f"{self.path}: the record at byte {at}")
                if inner == OP_MESSAGE:
                    channel_id, _, log_time, _ = fields.unpack(_MESSAGE)
                    yield channel_id, log_time, fields.rest()
                elif inner in (OP_SCHEMA, OP_CHANNEL) and known is not None:
                    known.add(inner, fields)

    def channel(self, address: str | None) -> Channel:
        """The channel named ``address``; with None, the file's only channel."""
        names = ", ".join(sorted(self.channels)) or "none"
        if not self.channels:
            size = self._reader.size
            if self.foreign:
                raise RecordingError(f"{self.path} has no channel McapSource replays: its channels "
                                     f"({', '.join(sorted(self.foreign))}) were not written by `tatolab record`")
            raise RecordingError(f"{self.path} has no channel to replay: the file ({size} bytes) is damaged or "
                                 "was cut short before its first channel; record it again with "
                                 "`tatolab record ... --out FILE.mcap`")
        if address is None:
            if len(self.channels) == 1:
                return next(iter(self.channels.values()))
            raise RecordingError(f"{self.path} has {len(self.channels)} channels ({names}); "
                                 "say which with address=")
        if address not in self.channels:
            raise RecordingError(f"{self.path} has no channel {address}; its channels: {names}")
        return self.channels[address]

    def messages(self, channel: Channel, start_ns: int | None, end_ns: int | None) -> Iterator[tuple[int, bytes]]:
        """(log time, data) of the channel's messages, within [start_ns, end_ns], in file order.
        Raises RecordingError when the file breaks the budget or is damaged on the way."""
        ids = self._ids.get(channel.topic, set())
        lo = start_ns if start_ns is not None else -1
        hi = end_ns if end_ns is not None else 2**64

        def keep(first: int, last: int) -> bool:
            return not (last < lo or first > hi)

        try:
            for channel_id, log_time, data in self._walk(None, keep):
                if channel_id in ids and lo <= log_time <= hi:
                    yield log_time, bytes(data)
        except BoundError as exc:
            raise RecordingError(str(exc)) from None

    def keyframe_before(self, channel: Channel, at_ns: int) -> int | None:
        """The log time of the channel's last keyframe at or before ``at_ns`` (a CompressedVideo
        channel): where decoding starts for a replay from ``at_ns``. None: none before it."""
        found = None
        for log_time, data in self.messages(channel, None, at_ns):
            if compressed.keyframe_of(data):
                found = log_time
        return found

    def close(self) -> None:
        self._file.close()


def bag_of(channel: Channel, data: bytes) -> tuple[dict[str, Any], bytes | None]:
    """A message back as (bag, pixels): pixels only for video, whose bag then lacks its surface."""
    if channel.kind == "video":
        return formats.decode_video(data)
    if channel.kind == "audio":
        return formats.decode_audio(data), None
    if channel.kind == "compressed":
        return compressed.decode(data), None
    return formats.decode_json(data, channel.schema), None


def cut_point(path: Path) -> dict[str, Any]:
    """Where a recording that was never finished ends for a reader: its whole chunks (counted, not
    read), their messages and the first and last message's times (from the chunks' message indexes,
    read through ``bounded.py``); ``indexed`` when it was finished after all. For `tatolab record
    --list` after a crash."""
    found: dict[str, Any] = {"path": str(path), "indexed": False, "chunks": 0, "messages": 0, "first_ns": None,
                             "last_ns": None, "bytes": 0}
    try:
        with open(path, "rb") as file:
            reader = BoundedReader(file, str(path))
            found["bytes"] = reader.size
            if file.read(len(MAGIC)) != MAGIC:
                return found
            found["indexed"] = reader.footer() is not None
            for opcode, _, body in reader.records(len(MAGIC), None, frozenset({_OP_MESSAGE_INDEX})):
                if opcode == OP_CHUNK:
                    found["chunks"] += 1
                elif opcode == _OP_MESSAGE_INDEX and body is not None:
                    _, length = _INDEX_HEAD.unpack_from(body)
                    times = [t for t, _ in _INDEX_ENTRY.iter_unpack(body[_INDEX_HEAD.size:_INDEX_HEAD.size + length])]
                    if times:
                        found["messages"] += len(times)
                        first = found["first_ns"]
                        found["first_ns"] = min(times) if first is None else min(first, min(times))
                        found["last_ns"] = max(found["last_ns"] or 0, max(times))
    except FileNotFoundError:
        found["missing"] = True
    except (BoundError, ValueError, OSError, struct.error):
        pass  # the end of what was written before it was cut
    return found
