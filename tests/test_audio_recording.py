"""Sound in a recording: the test pattern and a tone through the built-in encoders into Mp4Sink,
the runtime SIGKILLed, both tracks checked with ffprobe."""

from __future__ import annotations

import pytest

from harness import Runtime, make_project
from nodes_fixture import threaded_source
from test_codecs import FRAGMENT_S, _clean_after_kill, _decodes, _kill_runtime, _needs_ffprobe, _recording, _tracks

pytestmark = pytest.mark.slow

# 440 Hz as 10 ms audio blocks (48 kHz stereo f32), paced by the monotonic clock and stamped
# from the sample count, as a microphone's would be.
TONE = threaded_source(
    "Tone", "audio", "440 Hz as 10 ms audio blocks, paced by the monotonic clock.",
    head='''
import numpy as np
from tatolab.stream import AudioBlock, node

NS = 1_000_000_000
''',
    run='''
start, sent, n = ctx.time, 0, 480
while not self.stopping.is_set():
    t = (sent + np.arange(n)) / 48000
    mono = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    ctx.outputs.write("audio", AudioBlock(np.stack([mono, mono], axis=1), 48000, start + sent * NS // 48000))
    sent += n
    self.stopping.wait(max(0.0, (start + sent * NS // 48000 - ctx.time) / 1e9))
''',
)


def test_test_pattern_and_tone_through_the_encoders_into_mp4sink_survive_a_sigkill(video_venv, tmp_path):
    _needs_ffprobe()
    runtime = Runtime(tmp_path / "rt").start()
    project = make_project(tmp_path / "av", video_venv, {
        "stream.py": '''
            from tatolab.stream import H264Encoder, Mp4Sink, OpusEncoder, StreamBuilder, TestPatternSource, stream
            from nodes.tone import Tone


            @stream
            def rec(stream_builder: StreamBuilder) -> None:
                pattern = stream_builder.add(TestPatternSource, config={"width": 320, "height": 180, "fps": 30})
                video = stream_builder.add(H264Encoder, name="video")
                tone = stream_builder.add(Tone, name="tone")
                audio = stream_builder.add(OpusEncoder, name="audio", config={"bitrate": 64000, "frame_ms": 20})
                sink = stream_builder.add(Mp4Sink, name="sink", config={"path": "av.mp4"})
                stream_builder.connect(pattern.output("video"), video.input("video"))
                stream_builder.connect(tone.output("audio"), audio.input("audio"))
                stream_builder.connect(video.output("packets"), sink.input("tracks"))
                stream_builder.connect(audio.output("packets"), sink.input("tracks"))
        ''',
        "nodes/__init__.py": "",
        "nodes/tone.py": TONE,
    })
    try:
        runtime.popen_cli("run", cwd=project)
        _recording(runtime, 2000, tracks=2)
        metrics, killed_ns = _kill_runtime(runtime)
    finally:
        _clean_after_kill(runtime)
    tracks = {t["type"]: t for t in _tracks(project / "av.mp4")}
    assert (tracks["video"]["codec"], tracks["audio"]["codec"]) == ("h264", "opus")
    recorded_s = metrics["recorded_ms"] / 1000
    for track in tracks.values():  # what the sink had when the runtime died, less at most a fragment
        assert recorded_s - FRAGMENT_S - 1 / 30 - 0.005 <= track["end"] <= (killed_ns - metrics["origin_ns"]) / 1e9 + 1 / 30
    assert abs(tracks["video"]["end"] - tracks["audio"]["end"]) <= FRAGMENT_S + 1 / 30, tracks
    _decodes(project / "av.mp4")
