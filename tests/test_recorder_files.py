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


_READ_UNDER_A_CAP = """
import resource, sys
from pathlib import Path
cap = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))  # the bomb may not take the machine with it
from tatolab._recorder.reading import Recording, RecordingError
try:
    recording = Recording(Path(sys.argv[1]))
    channel = recording.channel(None)
    said = f"played {sum(1 for _ in recording.messages(channel, None, None))} messages"
except RecordingError as exc:
    said = f"refused: {exc}"
print(said)
print(next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) // 1024)
"""
_CAP = 1 << 30  # address space: the budget, the interpreter and its libraries, far below a bomb


def _read_capped(path: Path) -> tuple[str, int]:
    """What McapSource's reading says of ``path`` in a process capped at 1 GiB, and its peak RSS in MB
    (VmHWM: the process's own, not a parent's that ru_maxrss keeps across exec)."""
    import sys

    done = subprocess.run([sys.executable, "-c", _READ_UNDER_A_CAP, str(path), str(_CAP)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    said, peak = done.stdout.strip().splitlines()
    return said, int(peak)


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_a_decompression_bomb_is_refused_in_one_line_within_the_budget(tmp_path, compression):
    """A chunk declaring 2 GB uncompressed is refused before a byte is decompressed; one declaring
    1 MB that holds 2 GB is stopped one byte past its 1 MB. Either is one line naming the file, in a
    process that never holds more than its budget (the mcap library allocated the 2 GB)."""
    from mcap_bombs import bomb

    from tatolab._recorder.bounded import BUDGET_BYTES

    honest, liar = tmp_path / "honest.mcap", tmp_path / "liar.mcap"
    size = bomb(honest, compression, 2 << 30, 2 << 30)
    assert size < 10 << 20  # a small file...
    bomb(liar, compression, 2 << 30, 1 << 20)
    said, peak = _read_capped(honest)
    assert said.startswith(f"refused: {honest}: the chunk at byte ") and "passes McapSource's budget of 256.0 MB" in said
    assert "\n" not in said
    assert peak < 150, f"{peak} MB to refuse it"
    said, peak = _read_capped(liar)
    assert said == (f"refused: {liar}: the chunk at byte 109 holds more than the 1048576 bytes it declares: "
                    "the file is damaged or made to exhaust memory")
    assert peak < 150 + BUDGET_BYTES // 2**20


def test_a_long_recording_without_an_index_is_scanned_and_played_in_bounded_memory(tmp_path):
    """A million messages and no index (the recorder killed): setup's scan keeps counts, not a list of
    every message's time (36 bytes a message: 1.7 GB for a 2 GB file of small ones), and playback
    holds one chunk at a time. The interpreter and its libraries take about 46 MB here."""
    from mcap_bombs import many_messages

    path = tmp_path / "long.mcap"
    many_messages(path, 1_000_000)
    said, peak = _read_capped(path)
    assert said == "played 1000000 messages"
    assert peak < 64, f"{peak} MB to play it"


def test_a_damaged_file_says_it_is_damaged_not_that_it_has_no_channels(tmp_path):
    path = tmp_path / "all.mcap"
    _write(path, finish=False, chunk_seconds=0)
    data = path.read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(data[:40])  # the header and a torn record: no channel survived
    with pytest.raises(RecordingError) as caught:
        Recording(cut).channel(None)
    assert str(caught.value) == (f"{cut} has no channel to replay: the file (40 bytes) is damaged or was cut short "
                                 "before its first channel; record it again with `tatolab record ... --out FILE.mcap`")
    assert "say which with address=" not in str(caught.value)


def test_a_full_disk_before_the_first_chunk_says_the_file_holds_no_message(tmp_path, monkeypatch):
    """The disk takes the header and a part of the first chunk, then nothing: the file is cut back
    to its header, the size said is the file's, and the summary says no message is in it."""
    from tatolab._cli.record import summary_lines

    path = tmp_path / "full.mcap"
    f = McapFile(path, chunk_seconds=0)
    channel = f.channel("s/counter/count", "json", BAGS[:1])
    real_write, room = os.pwritev, [40]  # after the header: a part of the first chunk, then no more

    def write(fd: int, buffers, offset: int) -> int:  # as a full disk does: a short write, then ENOSPC
        if fd != f._out.fd:
            return real_write(fd, buffers, offset)
        n = min(sum(len(b) for b in buffers), room[0])
        if n == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        room[0] -= n
        return os.pwrite(fd, b"".join(bytes(b) for b in buffers)[:n], offset)

    monkeypatch.setattr(mcap_file.os, "pwritev", write)
    with pytest.raises(DiskFull):
        for i, bag in enumerate(BAGS * 100):
            f.add(channel, 1_000 + i, 1_000 + i, formats.encode_json(bag), i)
    monkeypatch.undo()
    assert f.size == path.stat().st_size and f.chunks_on_disk == 0
    row = {"state": "ended", "seconds": 0.4, "path": str(path), "bytes": f.size, "indexed": False,
           "readable": False, "reason": "disk full",
           "channels": {"s/counter/count": {"kind": "json", "bags": 0, "dropped": 0, "bytes": 0}}}
    first = summary_lines(row)[0]
    assert first == (f"recorded 0.4 s to {path} ({f.size} B, no message in it: the disk was full before its "
                     "first chunk); ended: disk full")


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_each_compression_the_recorder_writes_is_read_back_chunk_by_chunk(tmp_path, compression):
    path = tmp_path / "c.mcap"
    f = McapFile(path, compression=compression, chunk_seconds=0)  # a chunk per message
    channel = f.channel("s/counter/count", "json", BAGS[:formats.SCHEMA_SAMPLE])
    for i, bag in enumerate(BAGS * 5):
        f.add(channel, 1_000 + i, 1_000 + i, formats.encode_json(bag), i)
    f.finish()
    recording = Recording(path)
    counts = recording.channel(None)
    assert recording.indexed and counts.count == len(BAGS) * 5
    assert [bag_of(counts, d)[0] for _, d in recording.messages(counts, None, None)] == BAGS * 5
    assert [t for t, _ in recording.messages(counts, 1_010, 1_012)] == [1_010, 1_011, 1_012]


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_a_chunk_of_thousands_of_small_bags_is_written_whole(tmp_path, compression):
    """A second of a 1 kHz output in one chunk: uncompressed, more buffers than one pwritev takes
    (IOV_MAX); the recorder once ended with EINVAL half a second into such a recording."""
    path = tmp_path / "many.mcap"
    f = McapFile(path, compression=compression, chunk_seconds=3600)  # one chunk, closed by finish
    channel = f.channel("s/ticker/ticks", "json", [{"n": 0}])
    count = 5000
    for i in range(count):
        f.add(channel, 1_000 + i, 1_000 + i, formats.encode_json({"n": i}), i)
    f.finish()
    recording = Recording(path)
    ticks = recording.channel(None)
    assert recording.indexed and ticks.count == count
    assert [bag_of(ticks, d)[0]["n"] for _, d in recording.messages(ticks, None, None)] == list(range(count))


def test_a_recorder_that_crashed_is_told_with_the_last_line_it_said():
    import asyncio
    import types

    from tatolab._runtime.lifecycle.recordings import _last_words

    async def said(text: bytes) -> str:
        stderr = asyncio.StreamReader()
        stderr.feed_data(text)
        stderr.feed_eof()
        return await _last_words(types.SimpleNamespace(stderr=stderr))  # type: ignore[arg-type]

    traceback = b"Traceback (most recent call last):\n  File \"x.py\", line 1\nOSError: [Errno 22] Invalid argument\n\n"
    assert asyncio.run(said(traceback)) == "OSError: [Errno 22] Invalid argument"
    assert asyncio.run(said(b"")) == ""
