"""`tatolab record` with a real runtime: outputs into an MCAP file the `mcap` library (and
`@mcap/core` in Node) reads; McapSource plays a recording back into a stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mcap.reader import make_reader

from harness import Runtime, make_project, wait_for
from nodes_fixture import threaded_source

pytestmark = pytest.mark.slow

COUNTER = threaded_source(
    "Counter", "count", "Bags at 200 a second: n, a label and some bytes.",
    head='''
from tatolab.stream import node
''',
    run='''
n = 0
while not self.stopping.wait(0.005):
    ctx.outputs.write("count", {"n": n, "label": f"bag {n}", "raw": bytes([n % 256]) * 3, "x": n / 2})
    n += 1
''',
)

SINK = '''
import json
from tatolab.stream import VideoFrame, node


@node
class Keep:
    """Every bag it reads, as a JSON line in kept.jsonl (bytes as hex)."""

    @node.input(delivery_profile="ordered")
    def bags(self) -> dict: ...

    def setup(self, ctx) -> None:
        self.out = open("kept.jsonl", "a")

    def process(self, ctx) -> None:
        while (bag := ctx.inputs.read("bags")) is not None:
            self.out.write(json.dumps({k: v.hex() if isinstance(v, bytes) else v for k, v in bag.items()}) + "\\n")
            self.out.flush()


@node
class Brightness:
    """Each frame's index and mean brightness."""

    @node.input(delivery_profile="ordered")
    def video(self) -> dict: ...

    @node.output()
    def level(self) -> dict: ...

    def process(self, ctx) -> None:
        while (frame := ctx.inputs.read("video", into=VideoFrame)) is not None:
            ctx.outputs.write("level", {"frame_index": frame.fields["frame_index"],
                                        "mean": float(frame.cpu()[..., :3].mean())})


@node
class Pixels:
    """Each frame's index and pixels (as a .npy file named by its index)."""

    @node.input(delivery_profile="ordered")
    def video(self) -> dict: ...

    def process(self, ctx) -> None:
        import numpy as np

        while (frame := ctx.inputs.read("video", into=VideoFrame)) is not None:
            np.save(f"frame-{frame.fields['frame_index']}.npy", frame.cpu())
'''


def _project(tmp_path: Path, venv: Path, name: str, stream: str) -> Path:
    return make_project(tmp_path / name, venv, {"stream.py": stream, "nodes/__init__.py": "",
                                                 "nodes/counter.py": COUNTER, "nodes/sink.py": SINK})


SOURCES = '''
from tatolab.stream import StreamBuilder, TestPatternSource, stream
from nodes.counter import Counter


@stream
def src(stream_builder: StreamBuilder) -> None:
    stream_builder.add(TestPatternSource, config={"width": 64, "height": 48, "fps": 30})
    stream_builder.add(Counter, name="counter")
'''


def _record(runtime: Runtime, out: Path, *addresses: str, seconds: float = 2.0) -> subprocess.CompletedProcess:
    return runtime.cli("record", *addresses, "--out", str(out), "--seconds", str(seconds), check=True)


def _messages(path: Path) -> dict[str, list]:
    by_topic: dict[str, list] = {}
    with open(path, "rb") as f:
        for schema, channel, message in make_reader(f).iter_messages():
            by_topic.setdefault(channel.topic, []).append((schema, channel, message))
    return by_topic


def test_two_outputs_recorded_for_two_seconds_read_with_the_mcap_library(video_venv, runtime, tmp_path):
    project = _project(tmp_path, video_venv, "src", SOURCES)
    runtime.cli("run", "-d", cwd=project, check=True)
    wait_for(lambda: runtime.cli("tap", "src/counter/count", "--count", "1").returncode == 0,
             timeout=60, what="the counter to write")
    out = tmp_path / "made" / "here" / "two.mcap"  # the folders do not exist yet
    done = _record(runtime, out, "src/testpatternsource/video", "src/counter/count")
    assert f"-> {out}" in done.stderr
    assert f"to {out}" in done.stdout and "indexed" in done.stdout
    with open(out, "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        assert summary is not None and summary.chunk_indexes  # indexed: a summary with chunk indexes
        topics = {c.topic: c for c in summary.channels.values()}
    assert set(topics) == {"src/testpatternsource/video", "src/counter/count"}
    by_topic = _messages(out)
    counts = by_topic["src/counter/count"]
    assert counts[0][1].message_encoding == "json" and counts[0][0].encoding == "jsonschema"
    schema = json.loads(counts[0][0].data)
    assert schema["properties"]["raw"] == {"type": "string", "contentEncoding": "base64"}
    bags = [json.loads(m.data) for _, _, m in counts]
    assert 150 < len(bags) < 600, len(bags)  # ~200 a second for 2 s, on a loaded machine
    assert {"n", "label", "raw", "x"} <= set(bags[0])
    ns = [b["n"] for b in bags]
    assert ns == list(range(ns[0], ns[0] + len(ns)))  # ordered: none missed
    times = [m.log_time for _, _, m in counts]
    assert times == sorted(times) and abs(times[0] / 1e9 - time.time()) < 60  # Unix time, in order
    # publish time: the bag's origin; a source's bags originate as they are written
    assert all(m.publish_time == m.log_time for _, _, m in counts)
    frames = by_topic["src/testpatternsource/video"]
    assert frames[0][0].name == "foxglove.RawImage" and frames[0][1].message_encoding == "protobuf"
    assert 30 <= len(frames) <= 90
    for line in done.stdout.splitlines()[1:]:
        assert " 0 dropped" in line

    # left recording in the runtime: listed, then stopped by its id, with what it wrote
    kept = tmp_path / "kept.mcap"
    started = runtime.cli("record", "src/counter/count", "--out", str(kept), "--detach", check=True).stdout
    rid = started.split()[1].rstrip(":")
    assert f"`tatolab record --stop {rid}` stops it" in started
    assert f"{rid} recording" in runtime.cli("record", "--list", check=True).stdout
    stopped = runtime.cli("record", "--stop", rid, check=True).stdout
    assert f"to {kept}" in stopped and "src/counter/count" in stopped and "indexed" in stopped
    assert runtime.cli("record", "src/counter/count", "--out", str(kept), "--seconds", "-1").returncode != 0


REPLAY = '''
from tatolab.stream import McapSource, StreamBuilder, stream
from nodes.sink import Keep, Pixels


@stream
def replay(stream_builder: StreamBuilder) -> None:
    counts = stream_builder.add(McapSource, name="counts",
                                config={"path": "rec.mcap", "address": "src/counter/count", "speed": 0})
    video = stream_builder.add(McapSource, name="video",
                               config={"path": "rec.mcap", "address": "src/testpatternsource/video"})
    keep = stream_builder.add(Keep, name="keep")
    pixels = stream_builder.add(Pixels, name="pixels")
    stream_builder.connect(counts.output("bags"), keep.input("bags"))
    stream_builder.connect(video.output("bags"), pixels.input("video"))
'''


def _recorded(path: Path, topic: str) -> list:
    from tatolab._recorder.reading import Recording, bag_of

    recording = Recording(path)
    channel = recording.channel(topic)
    try:
        return [bag_of(channel, data) for _, data in recording.messages(channel, None, None)]
    finally:
        recording.close()


CAMERA = '''
from tatolab.stream import CameraSource, StreamBuilder, stream
from nodes.sink import Brightness


@stream
def watch(stream_builder: StreamBuilder) -> None:
    camera = stream_builder.add(CameraSource, name="camera", config={"device": "/dev/video-that-is-not-here"})
    brightness = stream_builder.add(Brightness, name="brightness")
    stream_builder.connect(camera.output("video"), brightness.input("video"))
'''


def test_a_recording_replays_through_mcap_source_bag_for_bag_and_pixel_for_pixel(video_venv, runtime, tmp_path,
                                                                                  monkeypatch):
    import numpy as np

    from tatolab._builtins.test_pattern import background, square_at
    from tatolab._sdk.builtins import TestPatternConfig

    source = _project(tmp_path, video_venv, "src", SOURCES)
    runtime.cli("run", "-d", cwd=source, check=True)
    wait_for(lambda: runtime.cli("tap", "src/counter/count", "--count", "1").returncode == 0,
             timeout=60, what="the counter to write")
    replay = _project(tmp_path, video_venv, "replay", REPLAY)
    _record(runtime, replay / "rec.mcap", "src/testpatternsource/video", "src/counter/count")
    runtime.cli("stop", "src", check=True)
    counts = [bag for bag, _ in _recorded(replay / "rec.mcap", "src/counter/count")]
    frames = _recorded(replay / "rec.mcap", "src/testpatternsource/video")
    assert len(counts) > 150 and len(frames) > 30

    runtime.cli("run", "-d", cwd=replay, check=True)
    kept = replay / "kept.jsonl"
    wait_for(lambda: kept.exists() and len(kept.read_text().splitlines()) >= len(counts), timeout=60,
             what=f"the {len(counts)} recorded bags to come out of McapSource")
    wait_for(lambda: len(list(replay.glob("frame-*.npy"))) >= len(frames), timeout=60,
             what=f"the {len(frames)} recorded frames to come out of McapSource")
    got = [json.loads(line) for line in kept.read_text().splitlines()]
    assert got == [{k: v.hex() if isinstance(v, bytes) else v for k, v in bag.items()} for bag in counts]

    pattern = TestPatternConfig(width=64, height=48, fps=30)
    image = background(pattern)
    for bag, pixels in frames:
        replayed = np.load(replay / f"frame-{bag['frame_index']}.npy")
        assert replayed.tobytes() == pixels  # what was recorded
        expected = image.copy()  # and what TestPatternSource drew for that frame
        left, top, size = square_at(bag["frame_index"], 64, 48)
        expected[top:top + size, left:left + size, :3] = 255
        assert np.array_equal(replayed, expected), f"frame {bag['frame_index']} differs"
    graph = json.loads(runtime.cli("graph", "--stream", "replay", check=True).stdout)
    video = next(n for n in graph["streams"][0]["nodes"] if n["name"] == "video")
    assert video["state"] == "running"

    # The pytest helper: a stream whose camera is replaced by the recording, its output collected.
    from tatolab.stream import run_with_recording

    camera = make_project(tmp_path / "camera", video_venv, {"nodes/__init__.py": "", "nodes/sink.py": SINK,
                                                            "stream.py": CAMERA})
    monkeypatch.setattr(os, "environ", runtime.env)
    levels = run_with_recording(camera, replace="camera", recording=replay / "rec.mcap", collect="brightness/level",
                                address="src/testpatternsource/video", count=10)
    first = frames[0][0]["frame_index"]
    assert [b["frame_index"] for b in levels] == list(range(first, first + 10))
    for bag, (_, pixels) in zip(levels, frames):
        assert bag["mean"] == pytest.approx(np.frombuffer(pixels, np.uint8).reshape(48, 64, 4)[..., :3].mean())
    from tatolab._control.client import Refused

    with pytest.raises(Refused, match="has no node named microphone to replay a recording in place of; "
                                        "its nodes: camera, brightness"):
        run_with_recording(camera, replace="microphone", recording=replay / "rec.mcap", collect="brightness/level",
                           count=1)


def _live_recording(runtime: Runtime) -> dict:
    graph = json.loads(runtime.cli("graph", check=True).stdout)
    return graph["recordings"][0] if graph["recordings"] else {}


def test_kill_9_of_the_recorder_leaves_a_file_read_up_to_its_last_chunk_and_ctrl_c_twice_one_indexed(
        video_venv, runtime, tmp_path):
    from mcap.exceptions import EndOfFile
    from mcap.reader import NonSeekingReader

    project = _project(tmp_path, video_venv, "src", SOURCES)
    runtime.cli("run", "-d", cwd=project, check=True)
    wait_for(lambda: runtime.cli("tap", "src/counter/count", "--count", "1").returncode == 0,
             timeout=60, what="the counter to write")
    refused = runtime.cli("record", "src/counter/nope", "--out", str(tmp_path / "never.mcap"))
    assert refused.returncode != 0 and "src/counter/count" in refused.stderr  # the outputs it has
    assert not (tmp_path / "never.mcap").exists()

    out = tmp_path / "killed.mcap"
    command = runtime.popen_cli("record", "src/counter/count", "src/testpatternsource/video", "--out", str(out))
    wait_for(lambda: _live_recording(runtime).get("seconds", 0) > 2.5, timeout=60, what="2.5 s of recording")
    row = _live_recording(runtime)
    taps = [t for s in json.loads(runtime.cli("graph", check=True).stdout)["streams"] for n in s["nodes"]
            for p in n["outputs"] for t in p["taps"]]
    assert [t["recording"] for t in taps] == [row["id"], row["id"]]  # its readers, shown as its own
    os.kill(row["pid"], signal.SIGKILL)
    stdout, stderr = command.communicate(timeout=30)
    assert command.returncode == 1, stderr
    assert "not indexed: readable up to its last chunk" in stdout
    ns = []
    with open(out, "rb") as f:
        try:
            for _, channel, message in NonSeekingReader(f).iter_messages(log_time_order=False):
                if channel.topic == "src/counter/count":
                    ns.append(json.loads(message.data)["n"])
        except EndOfFile:
            pass  # where the recorder was killed: after the last whole chunk
    assert len(ns) > 200 and ns == list(range(ns[0], ns[0] + len(ns)))  # chunks close every second

    twice = tmp_path / "twice.mcap"
    command = runtime.popen_cli("record", "src/counter/count", "--out", str(twice))
    wait_for(lambda: _live_recording(runtime).get("bags", 0) > 50, timeout=60, what="50 bags recorded")
    command.send_signal(signal.SIGINT)
    command.send_signal(signal.SIGINT)
    command.communicate(timeout=30)
    wait_for(lambda: not _live_recording(runtime), timeout=30, what="the runtime to finish the file")
    with open(twice, "rb") as f:
        summary = make_reader(f).get_summary()
    assert summary is not None and summary.statistics.message_count > 50

    # McapSource refuses, at start, a channel the file lacks (naming those it has) and a file that is not MCAP
    notes = tmp_path / "notes.mcap"
    notes.write_text("not a recording")
    for name, config in (("nochannel", {"path": str(twice), "address": "src/nope/x"}), ("notmcap", {"path": str(notes)})):
        runtime.cli("node", "add", "src", name, "McapSource", "--config", json.dumps(config))

    def log_of(name: str) -> str:  # a node added live that fails to start is removed again, its error logged
        return runtime.cli("logs", "--stream", "src", "--node", name).stdout

    wait_for(lambda: "cannot run" in log_of("nochannel") and "cannot run" in log_of("notmcap"),
             timeout=60, what="both McapSource nodes to fail at start")
    assert f"{twice} has no channel src/nope/x; its channels: src/counter/count" in log_of("nochannel")
    assert f"{notes} is not an MCAP file" in log_of("notmcap")


def test_an_agent_starts_and_stops_a_recording_over_mcp_and_sees_it_meanwhile(video_venv, runtime, tmp_path):
    import asyncio

    from test_mcp_live import session_with

    project = _project(tmp_path, video_venv, "src", SOURCES)
    victim = tmp_path / "users"

    async def agent() -> dict:
        async with asyncio.timeout(180), session_with(runtime, tmp_path) as s:
            error, text, _ = await s.call("run_stream", project=str(project))
            assert not error, text
            await asyncio.to_thread(wait_for, lambda: runtime.cli("tap", "src/counter/count", "--count", "1")
                                    .returncode == 0, 60, "the counter to write")
            tools = {t.name: t for t in (await s.session.list_tools()).tools}
            assert "must be inside the project folder of a stream it records" in tools["record_start"].description
            assert "confined" not in tools["record_start"].input_schema["properties"]
            victim.write_text("root:x:0:0\n")  # a file of the user's outside the project: /etc/passwd for root
            error, text, _ = await s.call("record_start", addresses=["src/counter/count"], out=str(victim))
            assert error and "an agent may record only inside the recorded stream's project" in text, text
            assert f"{victim} is in neither ({project}" in text
            error, text, started = await s.call("record_start", addresses=["src/counter/count"],
                                                out="src/rec/agent.mcap")
            assert not error, text
            assert started["path"] == str(project / "rec" / "agent.mcap") and started["state"] == "recording"
            error, text, listing = await s.call("list_streams")
            assert [r["id"] for r in listing["recordings"]] == [started["id"]]
            await asyncio.to_thread(wait_for, lambda: _live_recording(runtime).get("bags", 0) > 100, 60,
                                    "100 bags recorded")
            error, text, stopped = await s.call("record_stop", id=started["id"])
            assert not error, text
            error, text, _ = await s.call("recordings")
            assert not error and started["id"] in text
            return stopped

    stopped = asyncio.run(agent())
    assert stopped["state"] == "ended" and stopped["indexed"] is True and stopped["reason"] == "stopped"
    assert stopped["channels"]["src/counter/count"]["bags"] == stopped["bags"] > 100
    with open(project / "rec" / "agent.mcap", "rb") as f:
        assert make_reader(f).get_summary().statistics.message_count == stopped["bags"]
    assert victim.read_text() == "root:x:0:0\n"


def test_a_recording_never_overwrites_a_file_and_two_at_once_never_share_one(video_venv, runtime, tmp_path):
    project = _project(tmp_path, video_venv, "src", SOURCES)
    runtime.cli("run", "-d", cwd=project, check=True)
    wait_for(lambda: runtime.cli("tap", "src/counter/count", "--count", "1").returncode == 0, 60, "the counter to write")
    out = tmp_path / "recs" / "count.mcap"
    _record(runtime, out, "src/counter/count", seconds=1.0)
    kept = out.read_bytes()
    with open(out, "rb") as f:
        first_count = make_reader(f).get_summary().statistics.message_count
    again = _record(runtime, out, "src/counter/count", seconds=0.5)
    taken = tmp_path / "recs" / "count-0001.mcap"
    first_line = again.stderr.splitlines()[0]
    assert first_line.startswith(f"recording rec-2: src/counter/count -> {taken} ({out} is there already: never "
                                 "overwritten) (until 0.5 s or Ctrl-C)"), again.stderr
    assert f"to {taken} (" in again.stdout
    assert out.read_bytes() == kept and first_count > 100  # the first recording, whole
    assert (out.stat().st_mode & 0o777, out.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    both = [runtime.popen_cli("record", "src/counter/count", "--out", str(tmp_path / "recs" / "same.mcap"),
                              "--seconds", "1") for _ in range(2)]
    for process in both:
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    made = sorted(p.name for p in (tmp_path / "recs").iterdir() if p.name.startswith("same"))
    assert made == ["same-0001.mcap", "same.mcap"]
    for name in made:
        with open(tmp_path / "recs" / name, "rb") as f:
            assert make_reader(f).get_summary().statistics.message_count > 50
