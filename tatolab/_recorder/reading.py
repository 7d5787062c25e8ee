"""A recording opened for replay: its channels, and one channel's messages back as bags.

An indexed file (a clean end) is read through its summary; one without (its recorder killed, the
disk full) is read from the start up to its last whole chunk, as the ``mcap`` library allows.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from mcap.exceptions import EndOfFile, McapError
from mcap.writer import MCAP0_MAGIC
from mcap.reader import NonSeekingReader, make_reader

from tatolab._recorder import compressed, formats


class RecordingError(ValueError):
    """A file McapSource cannot replay; the text names the file, what it found and the fix."""


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


class Recording:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file = open(path, "rb")
        except OSError as exc:
            raise RecordingError(f"cannot open {path}: {exc.strerror}") from None
        self.indexed = False
        self.channels: dict[str, Channel] = {}
        self.first_ns = self.last_ns = 0
        try:
            if self._file.read(len(MCAP0_MAGIC)) != MCAP0_MAGIC:
                raise RecordingError("it does not start as one does")
            self._read_summary()
        except (McapError, ValueError, EOFError, OSError, struct.error) as exc:
            self._file.close()
            raise RecordingError(f"{path} is not an MCAP file Tatolab can read ({exc or type(exc).__name__}); "
                                 "`tatolab record ... --out FILE.mcap` writes one") from None

    def _read_summary(self) -> None:
        found: list[tuple[str, str, str, bytes, int | None]] = []
        summary = None
        try:
            self._file.seek(0)
            summary = make_reader(self._file).get_summary()
        except (McapError, ValueError, EOFError, struct.error):
            summary = None  # not indexed (its recorder was killed): read from the start
        if summary is not None and summary.statistics is not None:
            self.indexed = True
            stats = summary.statistics
            self.first_ns, self.last_ns = stats.message_start_time, stats.message_end_time
            for cid, ch in summary.channels.items():
                schema = summary.schemas.get(ch.schema_id)
                found.append((ch.topic, ch.message_encoding, schema.name if schema else "",
                              schema.data if schema else b"", stats.channel_message_counts.get(cid, 0)))
        else:
            self._file.seek(0)
            times: list[int] = []
            seen: dict[str, tuple[str, str, str, bytes, int | None]] = {}
            for schema, ch, message in self._scan():
                seen.setdefault(ch.topic, (ch.topic, ch.message_encoding, schema.name if schema else "",
                                           schema.data if schema else b"", None))
                times.append(message.log_time)
            if not seen and not self._file.tell():
                raise RecordingError("it is empty")
            found = list(seen.values())
            self.first_ns, self.last_ns = (min(times), max(times)) if times else (0, 0)
        for topic, encoding, schema_name, schema_data, count in found:
            try:
                kind = _kind(encoding, schema_name)
            except RecordingError:
                continue  # a channel Tatolab did not write: listed by channels_found, never replayed
            json_schema = json.loads(schema_data) if kind == "json" and schema_data else {}
            self.channels[topic] = Channel(topic, kind, json_schema, count)

    def _scan(self) -> Iterator[tuple[Any, Any, Any]]:
        """Every message up to the last whole chunk, in file order."""
        self._file.seek(0)
        try:
            yield from NonSeekingReader(self._file).iter_messages(log_time_order=False)
        except (EndOfFile, McapError, ValueError, EOFError, struct.error):
            return  # the end of what was written before the recorder stopped

    def channel(self, address: str | None) -> Channel:
        """The channel named ``address``; with None, the file's only channel."""
        names = ", ".join(sorted(self.channels)) or "none"
        if address is None:
            if len(self.channels) == 1:
                return next(iter(self.channels.values()))
            raise RecordingError(f"{self.path} has {len(self.channels)} channels ({names}); "
                                 "say which with address=")
        if address not in self.channels:
            raise RecordingError(f"{self.path} has no channel {address}; its channels: {names}")
        return self.channels[address]

    def messages(self, channel: Channel, start_ns: int | None, end_ns: int | None) -> Iterator[tuple[int, bytes]]:
        """(log time, data) of the channel's messages in log-time order, within [start_ns, end_ns]."""
        if self.indexed:
            self._file.seek(0)
            reader = make_reader(self._file)
            for _, _, message in reader.iter_messages(topics=[channel.topic], starting_at=start_ns,
                                                      ending_at=end_ns):
                yield message.log_time, message.data
            return
        for _, ch, message in self._scan():
            if ch.topic == channel.topic and (start_ns is None or message.log_time >= start_ns) \
                    and (end_ns is None or message.log_time <= end_ns):
                yield message.log_time, message.data

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
    """Where a recording that was never finished ends for a reader: its whole chunks (read as
    records, not decompressed), their messages and the last message's time; ``indexed`` when it
    was finished after all. For `tatolab record --list` after a crash."""
    from mcap.records import Chunk, Footer, MessageIndex, Statistics
    from mcap.stream_reader import StreamReader

    found: dict[str, Any] = {"path": str(path), "indexed": False, "chunks": 0, "messages": 0, "first_ns": None,
                             "last_ns": None, "bytes": 0}
    try:
        found["bytes"] = path.stat().st_size
        with open(path, "rb") as file:
            for record in StreamReader(file, emit_chunks=True).records:
                if isinstance(record, Chunk):
                    found["chunks"] += 1
                    first = found["first_ns"]
                    found["first_ns"] = record.message_start_time if first is None else min(first, record.message_start_time)
                    found["last_ns"] = max(found["last_ns"] or 0, record.message_end_time)
                elif isinstance(record, MessageIndex):
                    found["messages"] += len(record.records)
                elif isinstance(record, Statistics):
                    found["indexed"] = True
                elif isinstance(record, Footer):
                    break
    except FileNotFoundError:
        found["missing"] = True
    except (EndOfFile, McapError, ValueError, EOFError, OSError, struct.error):
        pass  # the end of what was written before it was cut
    return found
