"""The recorder's own MCAP chunk writer: what ``mcap.writer.Writer`` does for McapFile, without its
copies of each message.

The library copies a message into its chunk builder, again when the chunk ends, again into its
record builder and once more when that ends: four copies of every 8.3 MB 1080p frame, and a CRC of
it. Here a chunk is a list of the messages' own buffers: the chunk and message headers are packed
beside them and the whole chunk goes to the file in one ``pwritev`` (file.py), so a frame's pixels
are copied once, from its surface into its message (formats.encode_video), and then only by the
kernel. lz4 and zstd join the chunk's records to compress them, as the library does. The chunk's
CRC is 0 ("not computed", which the MCAP spec allows). The small records (header, schemas, channels,
indexes, statistics, summary, footer) are the library's own record classes.
"""

from __future__ import annotations

import struct
from typing import Any

from mcap.data_stream import RecordBuilder
from mcap.records import (Channel, ChunkIndex, DataEnd, Footer, Header, MessageIndex, Schema, Statistics,
                          SummaryOffset)
from mcap.opcode import Opcode
from mcap.writer import MCAP0_MAGIC

_MESSAGE_HEAD = struct.Struct("<BQHIQQ")  # opcode, length; channel id, sequence, log time, publish time
_CHUNK_TIMES = struct.Struct("<QQQI")  # start, end, uncompressed size, uncompressed CRC


def _compress(kind: str, data: bytes) -> bytes:
    if kind == "lz4":
        import lz4.frame  # type: ignore[import-untyped]

        return lz4.frame.compress(data)
    import zstandard

    return zstandard.compress(data)


class ChunkWriter:
    """``start``, ``register_schema``, ``register_channel``, ``add_message``, ``flush`` and
    ``finish`` as ``mcap.writer.Writer`` has them; ``compression``: ``none``, ``lz4`` or ``zstd``."""

    def __init__(self, out: Any, chunk_size: int, compression: str) -> None:
        self.out = out
        self.chunk_size = chunk_size
        self.compression = "" if compression == "none" else compression
        self.schemas: dict[int, Schema] = {}
        self.channels: dict[int, Channel] = {}
        self.chunk_indexes: list[ChunkIndex] = []
        self.stats = Statistics(message_count=0, schema_count=0, channel_count=0, attachment_count=0,
                                metadata_count=0, chunk_count=0, message_start_time=0, message_end_time=0,
                                channel_message_counts={})
        self._reset()

    def _reset(self) -> None:
        self.parts: list[Any] = []
        self.size = 0  # the chunk's records, uncompressed
        self.start_ns = self.end_ns = 0
        self.indexes: dict[int, list[tuple[int, int]]] = {}  # channel -> (log time, offset in the records)

    def _write(self, record: Any) -> None:
        builder = RecordBuilder()
        record.write(builder)
        self.out.write(builder.end())

    def start(self, profile: str, library: str) -> None:
        self.out.write(MCAP0_MAGIC)
        self._write(Header(profile=profile, library=library))

    def register_schema(self, name: str, encoding: str, data: bytes) -> int:
        schema = Schema(id=len(self.schemas) + 1, name=name, encoding=encoding, data=data)
        self.schemas[schema.id] = schema
        self.stats.schema_count += 1
        self._write(schema)  # in the data section, before any message of it
        return schema.id

    def register_channel(self, topic: str, message_encoding: str, schema_id: int,
                         metadata: dict[str, str] | None = None) -> int:
        channel = Channel(id=len(self.channels) + 1, topic=topic, message_encoding=message_encoding,
                          schema_id=schema_id, metadata=metadata or {})
        self.channels[channel.id] = channel
        self.stats.channel_count += 1
        self._write(channel)
        return channel.id

    def add_message(self, channel_id: int, log_time: int, data: bytes, publish_time: int, sequence: int = 0) -> None:
        head = _MESSAGE_HEAD.pack(Opcode.MESSAGE, 2 + 4 + 8 + 8 + len(data), channel_id, sequence, log_time,
                                  publish_time)
        self.indexes.setdefault(channel_id, []).append((log_time, self.size))
        self.parts += (head, data)
        self.size += len(head) + len(data)
        self.start_ns = log_time if self.start_ns == 0 else min(self.start_ns, log_time)
        self.end_ns = max(self.end_ns, log_time)
        stats = self.stats
        stats.message_count += 1
        stats.message_start_time = log_time if stats.message_count == 1 else min(stats.message_start_time, log_time)
        stats.message_end_time = max(stats.message_end_time, log_time)
        stats.channel_message_counts[channel_id] = stats.channel_message_counts.get(channel_id, 0) + 1
        if self.size >= self.chunk_size:
            self._end_chunk()

    def _end_chunk(self) -> None:
        if not self.parts:
            return
        records = self.parts if not self.compression else [_compress(self.compression, b"".join(self.parts))]
        stored = sum(len(p) for p in records)
        kind = self.compression.encode()
        content = _CHUNK_TIMES.size + 4 + len(kind) + 8 + stored
        head = (struct.pack("<BQ", Opcode.CHUNK, content) + _CHUNK_TIMES.pack(self.start_ns, self.end_ns, self.size, 0)
                + struct.pack("<I", len(kind)) + kind + struct.pack("<Q", stored))
        chunk_start = self.out.tell()
        self.out.write(head)
        for part in records:
            self.out.write(part)
        chunk_length = self.out.tell() - chunk_start
        offsets: dict[int, int] = {}
        index_start = self.out.tell()
        for channel_id, entries in self.indexes.items():
            offsets[channel_id] = self.out.tell()
            self._write(MessageIndex(channel_id=channel_id, records=entries))
        self.chunk_indexes.append(ChunkIndex(
            message_start_time=self.start_ns, message_end_time=self.end_ns, chunk_start_offset=chunk_start,
            chunk_length=chunk_length, message_index_offsets=offsets, message_index_length=self.out.tell() - index_start,
            compression=self.compression, compressed_size=stored, uncompressed_size=self.size))
        self.stats.chunk_count += 1
        self._reset()

    def flush(self) -> None:
        """End the chunk in progress; the file writes what it holds, with its provisional end (file.py)."""
        self._end_chunk()
        self.out.flush()

    def finish(self) -> None:
        """The last chunk, the data end, the summary (schemas, channels, statistics, chunk indexes)
        with its offsets, the footer and the magic."""
        self._end_chunk()
        self._write(DataEnd(data_section_crc=0))
        summary_start = self.out.tell()
        builder = RecordBuilder()
        offsets = []
        for opcode, records in ((Opcode.SCHEMA, list(self.schemas.values())),
                                (Opcode.CHANNEL, list(self.channels.values())),
                                (Opcode.STATISTICS, [self.stats]), (Opcode.CHUNK_INDEX, self.chunk_indexes)):
            group_start = builder.count
            for record in records:
                record.write(builder)
            offsets.append(SummaryOffset(group_opcode=opcode, group_start=summary_start + group_start,
                                         group_length=builder.count - group_start))
        offset_start = summary_start + builder.count
        for offset in offsets:
            offset.write(builder)
        self.out.write(builder.end())
        self._write(Footer(summary_start=summary_start, summary_offset_start=offset_start, summary_crc=0))
        self.out.write(MCAP0_MAGIC)
