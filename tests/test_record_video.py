"""Video recorded as video: frames above 640x360 (or any, with --video h264) encoded by the recorder
as foxglove.CompressedVideo with keyframe flags, an encoder's packets written as they are, and
McapSource decoding them back to frames, from the keyframe before its start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcap.reader import make_reader

from harness import make_project, wait_for
from test_record import SINK

pytestmark = pytest.mark.slow

SOURCES = '''
from tatolab.stream import H264Encoder, StreamBuilder, TestPatternSource, stream


@stream
def src(stream_builder: StreamBuilder) -> None:
    big = stream_builder.add(TestPatternSource, name="big", config={"width": 800, "height": 448, "fps": 15})
    small = stream_builder.add(TestPatternSource, name="small", config={"width": 160, "height": 96, "fps": 15})
    encoder = stream_builder.add(H264Encoder, name="encoder", config={"keyframe_interval": 15})
    stream_builder.connect(small.output("video"), encoder.input("video"))
'''

REPLAY = '''
from tatolab.stream import McapSource, StreamBuilder, stream
from nodes.sink import Pixels


@stream
def replay(stream_builder: StreamBuilder) -> None:
    video = stream_builder.add(McapSource, name="video",
                               config={"path": "rec.mcap", "address": "src/big/video", "start": START})
    pixels = stream_builder.add(Pixels, name="pixels")
    stream_builder.connect(video.output("bags"), pixels.input("video"))
'''


def _compressed(path: Path, topic: str) -> list:
    from tatolab._recorder import compressed

    with open(path, "rb") as f:
        found = [(schema, message) for schema, channel, message in make_reader(f).iter_messages(topics=[topic])]
    assert found and all(schema.name == "foxglove.CompressedVideo" for schema, _ in found), topic
    return [(message.log_time, compressed.decode(message.data)) for _, message in found]


def _decodes(packets: list) -> list:
    import av

    decoder = av.CodecContext.create("h264", "r")
    pictures = []
    for _, bag in packets:
        pictures += decoder.decode(av.Packet(bag["data"]))
    return pictures


def test_frames_and_packets_are_recorded_as_compressed_video_and_replayed_from_the_keyframe_before_start(
        video_venv, runtime, tmp_path):
    import numpy as np

    from tatolab._builtins.test_pattern import background, square_at
    from tatolab._sdk.builtins import TestPatternConfig

    files = {"stream.py": SOURCES, "nodes/__init__.py": "", "nodes/sink.py": SINK}
    runtime.cli("run", "-d", cwd=make_project(tmp_path / "src", video_venv, files), check=True)
    wait_for(lambda: runtime.cli("tap", "src/encoder/packets", "--count", "1").returncode == 0,
             timeout=60, what="the encoder's first packet")
    replay = make_project(tmp_path / "replay", video_venv, {**files, "stream.py": REPLAY.replace("START", "1.5")})
    out = replay / "rec.mcap"
    done = runtime.cli("record", "src/big/video", "src/small/video", "src/encoder/packets", "--out", str(out),
                       "--seconds", "4", check=True)
    assert "indexed" in done.stdout, done.stdout
    # 800x448 (above 640x360): H.264 by default; 160x96: raw by default
    big = _compressed(out, "src/big/video")
    assert big[0][1]["keyframe"] is True and big[0][1]["codec"] == "h264"
    assert sum(1 for _, bag in big if bag["keyframe"]) >= 3  # one a second
    pictures = _decodes(big)
    assert len(pictures) >= len(big) - 2 and (pictures[0].width, pictures[0].height) == (800, 448)
    with open(out, "rb") as f:
        topics = {c.topic: c for c in make_reader(f).get_summary().channels.values()}  # type: ignore[union-attr]
    assert topics["src/small/video"].message_encoding == "protobuf"
    # the encoder's packets as they were: same bytes, parameter sets before each keyframe, decodable
    packets = _compressed(out, "src/encoder/packets")
    assert packets[0][1]["keyframe"] is True and packets[0][1]["encoder"]
    assert _decodes(packets)
    # --video raw keeps even a large output's pixels
    raw = tmp_path / "raw.mcap"
    runtime.cli("record", "src/big/video", "--video", "raw", "--out", str(raw), "--bags", "3", check=True)
    with open(raw, "rb") as f:
        (schema,) = make_reader(f).get_summary().schemas.values()  # type: ignore[union-attr]
    assert schema.name == "foxglove.RawImage"
    runtime.cli("stop", "src", check=True)

    # McapSource from 1.5 s: decoding starts at the keyframe before it; the frames sent start at 1.5 s
    with open(out, "rb") as f:
        first_ns = make_reader(f).get_summary().statistics.message_start_time  # type: ignore[union-attr]
    start_ns = first_ns + 1_500_000_000  # McapSource's start counts from the file's first message
    expected_first = next(bag["frame_index"] for t, bag in big if t >= start_ns)
    runtime.cli("run", "-d", cwd=replay, check=True)
    later = [bag["frame_index"] for t, bag in big if t >= start_ns]
    wait_for(lambda: len(list(replay.glob("frame-*.npy"))) >= len(later) - 2, timeout=90,
             what=f"the {len(later)} frames from 1.5 s on to come out of McapSource")
    indexes = sorted(int(p.stem.split("-")[1]) for p in replay.glob("frame-*.npy"))
    assert indexes[0] == expected_first, (indexes[:3], expected_first)
    pattern = TestPatternConfig(width=800, height=448, fps=15)
    for index in (indexes[0], indexes[-1]):
        replayed = np.load(replay / f"frame-{index}.npy").astype(int)
        expected = background(pattern).copy()
        left, top, size = square_at(index, 800, 448)
        expected[top:top + size, left:left + size, :3] = 255
        assert np.abs(replayed[..., :3] - expected[..., :3]).mean() < 6  # H.264: near, not exact
    graph = json.loads(runtime.cli("graph", "--stream", "replay", check=True).stdout)
    assert next(n for n in graph["streams"][0]["nodes"] if n["name"] == "video")["state"] == "running"
