"""H.264/H.265 encoders and decoders and Mp4Sink: round trips through a real runtime, recordings
that survive a SIGKILL (checked with ffprobe), fan-in tracks, and config refused by name."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness import Runtime, graph_node, make_project, read_jsonl, wait_for
from nodes_fixture import threaded_source
from tatolab._errors import ConfigError
from tatolab._sdk.builder import StreamBuilder
from tatolab._sdk.builtins import H264Encoder, H265Decoder, H265Encoder, Mp4Sink
from tatolab._host.ports import InputPort
from tatolab._sdk.context import Inputs

FRAGMENT_S = 0.1


# -- without a runtime ------------------------------------------------------------------------

def test_bad_codec_and_recorder_config_is_refused_naming_the_field():
    builder = StreamBuilder("bad")
    for cls, config, words in (
        (H264Encoder, {"preset": "warp"}, "preset must be one of ultrafast"),
        (H264Encoder, {"bitrate": 0}, "bitrate must be a whole number of bits a second"),
        (H264Encoder, {"keyframe_interval": 0.5}, "keyframe_interval"),
        (H264Encoder, {"keyframe_interval": 0}, "keyframe_interval must be a whole number of frames"),
        (H265Encoder, {"tune": "film"}, "tune must be one of zerolatency"),  # x264 has film, x265 not
        (H265Encoder, {"encoder": "libx264"}, "encoder must be one of auto, hevc_nvenc, hevc_vaapi, libx265"),
        (H264Encoder, {"options": {"crf": [23]}}, "options must map FFmpeg option names"),
        (H265Decoder, {"decoder": "h264"}, "decoder must be one of auto, hevc_cuvid, hevc"),
        (Mp4Sink, {"path": "recordings/"}, "path must name a file"),
        (Mp4Sink, {"rotate_seconds": -1}, "rotate_seconds must be a number of seconds above 0"),
        (Mp4Sink, {"fragment_ms": 1}, "fragment_ms must be a whole number of milliseconds from 10"),
    ):
        with pytest.raises(ConfigError, match=words):
            builder.add(cls, config=config, name="bad")
    builder.add(H264Encoder, config={"bitrate": 2_000_000, "preset": "ultrafast", "tune": None})  # fine


def test_a_path_that_cannot_be_written_is_refused_naming_node_and_path(pool, tmp_path):
    from tatolab._builtins.codecs import H264Encoder as EncoderCode

    (tmp_path / "file").write_text("")
    bags, _, _ = _encoded(EncoderCode, {}, frames=3)
    sink, ctx = _sink(tmp_path, {"path": str(tmp_path / "file" / "rec.mp4")})
    with pytest.raises(RuntimeError, match=r"stream test, node sink: cannot write .*file/rec.mp4: .*path="):
        _feed(sink, ctx, bags)


class _Ring:
    """A stand-in reader: the bags it will deliver, each with its publish time."""

    def __init__(self, bags: list[tuple[bytes, int]]) -> None:
        self.bags = bags

    def read(self):
        return self.bags.pop(0) if self.bags else None

    def read_many(self):
        out, self.bags = self.bags, []
        return out

    def discard(self, n: int = 1) -> None: ...

    def count_bad(self) -> None: ...


def test_a_fan_in_input_says_which_link_each_bag_came_by():
    from tatolab import _bags

    port = InputPort("tracks", "ordered")
    port.add_link("a/packets->sink/tracks", _Ring([(_bags.encode({"n": 1}, "a", "packets"), 10),
                                                   (_bags.encode({"n": 3}, "a", "packets"), 30)]))
    port.add_link("b/packets->sink/tracks", _Ring([(_bags.encode({"n": 2}, "b", "packets"), 20)]))
    inputs = Inputs("sink", {"tracks": port})
    assert inputs.link("tracks") is None
    assert sorted(inputs.links("tracks")) == ["a/packets->sink/tracks", "b/packets->sink/tracks"]
    seen = []
    while (bag := inputs.read("tracks")) is not None:
        seen.append((bag["n"], inputs.link("tracks")))
    assert seen == [(1, "a/packets->sink/tracks"), (2, "b/packets->sink/tracks"), (3, "a/packets->sink/tracks")]


# -- the nodes in this process (tatolab.testing's FakeContext), the recordings checked with ffprobe -

@pytest.fixture
def pool():
    import os
    import uuid

    from tatolab._links import ring, shm
    from tatolab._surfaces import pool as surfaces

    base = f"{shm.private_folder()}/tatolab-test-{os.getpid()}-{uuid.uuid4().hex[:8]}+surfaces"
    surfaces.create(base, slots=8)
    surfaces.configure(base)
    yield
    surfaces.configure(None)
    ring.reap(base)


def _encoded(cls: type, config: dict, frames: int, size=(160, 96), fps: int = 30, start_ns: int = 10**12):
    """``frames`` pattern frames through encoder ``cls`` in this process: (the bags, its context, the sources)."""
    pytest.importorskip("av")
    from tatolab._builtins.test_pattern import background, square_at
    from tatolab._sdk.builtins import TestPatternConfig
    from tatolab._sdk.nodes import create
    from tatolab._surfaces.frame import VideoFrame
    from tatolab.testing import FakeContext

    encoder = create(cls, config, node="encoder")
    ctx = FakeContext(cls, node="encoder", links={"video": ["pattern/video->encoder/video"]})
    image = background(TestPatternConfig(width=size[0], height=size[1]))
    sources = {}
    for i in range(frames):
        pixels = image.copy()
        left, top, side = square_at(i, *size)
        pixels[top:top + side, left:left + side, :3] = 255
        stamp = start_ns + i * 1_000_000_000 // fps
        sources[stamp] = pixels
        ctx.feed("video", VideoFrame.from_numpy(pixels, timestamp_ns=stamp))
        encoder.process(ctx)
    encoder.teardown(ctx)
    return ctx.run.outputs["packets"], ctx, sources


def _sink(tmp_path: Path, config: dict, links: tuple[str, ...] = ("src/packets->sink/tracks",)):
    from tatolab._builtins.recording import Mp4Sink as SinkCode
    from tatolab._sdk.nodes import create
    from tatolab.testing import FakeContext

    sink = create(SinkCode, {"path": str(tmp_path / "rec.mp4"), **config}, node="sink")
    return sink, FakeContext(SinkCode, node="sink", links={"tracks": list(links)})


def _feed(sink, ctx, bags, link: str = "src/packets->sink/tracks") -> None:
    for bag in bags:
        ctx.feed("tracks", dict(bag), link=link)
        sink.process(ctx)


def test_b_frames_keep_their_timestamps_and_record_in_order(pool, tmp_path):
    """Without zero-latency tuning x264 reorders frames (B-frames): each packet still carries its
    own frame's timestamp, and the recording has every frame, in presentation order."""
    from tatolab._builtins.codecs import H264Decoder as DecoderCode
    from tatolab._builtins.codecs import H264Encoder as EncoderCode
    from tatolab._sdk.nodes import create
    from tatolab._surfaces.frame import VideoFrame
    from tatolab.testing import FakeContext

    _needs_ffprobe()
    bags, ctx, sources = _encoded(EncoderCode, {"tune": None, "preset": "medium", "encoder": "libx264"}, frames=45)
    assert ctx.run.metrics["encoder"] == "libx264" and ctx.run.metrics["hardware"] is False
    assert any("decode_timestamp_ns" in b for b in bags), "x264's medium preset uses B-frames"
    assert sorted(b["timestamp_ns"] for b in bags) == sorted(sources)  # every frame's own stamp, exactly
    decoder = create(DecoderCode, {}, node="decoder")
    dctx = FakeContext(DecoderCode, node="decoder", links={"packets": ["encoder/packets->decoder/packets"]})
    stamps = []
    for bag in bags:
        dctx.feed("packets", bag)
        decoder.process(dctx)
        for frame in map(VideoFrame.open, dctx.run.outputs["video"]):
            error = abs(frame.cpu()[..., :3].astype(int) - sources[frame.timestamp_ns][..., :3].astype(int)).mean()
            assert error < 3.0, (frame.timestamp_ns, error)
            stamps.append(frame.timestamp_ns)
            frame.release()
        dctx.run.outputs["video"].clear()
    assert len(stamps) >= 40 and stamps == sorted(stamps)  # decoded in presentation order, each with its stamp
    sink, sctx = _sink(tmp_path, {})
    _feed(sink, sctx, bags)
    sink.teardown(sctx)
    (track,) = _tracks(tmp_path / "rec.mp4")
    assert track["packets"] == 45 and abs(track["end"] - 1.5) < 1e-3, track
    _decodes(tmp_path / "rec.mp4")


def test_rotation_by_duration_starts_numbered_files_at_keyframes(pool, tmp_path):
    _needs_ffprobe()
    from tatolab._builtins.codecs import H264Encoder as EncoderCode

    bags, ectx, _ = _encoded(EncoderCode, {"keyframe_interval": 15}, frames=105)  # 3.5 s, a keyframe each 0.5 s
    if ectx.run.metrics["encoder"] == "libx264":  # no GPU: the hardware ones were tried first, and the log says why
        assert ectx.run.metrics["hardware"] is False
        assert ectx.run.metrics["could_not_open"] == ["h264_nvenc", "h264_vaapi"]
        (line,) = [line for line in ectx.run.messages() if "encoding 160x96" in line]
        assert "with libx264 (software); could not open h264_nvenc: " in line and "h264_vaapi: " in line, line
    else:
        assert ectx.run.metrics["encoder"] == "h264_nvenc" and ectx.run.metrics["hardware"] is True
    sink, ctx = _sink(tmp_path, {"rotate_seconds": 1})
    _feed(sink, ctx, bags)
    sink.teardown(ctx)
    files = sorted(p.name for p in tmp_path.glob("*.mp4"))
    assert files == ["rec-0001.mp4", "rec-0002.mp4", "rec-0003.mp4", "rec-0004.mp4"], files
    durations = [_tracks(tmp_path / name)[0]["end"] for name in files]
    assert [round(d, 3) for d in durations] == [1.0, 1.0, 1.0, 0.5], durations
    assert ctx.run.metrics["files"] == 4


def test_rotation_by_size_and_an_existing_recording_is_never_overwritten(pool, tmp_path):
    _needs_ffprobe()
    from tatolab._builtins.codecs import H264Encoder as EncoderCode

    (tmp_path / "rec.mp4").write_bytes(b"an earlier recording")
    bags, _, _ = _encoded(EncoderCode, {"keyframe_interval": 10}, frames=60)
    sink, ctx = _sink(tmp_path, {})
    _feed(sink, ctx, bags[:30])
    sink.teardown(ctx)
    assert (tmp_path / "rec.mp4").read_bytes() == b"an earlier recording"
    assert _tracks(tmp_path / "rec-0001.mp4")[0]["packets"] == 30
    total = sum(len(b["data"]) for b in bags)
    sink, ctx = _sink(tmp_path, {"rotate_mb": total / 3 / 1e6})
    _feed(sink, ctx, bags)
    sink.teardown(ctx)
    rotated = sorted(tmp_path.glob("rec-*.mp4"))[1:]
    assert len(rotated) >= 2, rotated
    assert sum(_tracks(p)[0]["packets"] for p in rotated) == 60  # nothing lost between files


def test_a_link_that_joins_later_starts_a_new_file_holding_both_tracks(pool, tmp_path):
    _needs_ffprobe()
    from tatolab._builtins.codecs import H264Encoder as EncoderCode
    from tatolab._builtins.codecs import H265Encoder as HevcCode

    first, _, _ = _encoded(EncoderCode, {"keyframe_interval": 10}, frames=60)
    second, _, _ = _encoded(HevcCode, {"keyframe_interval": 10}, frames=30, start_ns=10**12 + 1_000_000_000)
    a, b = "a/packets->sink/tracks", "b/packets->sink/tracks"
    sink, ctx = _sink(tmp_path, {}, links=(a,))
    _feed(sink, ctx, first[:30], link=a)
    ctx.add_link("tracks", b)
    for one, two in zip(first[30:], second):
        _feed(sink, ctx, [one], link=a)
        _feed(sink, ctx, [two], link=b)
    sink.teardown(ctx)
    assert [t["codec"] for t in _tracks(tmp_path / "rec.mp4")] == ["h264"]
    both = _tracks(tmp_path / "rec-0001.mp4")
    assert sorted(t["codec"] for t in both) == ["h264", "hevc"]
    assert all(abs(t["end"] - 1.0) < 1e-3 for t in both), both
    assert any("a new file" in line or "recording 2 track" in line for line in ctx.run.messages()), ctx.run.logs


# -- through a runtime ------------------------------------------------------------------------

@pytest.fixture
def av_venv() -> Path:
    """A project environment with tatolab, numpy and PyAV, for a node that makes Opus packets
    itself: the tests' own (it has the runtime extra), as bench/*.py use it."""
    pytest.importorskip("av")
    return Path(sys.prefix)


def _needs_ffprobe() -> None:
    if shutil.which("ffprobe") is None:
        pytest.skip("ffprobe is not installed (apt-get install ffmpeg; .ci/run does it)")


CHECKER = '''
import json
import numpy as np
from tatolab.stream import RuntimeContextLimitedAccess, VideoFrame, node


@node
class Compare:
    """Keeps the source frames by timestamp and compares each decoded frame with the one it came from."""

    @node.input(delivery_profile="ordered")
    def source(self) -> dict: ...

    @node.input(delivery_profile="ordered")
    def decoded(self) -> dict: ...

    def __init__(self) -> None:
        self.sources = {}

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        frame = ctx.inputs.read("source", into=VideoFrame)
        if frame is not None:
            self.sources[frame.timestamp_ns] = np.array(frame.cpu()[..., :3], dtype=np.float64)
            frame.release()
            while len(self.sources) > 120:
                self.sources.pop(min(self.sources))
        frame = ctx.inputs.read("decoded", into=VideoFrame)
        if frame is None:
            return
        source = self.sources.get(frame.timestamp_ns)
        row = {"timestamp_ns": frame.timestamp_ns, "matched": source is not None,
               "shape": list(frame.cpu().shape)}
        if source is not None:
            error = np.abs(np.asarray(frame.cpu()[..., :3], dtype=np.float64) - source)
            mse = float((error ** 2).mean())
            row.update(mae=float(error.mean()), psnr=99.0 if mse == 0 else float(10 * np.log10(255 ** 2 / mse)))
        frame.release()
        with open("compare.jsonl", "a") as f:
            f.write(json.dumps(row) + "\\n")
'''


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["H264", "H265"])
def test_pattern_through_encoder_and_decoder_comes_back_equal_within_codec_tolerance(runtime, video_venv, tmp_path,
                                                                                      codec):
    project = make_project(tmp_path / "roundtrip", video_venv, {
        "stream.py": f'''
            from tatolab.stream import {codec}Decoder, {codec}Encoder, StreamBuilder, TestPatternSource, stream
            from nodes.compare import Compare


            @stream
            def roundtrip(stream_builder: StreamBuilder) -> None:
                pattern = stream_builder.add(TestPatternSource, config={{"width": 320, "height": 180, "fps": 20}})
                encoder = stream_builder.add({codec}Encoder, name="encoder", config={{"bitrate": 2_000_000}})
                decoder = stream_builder.add({codec}Decoder, name="decoder")
                compare = stream_builder.add(Compare, name="compare")
                stream_builder.connect(pattern.output("video"), encoder.input("video"))
                stream_builder.connect(encoder.output("packets"), decoder.input("packets"))
                stream_builder.connect(pattern.output("video"), compare.input("source"))
                stream_builder.connect(decoder.output("video"), compare.input("decoded"))
        ''',
        "nodes/__init__.py": "",
        "nodes/compare.py": CHECKER,
    })
    runtime.popen_cli("run", cwd=project)
    rows = wait_for(lambda: (lambda r: r if len([x for x in r if x["matched"]]) >= 20 else None)(
        read_jsonl(project / "compare.jsonl")), timeout=90, what="20 decoded frames matched to their sources")
    matched = [r for r in rows if r["matched"]]
    assert all(r["shape"] == [180, 320, 4] for r in rows)
    # every decoded frame carries its source frame's timestamp exactly (a frame the checker no
    # longer holds would be unmatched; it keeps the last 120)
    assert len(matched) == len(rows), [r for r in rows if not r["matched"]][:3]
    assert max(r["mae"] for r in matched) < 3.0, matched
    assert min(r["psnr"] for r in matched) > 30.0, matched
    encoder = graph_node(runtime, "roundtrip", "encoder")["metrics"]
    software = {"H264": "libx264", "H265": "libx265"}[codec]
    assert encoder["encoder"] in (software, f"{'h264' if codec == 'H264' else 'hevc'}_nvenc")  # named in graph
    assert encoder["hardware"] is (encoder["encoder"] != software)
    assert encoder["frames"] >= 1 and encoder["width"] == 320
    decoder = graph_node(runtime, "roundtrip", "decoder")["metrics"]
    assert decoder["codec"] == ("h264" if codec == "H264" else "hevc") and decoder["bad"] == 0


def _tracks(path: Path) -> list[dict]:
    """Per stream, from ffprobe's packets: codec, first pts and end (last pts + duration) in seconds."""
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "stream=index,codec_type,codec_name,start_time,duration:"
         "packet=stream_index,pts_time,"
         "duration_time", "-of", "json", str(path)], capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    data = json.loads(probe.stdout)
    tracks = []
    for stream in data["streams"]:
        packets = [p for p in data["packets"] if p["stream_index"] == stream["index"]]
        assert packets, f"stream {stream} has no packets"
        starts = [float(p["pts_time"]) for p in packets]
        ends = [float(p["pts_time"]) + float(p.get("duration_time") or 0) for p in packets]
        if stream.get("duration") not in (None, "N/A"):  # packets with B-frames may carry no duration
            ends.append(float(stream.get("start_time") or 0) + float(stream["duration"]))
        tracks.append({"type": stream["codec_type"], "codec": stream["codec_name"], "packets": len(packets),
                       "start": min(starts), "end": max(ends)})
    return tracks


def _decodes(path: Path) -> str:
    """What ffmpeg says while decoding every frame of the file (empty: nothing wrong)."""
    done = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "null", "-"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr


def _sink_metrics(runtime: Runtime) -> dict:
    """The sink's metrics in graph; {} until the stream is listed (the `run` command is loading it)."""
    done = runtime.cli("graph", "--stream", "rec")
    if done.returncode != 0:
        assert "no stream named rec" in done.stderr, done.stderr
        return {}
    nodes = [n for s in json.loads(done.stdout)["streams"] for n in s["nodes"] if n["name"] == "sink"]
    return nodes[0]["metrics"] if nodes else {}


def _recording(runtime: Runtime, at_least_ms: float, tracks: int = 1) -> dict:
    return wait_for(lambda: (lambda m: m if len(m.get("tracks") or []) == tracks
                             and m["recorded_ms"] >= at_least_ms else None)(_sink_metrics(runtime)),
                    timeout=90, what=f"{at_least_ms} ms recorded on {tracks} track(s)")


def _kill_runtime(runtime: Runtime) -> tuple[dict, int]:
    """SIGKILL the runtime right after reading the sink's metrics; (metrics, when it was killed)."""
    metrics = graph_node(runtime, "rec", "sink")["metrics"]
    sink_pid = graph_node(runtime, "rec", "sink")["pid"]
    runtime.node_pids()  # remembered for the leak check
    runtime.stop(signal.SIGKILL)
    killed_ns = time.monotonic_ns()
    wait_for(lambda: _gone(sink_pid), timeout=15, what="the sink to die with the runtime")
    return metrics, killed_ns


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _clean_after_kill(runtime: Runtime) -> None:
    if runtime.process is None:  # killed: the next runtime reaps what it left
        runtime.start()
    # (still running: the test failed before the kill, and this one is stopped as it is)
    runtime.end_commands()
    runtime.stop()
    assert runtime.leftover_processes() == []
    assert runtime.shm_files() == []


def _within_one_fragment(track: dict, metrics: dict, killed_ns: int, frame_s: float) -> None:
    """The file holds what the sink had at the metrics, less at most one fragment, and nothing
    that did not exist when the runtime died."""
    recorded_s = metrics["recorded_ms"] / 1000
    assert track["end"] >= recorded_s - FRAGMENT_S - frame_s - 0.005, (track, recorded_s)
    assert track["end"] <= (killed_ns - metrics["origin_ns"]) / 1e9 + frame_s, (track, recorded_s)


RECORD_STREAM = '''
from tatolab.stream import H264Encoder, Mp4Sink, StreamBuilder, TestPatternSource, stream


@stream
def rec(stream_builder: StreamBuilder) -> None:
    pattern = stream_builder.add(TestPatternSource, config={"width": 320, "height": 180, "fps": 30})
    encoder = stream_builder.add(H264Encoder, name="encoder", config={"keyframe_interval": 30})
    sink = stream_builder.add(Mp4Sink, name="sink", config={"path": "out/rec.mp4"})
    stream_builder.connect(pattern.output("video"), encoder.input("video"))
    stream_builder.connect(encoder.output("packets"), sink.input("tracks"))
'''


@pytest.mark.slow
def test_a_recording_stays_playable_when_the_sink_or_the_runtime_is_killed(video_venv, tmp_path):
    _needs_ffprobe()
    runtime = Runtime(tmp_path / "rt").start()
    project = make_project(tmp_path / "rec", video_venv, {"stream.py": RECORD_STREAM})
    try:
        runtime.popen_cli("run", cwd=project)
        _recording(runtime, 1500)
        # the sink alone, killed: the runtime restarts it, and it records into a new file
        sink_pid = graph_node(runtime, "rec", "sink")["pid"]
        first = _sink_metrics(runtime)
        psutil.Process(sink_pid).kill()
        first_killed_ns = time.monotonic_ns()
        wait_for(lambda: (lambda m: m if (m.get("file") or "").endswith("rec-0001.mp4")
                          and m["recorded_ms"] >= 1500 else None)(_sink_metrics(runtime)),
                 timeout=90, what="the restarted sink to record into rec-0001.mp4")
        # then the whole runtime
        second, killed_ns = _kill_runtime(runtime)
    finally:
        _clean_after_kill(runtime)
    assert first["files"] == 1 and first["fragments"] >= 10
    for name, metrics, killed in (("rec.mp4", first, first_killed_ns), ("rec-0001.mp4", second, killed_ns)):
        (track,) = _tracks(project / "out" / name)
        assert track["type"] == "video" and track["codec"] == "h264"
        _within_one_fragment(track, metrics, killed, frame_s=1 / 30)
        _decodes(project / "out" / name)


@pytest.mark.slow
def test_two_video_links_into_one_sink_are_two_tracks(runtime, video_venv, tmp_path):
    _needs_ffprobe()
    project = make_project(tmp_path / "two", video_venv, {"stream.py": '''
        from tatolab.stream import H264Encoder, H265Encoder, Mp4Sink, StreamBuilder, TestPatternSource, stream


        @stream
        def rec(stream_builder: StreamBuilder) -> None:
            bars = stream_builder.add(TestPatternSource, name="bars", config={"width": 320, "height": 180})
            ramp = stream_builder.add(TestPatternSource, name="ramp",
                                      config={"width": 256, "height": 144, "pattern": "ramp"})
            h264 = stream_builder.add(H264Encoder, name="h264")
            h265 = stream_builder.add(H265Encoder, name="h265")
            sink = stream_builder.add(Mp4Sink, name="sink", config={"path": "two.mp4"})
            stream_builder.connect(bars.output("video"), h264.input("video"))
            stream_builder.connect(ramp.output("video"), h265.input("video"))
            stream_builder.connect(h264.output("packets"), sink.input("tracks"))
            stream_builder.connect(h265.output("packets"), sink.input("tracks"))
    '''})
    runtime.popen_cli("run", cwd=project)
    metrics = _recording(runtime, 1000, tracks=2)
    assert sorted(t["link"] for t in metrics["tracks"]) == ["h264/packets->sink/tracks", "h265/packets->sink/tracks"]
    runtime.cli("stop", "rec", check=True)
    tracks = _tracks(project / "two.mp4")
    assert sorted((t["type"], t["codec"]) for t in tracks) == [("video", "h264"), ("video", "hevc")]
    # recorded side by side on one clock, in step: at the stop, the slower encoder's last frames may still be in its
    # queue (0.22 s behind at load average 15 here); 1 s holds at ten times that load, while a track on another
    # clock would be off by the runtime's uptime
    assert abs(tracks[0]["end"] - tracks[1]["end"]) < 1.0, tracks
    _decodes(project / "two.mp4")


TONE = threaded_source(
    "Tone", "packets", "A 440 Hz tone as Opus packets (48 kHz stereo, 20 ms each), paced by the monotonic clock.",
    head='''
import time
from fractions import Fraction

import av
import numpy as np
from tatolab._sdk.packets import EncodedPacket
from tatolab.stream import node
''',
    run='''
encoder = av.CodecContext.create("libopus", "w")
encoder.sample_rate, encoder.layout, encoder.format = 48000, "stereo", "s16"
encoder.time_base = Fraction(1, 48000)
encoder.open()
start, sent, n = time.monotonic_ns(), 0, 960
while not self.stopping.is_set():
    tone = (np.sin(2 * np.pi * 440 * (sent + np.arange(n)) / 48000) * 8000).astype(np.int16)
    frame = av.AudioFrame.from_ndarray(np.repeat(tone, 2)[None, :], format="s16", layout="stereo")
    frame.sample_rate, frame.pts, frame.time_base = 48000, sent, Fraction(1, 48000)
    sent += n
    for packet in encoder.encode(frame):
        ctx.outputs.write("packets", EncodedPacket(
            codec="opus", data=bytes(packet), timestamp_ns=start + packet.pts * 1_000_000_000 // 48000,
            duration_ns=packet.duration * 1_000_000_000 // 48000, keyframe=True,
            extradata=bytes(encoder.extradata), encoder="libopus", sample_rate=48000, channels=2,
        ).to_bag())
    self.stopping.wait(max(0.0, (start + sent * 1_000_000_000 // 48000 - time.monotonic_ns()) / 1e9))
''',
)


@pytest.mark.slow
def test_an_opus_track_beside_video_survives_the_runtime_being_killed(av_venv, tmp_path):
    _needs_ffprobe()
    runtime = Runtime(tmp_path / "rt").start()
    project = make_project(tmp_path / "av", av_venv, {
        "stream.py": '''
            from tatolab.stream import H264Encoder, Mp4Sink, StreamBuilder, TestPatternSource, stream
            from nodes.tone import Tone


            @stream
            def rec(stream_builder: StreamBuilder) -> None:
                pattern = stream_builder.add(TestPatternSource, config={"width": 320, "height": 180, "fps": 30})
                encoder = stream_builder.add(H264Encoder, name="encoder")
                tone = stream_builder.add(Tone, name="tone")
                sink = stream_builder.add(Mp4Sink, name="sink", config={"path": "av.mp4"})
                stream_builder.connect(pattern.output("video"), encoder.input("video"))
                stream_builder.connect(encoder.output("packets"), sink.input("tracks"))
                stream_builder.connect(tone.output("packets"), sink.input("tracks"))
        ''',
        "nodes/__init__.py": "",
        "nodes/tone.py": TONE,
    })
    try:
        runtime.popen_cli("run", cwd=project)
        _recording(runtime, 1500, tracks=2)
        metrics, killed_ns = _kill_runtime(runtime)
    finally:
        _clean_after_kill(runtime)
    tracks = {t["type"]: t for t in _tracks(project / "av.mp4")}
    assert (tracks["video"]["codec"], tracks["audio"]["codec"]) == ("h264", "opus")
    for track in tracks.values():
        _within_one_fragment(track, metrics, killed_ns, frame_s=1 / 30)
    assert abs(tracks["video"]["end"] - tracks["audio"]["end"]) <= FRAGMENT_S + 1 / 30, tracks
    # in sync: each track starts where its first packet's timestamp puts it on the shared clock
    firsts = {t["codec"]: t["first_ns"] for t in metrics["tracks"]}
    for track in tracks.values():
        assert abs(track["start"] - (firsts[track["codec"]] - metrics["origin_ns"]) / 1e9) < 0.002, (track, firsts)
    _decodes(project / "av.mp4")
