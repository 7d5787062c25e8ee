"""MCAP files made to exhaust a reader's memory, written record by record (no library would write them).

``bomb(path, compression, holds, declares)``: one chunk whose records decompress to ``holds`` zero
bytes while its header declares ``declares``; zeros are what a bomb decompresses to cheaply, and no
MCAP record has opcode 0. ``many_messages(path, n)``: a recording of ``n`` small messages and no
index (its recorder killed), as a long recording is. Used by tests/test_recorder_files.py and
bench/mcap_bombs.py.
"""

from __future__ import annotations

import struct
from pathlib import Path

MAGIC = b"\x89MCAP0\r\n"
BLOCK = 1 << 20


def _record(opcode: int, body: bytes) -> bytes:
    return struct.pack("<BQ", opcode, len(body)) + body


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<I", len(data)) + data


def _head(topic: str) -> bytes:
    header = _record(0x01, _string("") + _string("bomb"))
    schema = _record(0x03, struct.pack("<H", 1) + _string(topic) + _string("jsonschema") + struct.pack("<I", 2) + b"{}")
    channel = _record(0x04, struct.pack("<HH", 1, 1) + _string(topic) + _string("json") + struct.pack("<I", 0))
    return MAGIC + header + schema + channel


def _zeros_compressed(compression: str, size: int) -> bytes:
    if compression == "zstd":
        import zstandard

        compressor = zstandard.ZstdCompressor(level=3).compressobj(size=size)  # the frame says its size
        parts = [compressor.compress(bytes(min(BLOCK, size - at))) for at in range(0, size, BLOCK)]
        return b"".join(parts) + compressor.flush()
    import lz4.frame

    lz4c = lz4.frame.LZ4FrameCompressor()
    parts = [lz4c.begin(source_size=size)]
    parts += [lz4c.compress(bytes(min(BLOCK, size - at))) for at in range(0, size, BLOCK)]
    return b"".join(parts) + lz4c.flush()


def bomb(path: Path, compression: str, holds: int, declares: int) -> int:
    """Write the bomb; returns its size in bytes."""
    stored = _zeros_compressed(compression, holds)
    chunk = (struct.pack("<QQQI", 1, 2, declares, 0) + _string(compression)
             + struct.pack("<Q", len(stored)) + stored)
    data = _head("bomb/x/y") + _record(0x06, chunk) + _record(0x0F, struct.pack("<I", 0))
    path.write_bytes(data)
    return len(data)


def many_messages(path: Path, n: int, per_chunk: int = 50_000) -> int:
    """``n`` one-byte JSON messages in uncompressed chunks, no summary; returns the file's size."""
    with open(path, "wb") as f:
        f.write(_head("long/x/y"))
        message = struct.Struct("<BQHIQQ1s")
        for first in range(0, n, per_chunk):
            count = min(per_chunk, n - first)
            body = b"".join(message.pack(0x05, 23, 1, i, 1_000 + i, 1_000 + i, b"1")
                            for i in range(first, first + count))
            f.write(_record(0x06, struct.pack("<QQQI", 1_000 + first, 1_000 + first + count - 1, len(body), 0)
                            + _string("") + struct.pack("<Q", len(body)) + body))
        return f.tell()
