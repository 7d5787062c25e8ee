"""The recorder's MCAP writing of 1080p frames: its own chunk writer against the ``mcap`` library's.

    .venv/bin/python bench/record_writer.py [--frames 60] [--runs 5] [--compression none]

Both write the same RawImage messages (a 1920x1080 RGBA frame's pixels copied from a buffer, as the
recorder copies them from a surface) to a file on the same disk, in the same process, alternating;
prints the CPU (user + system) and wall time per frame, medians over ``--runs``, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcap.writer import CompressionType, Writer

from tatolab._recorder import formats
from tatolab._recorder.file import McapFile

BAG = {"width": 1920, "height": 1080, "format": "rgba8", "timestamp_ns": 1, "surface_id": "s", "frame_index": 0}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ours(path: Path, pixels: bytearray, frames: int, compression: str) -> None:
    file = McapFile(path, compression=compression)
    channel = file.channel("cam/camera/video", "video", [])
    for i in range(frames):
        file.add(channel, i, i, formats.encode_video(BAG, pixels, "cam/camera/video"), i)
    file.finish()


def library(path: Path, pixels: bytearray, frames: int, compression: str) -> None:
    kinds = {"none": CompressionType.NONE, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}
    with open(path, "wb") as out:
        writer = Writer(out, chunk_size=4 << 20, compression=kinds[compression])
        writer.start("", "bench")
        name, data = formats.protobuf_schema("video")
        channel = writer.register_channel("cam/camera/video", "protobuf", writer.register_schema(name, "protobuf", data))
        for i in range(frames):
            writer.add_message(channel, i, formats.encode_video(BAG, pixels, "cam/camera/video"), i, i)
        writer.finish()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--compression", default="none")
    args = parser.parse_args()
    pixels = bytearray(os.urandom(1920 * 1080 * 4))
    results: dict[str, list[tuple[float, float]]] = {"ours": [], "mcap library": []}
    with tempfile.TemporaryDirectory(prefix="tatolab-bench-writer-") as folder:
        path = Path(folder) / "frames.mcap"
        for _ in range(args.runs):
            for name, write in (("ours", ours), ("mcap library", library)):
                cpu, wall = _cpu(), time.perf_counter()
                write(path, pixels, args.frames, args.compression)
                results[name].append(((_cpu() - cpu) / args.frames * 1e3, (time.perf_counter() - wall) / args.frames * 1e3))
                path.unlink()
    print(f"{'writer':<14}{'CPU ms/frame':>14}{'wall ms/frame':>15}")
    summary = {}
    for name, runs in results.items():
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        summary[name] = {"cpu_ms_per_frame": cpu, "wall_ms_per_frame": wall}
        print(f"{name:<14}{cpu:>14.1f}{wall:>15.1f}")
    print(json.dumps({"frames": args.frames, "runs": args.runs, "compression": args.compression,
                      "load_avg": os.getloadavg(), "results": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
