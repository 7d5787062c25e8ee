"""An MCAP file being written by the ``mcap`` library, made to survive its writer.

Chunks are closed at least every ``chunk_seconds`` (the library closes them by size), and each
is written, in one ``pwritev``, followed by a provisional end: a DataEnd and a Footer saying "no
summary" and the closing magic. The next chunk is written over that end, with its own. So at any
moment the file is a whole MCAP file, unindexed: a recorder (or ``tatolabd``) killed with
``kill -9`` leaves a file the ``mcap`` library's ``make_reader`` and Foxglove open as it is (they
read it through from the start), with every message up to its last second or so, and nothing to
repair. A clean end writes the summary and index over the provisional end. A full disk (or a file
size limit) truncates the file back to its last whole end and raises ``DiskFull``.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import time
from pathlib import Path
from typing import Any, Callable


from tatolab import __version__
from tatolab._recorder import compressed, formats
from tatolab._recorder.chunks import ChunkWriter
from tatolab._safe_fs import create_new_file

COMPRESSIONS = ("zstd", "lz4", "none")
PROFILE = ""  # no ROS profile: the channels say their own encodings
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024
CHUNK_BYTES = 4 << 20
CHUNK_SECONDS = 1.0
_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
# DataEnd (op 0x0F: a zero data CRC), Footer (op 0x02: summary start 0 = none, offsets 0, CRC 0), magic
PROVISIONAL_END = (struct.pack("<BQI", 0x0F, 4, 0) + struct.pack("<BQQQI", 0x02, 20, 0, 0, 0)
                   + b"\x89MCAP0\r\n")


class DiskFull(OSError):
    """The disk (or the file size limit) took no more: the file was cut back to its last whole record."""


class _Out:
    """What the writer writes to: its records are held (not copied: the library hands over bytes it
    does not touch again) until ``commit`` writes them at once, with the provisional end after them."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.offset = 0  # where the writer is (its records, held ones included)
        self.written = 0  # the end of what is on disk (the provisional end after it)
        self.tail = 0  # the bytes of the provisional end after ``written`` (0 once the summary is written)
        self.pending: list[bytes | memoryview] = []

    def write(self, data: bytes | bytearray | memoryview) -> int:
        held = data if isinstance(data, bytes) else bytes(data)
        self.pending.append(held)
        self.offset += len(held)
        return len(held)

    def tell(self) -> int:
        return self.offset

    def flush(self) -> None:
        self.commit(PROVISIONAL_END)

    def commit(self, end: bytes) -> None:
        """The held records, then ``end``, written at the end of what is on disk, in one call."""
        if not self.pending and not end:
            return
        buffers = [memoryview(b).cast("B") for b in (*self.pending, end) if len(b)]
        at, total = self.written, sum(len(b) for b in buffers)
        done = 0
        while done < total:
            try:
                # at most IOV_MAX buffers a call (1024 on Linux; more is EINVAL): an uncompressed
                # chunk of a 1 kHz output's small bags holds thousands
                done += os.pwritev(self.fd, _rest(buffers, done)[:_IOV_MAX], at + done)
            except OSError as exc:
                if exc.errno in _FULL:
                    raise DiskFull(exc.errno, f"{os.strerror(exc.errno)}") from None
                raise
        self.pending = []
        self.written = self.offset
        self.tail = len(end)


def _rest(buffers: list[memoryview], skip: int) -> list[memoryview]:
    """``buffers`` less their first ``skip`` bytes (after a short write)."""
    out = []
    for buffer in buffers:
        if skip >= len(buffer):
            skip -= len(buffer)
            continue
        out.append(buffer[skip:])
        skip = 0
    return out


def create(path: Path, names: Callable[[str, int], str] | None = None) -> tuple[int, Path]:
    """A new file (0600) at ``path`` or its next free name (``names``: the numbered files' own),
    never through a link nor over a file (``_safe_fs.create_new_file``, which every recording path
    calls): its descriptor and path."""
    return create_new_file(path, "the recording", names=names)


class McapFile:
    """One recording: a channel per address, messages added with their ring times."""

    def __init__(self, path: Path, *, compression: str = "zstd", chunk_seconds: float = CHUNK_SECONDS,
                 chunk_bytes: int = CHUNK_BYTES, names: Callable[[str, int], str] | None = None) -> None:
        fd, self.path = create(path, names)  # the path it got: ``path``, or its next free name
        self._out = _Out(fd)
        self._chunk_seconds = chunk_seconds
        self._last_chunk = time.monotonic()
        self.writer = ChunkWriter(self._out, chunk_bytes, compression)  # one copy of a message, not four
        self.closed = False
        self.chunks_on_disk = 0  # chunks written whole: none means no message can be read back
        self._guarded(self.writer.start, PROFILE, f"tatolab {__version__}")
        self._guarded(self._out.flush)  # a whole, empty MCAP file from the start
        self._schemas: dict[str, int] = {}

    @property
    def size(self) -> int:
        """The file's size: what is on disk, with its provisional end when it has one."""
        return self._out.written + self._out.tail

    def _guarded(self, call: Any, *args: Any) -> Any:
        try:
            result = call(*args)
        except DiskFull:  # cut back to the last whole chunk, and its provisional end again
            os.ftruncate(self._out.fd, self._out.written)
            self._out.tail = 0
            try:
                os.pwrite(self._out.fd, PROVISIONAL_END, self._out.written)
                self._out.tail = len(PROVISIONAL_END)
            except OSError:
                os.ftruncate(self._out.fd, self._out.written)  # not even that fits: readers still read it
                # through, up to the last whole chunk
            self._close_fd()
            raise
        return result

    def channel(self, address: str, kind: str, first_bags: list[Any]) -> int:
        """A channel named by ``address`` for bags of ``kind`` (formats.kind_of)."""
        if kind in ("video", "audio", "compressed"):
            name, data = compressed.schema() if kind == "compressed" else formats.protobuf_schema(kind)
            if name not in self._schemas:
                self._schemas[name] = self._guarded(self.writer.register_schema, name, "protobuf", data)
            schema_id, encoding = self._schemas[name], "protobuf"
        else:
            schema = formats.infer_schema(first_bags, address)
            schema_id = self._guarded(self.writer.register_schema, address, "jsonschema",
                                      json.dumps(schema).encode())
            encoding = "json"
        return self._guarded(self.writer.register_channel, address, encoding, schema_id, {"tatolab.kind": kind})

    def add(self, channel_id: int, log_time: int, publish_time: int, data: bytes, sequence: int) -> None:
        before = self._out.written
        self._guarded(self.writer.add_message, channel_id, log_time, data, publish_time, sequence & 0xFFFFFFFF)
        now = time.monotonic()
        if now - self._last_chunk >= self._chunk_seconds:
            self._last_chunk = now
            self._guarded(self.writer.flush)  # the chunk, then the provisional end (_Out.flush)
        elif self._out.pending:
            self._guarded(self._out.flush)  # the library closed a chunk by its size: written now
        if self._out.written > before:
            self.chunks_on_disk += 1  # a chunk (of messages) reached the file whole

    def finish(self) -> None:
        """Close the last chunk and write the summary and indexes: a valid, indexed file."""
        if self.closed:
            return
        self._guarded(self.writer.finish)
        self._guarded(self._out.commit, b"")  # the summary and footer over the provisional end
        os.ftruncate(self._out.fd, self._out.written)
        self._close_fd()

    def _close_fd(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._out.fd)
