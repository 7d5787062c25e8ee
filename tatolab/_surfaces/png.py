"""A lossless RGBA8 PNG from a frame's bytes, with the standard library alone."""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(tag: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)


def rows(width: int, height: int, pixels: memoryview | bytes) -> bytes:
    """The frame's rows, each after its filter byte (0: none), copied out of the surface."""
    stride = width * 4
    view = memoryview(pixels).cast("B")
    if len(view) < stride * height:
        raise ValueError(f"a {width}x{height} RGBA frame needs {stride * height} bytes, got {len(view)}")
    return b"".join(b"\x00" + view[y * stride:(y + 1) * stride].tobytes() for y in range(height))


def encode(width: int, height: int, filtered_rows: bytes, level: int = 3) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA, no interlace
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(filtered_rows, level)) + _chunk(b"IEND", b"")
