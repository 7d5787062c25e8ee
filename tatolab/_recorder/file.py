"""An MCAP file being written by the ``mcap`` library, made to survive its writer.

Chunks are closed at least every ``chunk_seconds`` (the library closes them by size), so a
recorder killed with ``kill -9`` leaves every message up to its last second or so in whole
chunks a reader recovers. Writes go straight to the file descriptor (no buffer to lose), and a
full disk (or a file size limit) truncates the file back to its last whole record and raises
``DiskFull``: the file stays readable up to there.
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path
from typing import Any

from mcap.writer import CompressionType, Writer

from tatolab import __version__
from tatolab._recorder import compressed, formats

COMPRESSIONS = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}
PROFILE = ""  # no ROS profile: the channels say their own encodings
CHUNK_BYTES = 4 << 20
CHUNK_SECONDS = 1.0
_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


class DiskFull(OSError):
    """The disk (or the file size limit) took no more: the file was cut back to its last whole record."""


class _Out:
    """What the writer writes to: the descriptor itself, and where it is."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.offset = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            try:
                done += os.write(self.fd, view[done:])
            except OSError as exc:
                self.offset += done
                if exc.errno in _FULL:
                    raise DiskFull(exc.errno, f"{os.strerror(exc.errno)}") from None
                raise
        self.offset += done
        return done

    def tell(self) -> int:
        return self.offset

    def flush(self) -> None:
        return None


def create(path: Path) -> int:
    """The file, made (its folder too) for the user alone to change; never through a link."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


class McapFile:
    """One recording: a channel per address, messages added with their ring times."""

    def __init__(self, path: Path, *, compression: str = "zstd", chunk_seconds: float = CHUNK_SECONDS,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        self.path = path
        self._out = _Out(create(path))
        self._good = 0  # the end of the last whole record written
        self._chunk_seconds = chunk_seconds
        self._last_chunk = time.monotonic()
        # _Out does what the writer asks of a stream: write and tell
        self.writer = Writer(self._out, chunk_size=chunk_bytes,  # type: ignore[arg-type]
                             compression=COMPRESSIONS[compression])
        self.closed = False
        self._guarded(self.writer.start, PROFILE, f"tatolab {__version__}")
        self._schemas: dict[str, int] = {}

    @property
    def size(self) -> int:
        return self._out.offset

    def _guarded(self, call: Any, *args: Any) -> Any:
        try:
            result = call(*args)
        except DiskFull:
            os.ftruncate(self._out.fd, self._good)
            self._close_fd()
            raise
        self._good = self._out.offset
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
        self._guarded(self.writer.add_message, channel_id, log_time, data, publish_time, sequence & 0xFFFFFFFF)
        now = time.monotonic()
        if now - self._last_chunk >= self._chunk_seconds:
            self._last_chunk = now
            self._guarded(self.writer.flush)

    def finish(self) -> None:
        """Close the last chunk and write the summary and indexes: a valid, indexed file."""
        if self.closed:
            return
        self._guarded(self.writer.finish)
        self._close_fd()

    def _close_fd(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._out.fd)
