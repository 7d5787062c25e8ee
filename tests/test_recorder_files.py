"""MCAP files as the recorder writes them, without a runtime: bags back as they went in, a full
disk, a truncated file, and what McapSource says of a file it cannot play."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from mcap.reader import make_reader

from tatolab._recorder import file as mcap_file
from tatolab._recorder import formats
from tatolab._recorder.file import DiskFull, McapFile
from tatolab._recorder.reading import Recording, RecordingError, bag_of

BAGS = [{"n": i, "label": f"bag {i}", "raw": bytes([i]) * 3, "x": i / 2, "nested": {"b": b"\x00\xff", "l": [1, 2]}}
        for i in range(40)]
FRAME = {"surface_id": "3#9", "width": 4, "height": 2, "format": "rgba8", "timestamp_ns": 123_456_789_012,
         "frame_index": 5}
AUDIO = {"samples": bytes(range(16)), "sample_rate": 48000, "channels": 2, "format": "s16", "frames": 4,
         "first_sample_timestamp_ns": 99, "gain": 0.5}


def _write(path: Path, *, finish: bool = True, chunk_seconds: float = 1.0) -> McapFile:
    f = McapFile(path, chunk_seconds=chunk_seconds)
    counts = f.channel("s/counter/count", "json", BAGS[:formats.SCHEMA_SAMPLE])
    video = f.channel("s/cam/video", "video", [])
    audio = f.channel("s/mic/audio", "audio", [])
    for i, bag in enumerate(BAGS):
        f.add(counts, 1_000 + i, 1_000 + i, formats.encode_json(bag), i)
    f.add(video, 2_000, 2_000, formats.encode_video(FRAME, bytes(range(32)), "s/cam/video"), 1)
    f.add(audio, 2_001, 2_001, formats.encode_audio(AUDIO), 1)
    if finish:
        f.finish()
    return f


def test_bags_frames_and_audio_come_back_as_they_were_recorded(tmp_path):
    path = tmp_path / "deep" / "er" / "all.mcap"  # folders made
    _write(path)
    with open(path, "rb") as f:
        summary = make_reader(f).get_summary()
    assert {c.topic: c.message_encoding for c in summary.channels.values()} == {
        "s/counter/count": "json", "s/cam/video": "protobuf", "s/mic/audio": "protobuf"}
    assert sorted(s.name for s in summary.schemas.values()) == ["foxglove.RawAudio", "foxglove.RawImage",
                                                               "s/counter/count"]
    recording = Recording(path)
    assert recording.indexed
    counts = recording.channel("s/counter/count")
    assert [bag_of(counts, d)[0] for _, d in recording.messages(counts, None, None)] == BAGS
    video = recording.channel("s/cam/video")
    [(_, data)] = recording.messages(video, None, None)
    bag, pixels = bag_of(video, data)
    assert pixels == bytes(range(32))
    assert bag == {k: v for k, v in FRAME.items() if k != "surface_id"}
    audio = recording.channel("s/mic/audio")
    [(_, data)] = recording.messages(audio, None, None)
    assert bag_of(audio, data)[0] == AUDIO
    window = list(recording.messages(counts, 1_010, 1_019))
    assert [t for t, _ in window] == list(range(1_010, 1_020))


def test_the_json_schema_is_inferred_from_the_first_bags():
    schema = formats.infer_schema([{"a": 1, "b": b"x"}, {"a": 2.5, "c": None, "l": []}, {"l": ["s"]}], "t")
    assert schema["title"] == "t" and schema["type"] == "object"
    assert schema["properties"] == {"a": {"type": "number"}, "b": {"type": "string", "contentEncoding": "base64"},
                                    "c": {"type": "null"}, "l": {"type": "array", "items": {"type": "string"}}}
    assert json.loads(formats.encode_json({"b": b"\x01\x02"})) == {"b": "AQI="}


def test_a_file_cut_short_is_read_up_to_its_last_whole_chunk(tmp_path):
    path = tmp_path / "cut.mcap"
    f = _write(path, finish=False, chunk_seconds=0)  # every message its own chunk, as if a second passed
    os.close(f._out.fd)
    data = path.read_bytes()
    path.write_bytes(data[:-20])  # the last chunk torn, as kill -9 mid-write leaves it
    recording = Recording(path)
    assert not recording.indexed
    counts = recording.channel("s/counter/count")
    assert [bag_of(counts, d)[0] for _, d in recording.messages(counts, None, None)] == BAGS


def test_a_full_disk_stops_the_file_at_its_last_whole_record(tmp_path, monkeypatch):
    path = tmp_path / "full.mcap"
    f = McapFile(path, chunk_seconds=0)
    channel = f.channel("s/counter/count", "json", BAGS[:1])
    real_write, room = os.pwritev, [6_000]

    def write(fd: int, buffers, offset: int) -> int:  # the file's one way of writing (a chunk and its end)
        size = sum(len(b) for b in buffers)
        if fd == f._out.fd and size > room[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        room[0] -= size if fd == f._out.fd else 0
        return real_write(fd, buffers, offset)

    monkeypatch.setattr(mcap_file.os, "pwritev", write)
    written = 0
    with pytest.raises(DiskFull):
        for i, bag in enumerate(BAGS * 10):
            f.add(channel, 1_000 + i, 1_000 + i, formats.encode_json(bag), i)
            written += 1
    monkeypatch.undo()
    assert f.closed
    recording = Recording(path)
    counts = recording.channel(None)
    assert len(list(recording.messages(counts, None, None))) == written  # every message before the full disk


def test_mcap_source_refuses_a_file_that_is_not_mcap_or_lacks_the_channel(tmp_path):
    text = tmp_path / "notes.mcap"
    text.write_text("not a recording\n")
    with pytest.raises(RecordingError, match=f"{text} is not an MCAP file"):
        Recording(text)
    with pytest.raises(RecordingError, match="cannot open .*missing.mcap: No such file"):
        Recording(tmp_path / "missing.mcap")
    path = tmp_path / "all.mcap"
    _write(path)
    recording = Recording(path)
    with pytest.raises(RecordingError, match="has no channel s/cam/depth; its channels: s/cam/video, "
                                             "s/counter/count, s/mic/audio"):
        recording.channel("s/cam/depth")
    with pytest.raises(RecordingError, match="has 3 channels .*say which with address="):
        recording.channel(None)
    empty = tmp_path / "empty.mcap"
    empty.write_bytes(b"")
    with pytest.raises(RecordingError, match="is not an MCAP file"):
        Recording(empty)


@pytest.mark.slow
def test_a_file_written_here_opens_with_mcap_core_in_node(tmp_path):
    """What Foxglove's TypeScript reader makes of a recording: its channels, schemas and JSON bags."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if not (npm and node):
        pytest.skip("needs node and npm, to install @mcap/core (Foxglove's TypeScript MCAP reader)")
    installed = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent", "@mcap/core@2", "fzstd"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=180)
    if installed.returncode != 0:
        pytest.skip(f"npm could not install @mcap/core here: {installed.stderr.strip()[-300:]}")
    shutil.copy(Path(__file__).with_name("mcap_core_read.mjs"), tmp_path / "read.mjs")
    _write(tmp_path / "all.mcap")
    read = subprocess.run([node, "read.mjs", "all.mcap"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert read.returncode == 0, read.stderr
    found = json.loads(read.stdout)
    assert found["counts"] == {"s/counter/count": len(BAGS), "s/cam/video": 1, "s/mic/audio": 1}
    assert found["schemas"] == ["foxglove.RawAudio", "foxglove.RawImage", "s/counter/count"]
    assert found["first"]["s/counter/count"] == {"n": 0, "label": "bag 0", "raw": "AAAA", "x": 0,
                                                 "nested": {"b": "AP8=", "l": [1, 2]}}


def test_mcap_sources_of_one_stream_over_one_file_share_one_start(tmp_path):
    """Two McapSource nodes (their rings beside each other) get the first one's start, and so
    play the file in step; another file, or another stream, gets its own."""
    from tatolab._builtins.mcap_source import _anchor

    path = tmp_path / "rec.mcap"
    stream = str(tmp_path / "tatolab-ns-7+")
    first = _anchor(f"{stream}counts+bags", "counts", path, 1_000)
    assert first == 1_000
    assert _anchor(f"{stream}video+bags", "video", path, 2_000) == 1_000  # started later, plays in step
    assert _anchor(f"{stream}other+bags", "other", tmp_path / "other.mcap", 3_000) == 3_000
    assert _anchor(str(tmp_path / "tatolab-ns-8+video+bags"), "video", path, 4_000) == 4_000
