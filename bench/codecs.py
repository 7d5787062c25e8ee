"""The H.264 software encoder through the graph, against issue 13's targets, side by side in one run.

    .venv/bin/python bench/codecs.py [--seconds S]

For 720p30 and 1080p30, zero-latency tuning (the encoder's defaults: veryfast, 4 Mbit/s):
1. Reference: the same PyAV encode (RGBA -> yuv420p reformat + libx264) in this bare process,
   flat out: frames a second and CPU per frame.
2. Under a real tatolabd: TestPatternSource -> H264Encoder -> H264Decoder -> a Python sink reading
   every frame (``ordered``; the window's part): the encoder's frames a second and CPU per frame
   (from ``tatolab graph``), frames dropped on its input, and end-to-end latency p50/p99 (the
   pattern stamps a frame when it makes it; the sink reads the monotonic clock when the decoded
   frame arrives). Meanwhile another client asks the control socket ``streams`` every 100 ms:
   its answer time (target: under 50 ms).

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))

from _runtime import isolated_runtime  # noqa: E402

import av  # noqa: E402
import numpy as np  # noqa: E402

from tatolab._media.encoders import open_encoder  # noqa: E402
from tatolab._builtins.test_pattern import background, square_at  # noqa: E402
from tatolab._control import protocol  # noqa: E402
from tatolab._sdk.builtins import H264EncoderConfig, TestPatternConfig  # noqa: E402

SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}
SOCKET_TARGET_MS = 50.0


def reference(size: tuple[int, int], frames: int) -> dict[str, float]:
    """Bare PyAV: the encoder node's own work per frame, flat out, in this process."""
    width, height = size
    config = TestPatternConfig(width=width, height=height)
    image = background(config)
    encoder = open_encoder("libx264", H264EncoderConfig(), width, height, Fraction(30))
    cpu0, wall0 = time.process_time(), time.monotonic()
    for i in range(frames):
        pixels = image.copy()
        left, top, side = square_at(i, width, height)
        pixels[top:top + side, left:left + side, :3] = 255
        picture = av.VideoFrame.from_numpy_buffer(pixels, format="rgba").reformat(format="yuv420p")
        picture.pts = i * 33_333
        encoder.encode(picture)
    encoder.encode(None)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    return {"fps": round(frames / wall, 1), "cpu_ms_per_frame": round(cpu * 1000 / frames, 2)}


SINK = '''
import json
import time
from tatolab.stream import VideoFrame, node


@node
class Latency:
    """Reads every decoded frame; its age (now - the pattern's timestamp) goes to latency.jsonl."""

    @node.input(delivery_profile="ordered")
    def video(self) -> dict: ...

    def __init__(self) -> None:
        self.ages = []

    def process(self, ctx) -> None:
        frame = ctx.inputs.read("video", into=VideoFrame)
        if frame is None:
            return
        self.ages.append((time.monotonic_ns() - frame.timestamp_ns) / 1e6)
        frame.release()
        if len(self.ages) >= 30:
            with open("latency.jsonl", "a") as f:
                f.write(json.dumps(self.ages) + "\\n")
            self.ages = []
'''

STREAM = '''
from tatolab.stream import H264Decoder, H264Encoder, StreamBuilder, TestPatternSource, stream
from nodes.sink import Latency


@stream
def codecs(stream_builder: StreamBuilder) -> None:
    pattern = stream_builder.add(TestPatternSource, name="pattern", config={{"width": {w}, "height": {h}, "fps": 30}})
    encoder = stream_builder.add(H264Encoder, name="encoder", config={{"encoder": "libx264"}})
    decoder = stream_builder.add(H264Decoder, name="decoder")
    sink = stream_builder.add(Latency, name="sink")
    stream_builder.connect(pattern.output("video"), encoder.input("video"))
    stream_builder.connect(encoder.output("packets"), decoder.input("packets"))
    stream_builder.connect(decoder.output("video"), sink.input("video"))
'''


class SocketProbe(threading.Thread):
    """Asks the runtime ``streams`` every 100 ms on a fresh connection; keeps each answer time."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.times_ms: list[float] = []
        self.failed = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            began = time.monotonic()
            try:
                with socket.socket(socket.AF_UNIX) as sock:
                    sock.settimeout(5)
                    sock.connect(str(self.path))
                    sock.sendall(protocol.encode({"op": "streams"}))
                    data = b""
                    while not data.endswith(b"\n"):
                        chunk = sock.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                if not json.loads(data.split(b"\n", 1)[0]).get("ok"):
                    self.failed += 1
                    continue
            except (OSError, ValueError):
                self.failed += 1
                continue
            self.times_ms.append((time.monotonic() - began) * 1000)


def _cli(env: dict[str, str], *args: str) -> dict:
    return json.loads(subprocess.run([str(BIN / "tatolab"), *args], env=env, capture_output=True, text=True,
                                     check=True, timeout=60).stdout)


def _nodes(graph: dict) -> dict[str, dict]:
    return {node["name"]: node for node in graph["streams"][0]["nodes"]}


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else float("nan")


def under_runtime(size_name: str, seconds: float) -> dict[str, object]:
    width, height = SIZES[size_name]
    with isolated_runtime(f"tatolab-bench-codecs-{size_name}-") as (root, env, sock):
        project = root / "codecs"
        (project / "nodes").mkdir(parents=True)
        (project / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
        (project / "stream.py").write_text(textwrap.dedent(STREAM.format(w=width, h=height)))
        (project / "nodes" / "__init__.py").write_text("")
        (project / "nodes" / "sink.py").write_text(SINK)
        probe = SocketProbe(sock)
        probe.start()
        run = subprocess.Popen([str(BIN / "tatolab"), "run"], env=env, cwd=project, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 90
            while not (project / "latency.jsonl").exists():
                if time.monotonic() > deadline or run.poll() is not None:
                    raise RuntimeError(f"{size_name}: no decoded frame reached the sink")
                time.sleep(0.2)
            time.sleep(2)  # warm up
            before = _cli(env, "graph", "--stream", "codecs")  # also primes the CPU counters
            skip = len((project / "latency.jsonl").read_text().splitlines())
            time.sleep(seconds)
            after = _cli(env, "graph", "--stream", "codecs")
        finally:
            probe.stopping.set()
            run.send_signal(signal.SIGINT)
            try:
                run.wait(timeout=20)
            except subprocess.TimeoutExpired:
                run.kill()
        probe.join()
        span = (after["now_ns"] - before["now_ns"]) / 1e9
        was, now = _nodes(before)["encoder"], _nodes(after)["encoder"]
        frames = now["metrics"]["frames"] - was["metrics"]["frames"]  # reported once a second: near enough
        fps = frames / span
        ages = [a for line in (project / "latency.jsonl").read_text().splitlines()[skip:] for a in json.loads(line)]
        return {
            "encoder": now["metrics"]["encoder"],
            "fps": round(fps, 1),
            "cpu_ms_per_frame": round(now["cpu_percent"] * 10 / fps, 2) if fps else None,
            "encoder_cpu_percent": now["cpu_percent"],
            "dropped_at_encoder": now["inputs"][0]["dropped"] - was["inputs"][0]["dropped"],
            "latency_p50_ms": _pct(ages, 50), "latency_p99_ms": _pct(ages, 99), "latency_frames": len(ages),
            "socket_p50_ms": _pct(probe.times_ms, 50), "socket_max_ms": round(max(probe.times_ms or [0.0]), 1),
            "socket_answers": len(probe.times_ms), "socket_failed": probe.failed,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="measured time per size under the runtime")
    args = parser.parse_args()
    results: dict[str, object] = {}
    print("H.264 (libx264, veryfast, zerolatency, 4 Mbit/s), 30 fps pattern")
    print(f"   {'size':<6} {'where':<34} {'fps':>6} {'CPU ms/frame':>13} {'lat p50':>8} {'lat p99':>8} "
          f"{'socket p50/max ms':>18}")
    for size_name, size in SIZES.items():
        ref = reference(size, frames=90)
        live = under_runtime(size_name, args.seconds)
        results[size_name] = {"reference": ref, "runtime": live}
        print(f"   {size_name:<6} {'bare PyAV encode (flat out)':<34} {ref['fps']:>6} {ref['cpu_ms_per_frame']:>13}")
        print(f"   {'':<6} {'tatolabd: pattern>enc>dec>sink':<34} {live['fps']:>6} {live['cpu_ms_per_frame']!s:>13} "
              f"{live['latency_p50_ms']:>8} {live['latency_p99_ms']:>8} "
              f"{live['socket_p50_ms']:>8} / {live['socket_max_ms']:<7}")
        print(f"   {'':<6} (dropped at the encoder's input: {live['dropped_at_encoder']}; "
              f"socket answers {live['socket_answers']}, failed {live['socket_failed']})")
    worst = max(r["runtime"]["socket_max_ms"] for r in results.values())  # type: ignore[index]
    results["socket_target_met"] = worst < SOCKET_TARGET_MS
    print(f"   control socket slowest answer {worst} ms (target: under {SOCKET_TARGET_MS:g} ms): "
          f"{'met' if worst < SOCKET_TARGET_MS else 'NOT met'}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
