"""An MCAP file read as a stream, in memory bounded by a budget whatever the file says.

The ``mcap`` library trusts a file: a chunk declaring gigabytes is allocated and decompressed
whole, a summary of millions of indexes is read into objects. McapSource plays files a user (or
an agent) names, so it reads them here instead: record by record from the start, each record's
declared length checked against what is left of the file and against ``BUDGET_BYTES`` before a
byte of it is read, a chunk's declared uncompressed size checked against the budget before it is
decompressed, and the decompression itself stopped at the declared size (a chunk that holds more
than it declares is refused, not followed). At most one chunk is held at a time, stored and
uncompressed together within the budget. Only the records replay needs are decoded: schemas,
channels, messages, and the summary's statistics.

A file cut short (its recorder killed, the disk full) ends at its last whole record, as the
``mcap`` library reads it; anything that breaks the budget or the format raises ``BoundError``.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from typing import IO, Callable, Iterator

BUDGET_BYTES = 256 << 20  # one chunk, stored and uncompressed together; a summary's schemas and channels
SUMMARY_BUDGET_BYTES = 16 << 20  # the schemas and channels kept from a file, in all
MAGIC = b"\x89MCAP0\r\n"

OP_HEADER, OP_FOOTER, OP_SCHEMA, OP_CHANNEL, OP_MESSAGE, OP_CHUNK = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06
OP_STATISTICS, OP_DATA_END = 0x0B, 0x0F
_OPEN = struct.Struct("<BQ")  # opcode, length
_FOOTER = struct.Struct("<QQI")  # summary start, summary offset start, summary crc
_MESSAGE = struct.Struct("<HIQQ")  # channel id, sequence, log time, publish time
_CHUNK = struct.Struct("<QQQI")  # message start, message end, uncompressed size, uncompressed crc
_STATISTICS = struct.Struct("<QHIIIIQQ")


class BoundError(ValueError):
    """The file breaks the budget or the MCAP format; the text says where and what."""


def mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n < 2**30 else f"{n / 2**30:.1f} GB"


@dataclass
class Schema:
    id: int
    name: str
    data: bytes


@dataclass
class ChannelRecord:
    id: int
    schema_id: int
    topic: str
    message_encoding: str


@dataclass
class Statistics:
    message_count: int
    message_start_time: int
    message_end_time: int
    channel_message_counts: dict[int, int]


class _Body:
    """Fields read off one record's bytes, in order; a field past the end is a format error."""

    def __init__(self, data: memoryview, where: str) -> None:
        self.data = data
        self.at = 0
        self.where = where

    def take(self, n: int) -> memoryview:
        if n < 0 or self.at + n > len(self.data):
            raise BoundError(f"{self.where}: a record ends inside its own fields")
        view = self.data[self.at:self.at + n]
        self.at += n
        return view

    def unpack(self, form: struct.Struct) -> tuple:
        return form.unpack(self.take(form.size))

    def string(self) -> str:
        (n,) = self.unpack(_U32)
        try:
            return str(self.take(n), "utf-8")
        except UnicodeDecodeError:
            raise BoundError(f"{self.where}: a string that is not UTF-8") from None

    def prefixed(self, form: struct.Struct) -> memoryview:
        (n,) = self.unpack(form)
        return self.take(n)

    def rest(self) -> memoryview:
        return self.take(len(self.data) - self.at)


_U16, _U32, _U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")


def schema_of(body: _Body) -> Schema:
    (sid,) = body.unpack(_U16)
    name = body.string()
    body.string()  # encoding: the channel's message encoding says how to read its messages
    return Schema(sid, name, bytes(body.prefixed(_U32)))


def channel_of(body: _Body) -> ChannelRecord:
    cid, schema_id = body.unpack(struct.Struct("<HH"))
    topic = body.string()
    return ChannelRecord(cid, schema_id, topic, body.string())  # metadata follows: not needed


def statistics_of(body: _Body) -> Statistics:
    count, _, _, _, _, _, start, end = body.unpack(_STATISTICS)
    counts_bytes = body.prefixed(_U32)
    counts = {cid: n for cid, n in struct.iter_unpack("<HQ", counts_bytes[:len(counts_bytes) // 10 * 10])}
    return Statistics(count, start, end, counts)


@dataclass
class Message:
    channel_id: int
    log_time: int
    data: bytes


class BoundedReader:
    """Records of one MCAP file, read within the budget. ``size`` is the file's size when opened."""

    def __init__(self, file: IO[bytes], label: str, budget: int = BUDGET_BYTES) -> None:
        self.file = file
        self.label = label
        self.budget = budget
        self.size = os.fstat(file.fileno()).st_size

    def _over(self, what: str, n: int) -> BoundError:
        return BoundError(f"{self.label}: {what} ({mb(n)}) passes McapSource's budget of {mb(self.budget)} "
                          "for one chunk; it reads a recording chunk by chunk, and `tatolab record` writes "
                          "chunks of a few MB")

    def records(self, start: int, stop: int | None = None,
                wanted: frozenset[int] = frozenset()) -> Iterator[tuple[int, int, memoryview | None]]:
        """(opcode, offset, body) from byte ``start`` to ``stop`` (else the end of the file); a body
        is read only for an opcode in ``wanted`` (else None: skipped unread). Ends quietly at a
        record cut short by the end of the file; stops after DataEnd or Footer."""
        end = self.size if stop is None else min(stop, self.size)
        at = start
        self.file.seek(at)
        while at + _OPEN.size <= end:
            opcode, length = _OPEN.unpack(self.file.read(_OPEN.size))
            body_at = at + _OPEN.size
            if length > end - body_at or opcode == 0:
                return  # cut short (the recorder stopped mid-record), or zeros a crash left: the end
            if opcode in wanted:
                if length > self.budget:
                    raise self._over(f"a record at byte {at} declares {length} bytes", length)
                data = self.file.read(length)
                if len(data) != length:
                    return  # the file shrank under us
                yield opcode, at, memoryview(data)
            else:
                yield opcode, at, None
                self.file.seek(body_at + length)
            if opcode in (OP_DATA_END, OP_FOOTER):
                return
            at = body_at + length

    def footer(self) -> tuple[int, int] | None:
        """(summary start, footer offset) when the file ends as a finished one does, else None."""
        footer_len = _OPEN.size + _FOOTER.size + len(MAGIC)
        if self.size < len(MAGIC) + footer_len:
            return None
        self.file.seek(self.size - footer_len)
        tail = self.file.read(footer_len)
        opcode, length = _OPEN.unpack(tail[:_OPEN.size])
        if opcode != OP_FOOTER or length != _FOOTER.size or tail[-len(MAGIC):] != MAGIC:
            return None
        summary_start, _, _ = _FOOTER.unpack(tail[_OPEN.size:_OPEN.size + _FOOTER.size])
        footer_at = self.size - footer_len
        if not summary_start or not len(MAGIC) <= summary_start <= footer_at:
            return None
        return summary_start, footer_at

    def chunk(self, body: memoryview, at: int, keep: Callable[[int, int], bool]) -> Iterator[tuple[int, memoryview | None]]:
        """The records inside one chunk, decompressed within the budget, unless ``keep`` skips it
        by its time span (then nothing is decompressed)."""
        where = f"{self.label}: the chunk at byte {at}"
        fields = _Body(body, where)
        start, end, declared, _ = fields.unpack(_CHUNK)
        compression = fields.string()
        stored = fields.prefixed(_U64)
        if not keep(start, end):
            return
        if declared + len(stored) > self.budget:
            raise self._over(f"the chunk at byte {at} declares {declared} bytes uncompressed, "
                             f"{len(stored)} stored", declared + len(stored))
        data = memoryview(decompress(compression, stored, declared, where))
        inner = _Body(data, where)
        while inner.at + _OPEN.size <= len(data):
            opcode, length = inner.unpack(_OPEN)
            if opcode == 0:  # no record has opcode 0: zeros, as a bomb decompresses to
                raise BoundError(f"{where}: it holds a record of opcode 0; the file is damaged")
            yield opcode, inner.take(length)
        if inner.at != len(data):
            raise BoundError(f"{where}: its records end inside one")


def decompress(compression: str, stored: memoryview, declared: int, where: str) -> bytes:
    """``stored`` decompressed, refused once it would pass ``declared`` bytes (no more is made)."""
    if compression == "":
        out = bytes(stored)
    elif compression == "zstd":
        import zstandard

        try:
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(stored), read_across_frames=True)
            pieces, made = [], 0
            while made <= declared:  # one byte past the declared size tells a lie: no more is made
                piece = reader.read(declared + 1 - made)
                if not piece:
                    break
                pieces.append(piece)
                made += len(piece)
            out = b"".join(pieces)
        except zstandard.ZstdError as exc:
            raise BoundError(f"{where}: its zstd data is damaged ({exc})") from None
    elif compression == "lz4":
        import lz4.frame  # type: ignore[import-untyped]

        try:
            decompressor = lz4.frame.LZ4FrameDecompressor()
            out = decompressor.decompress(bytes(stored), max_length=declared + 1)
        except RuntimeError as exc:
            raise BoundError(f"{where}: its lz4 data is damaged ({exc})") from None
    else:
        raise BoundError(f"{where}: compression {compression!r} is not one Tatolab reads (zstd, lz4 or none)")
    if len(out) != declared:
        more = "more than" if len(out) > declared else f"{len(out)} bytes, not"
        raise BoundError(f"{where} holds {more} the {declared} bytes it declares: the file is damaged "
                         "or made to exhaust memory")
    return out
